"""Task extraction of several networks, one after the other against one process per network, side by
side (the first step of every collection call, `data.zoo.extract_networks`).

    python benchmarks/extract_speed.py --target nvidia/nvidia-h100 --network mobilenet_v2 bert_base resnet_18

Each way runs in a fresh process (no warm imports or caches from the other); the table gives the
wall time from the call to the tasks in hand, the tasks found, and checks that both ways found the
same tasks (names, weights and structural hashes).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from jsonargparse import SUPPRESS, ArgumentParser

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _one(target: str, networks: list[str], workers: int) -> dict:
    """Extract in this process; wall time and a fingerprint of the tasks."""
    from data.zoo import extract_networks

    start = time.perf_counter()
    tasks = extract_networks(networks, target, workers=workers)
    wall = time.perf_counter() - start
    found = sorted((net, t.name, t.weight, t.workload_hash) for net, ts in tasks.items() for t in ts)
    return {"wall_s": wall, "tasks": len(found), "fingerprint": found}


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="nvidia/nvidia-h100", help="tag or JSON dict (extraction needs no GPU)")
    p.add_argument("--network", nargs="+", default=["mobilenet_v2", "bert_base", "resnet_18"])
    p.add_argument("--workers", type=int, default=None, help="processes of the parallel way (default: one per network)")
    p.add_argument("--_one", type=int, default=None, help=SUPPRESS)
    args = p.parse_args(argv)
    if args._one is not None:
        print(json.dumps(_one(args.target, args.network, args._one)))
        return 0
    ways = {"in turn (1 process)": 1, "parallel": args.workers or len(args.network)}
    rows = {}
    for label, workers in ways.items():
        cmd = [sys.executable, __file__, "--target", args.target, "--network", *args.network, "--_one", str(workers)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        rows[label] = (workers, json.loads(out.strip().splitlines()[-1]))
    print(f"target {args.target}, networks {' '.join(args.network)}")
    print("| way | processes | wall s | tasks |\n|---|---|---|---|")
    for label, (workers, r) in rows.items():
        print(f"| {label} | {workers} | {r['wall_s']:.1f} | {r['tasks']} |")
    (_, a), (_, b) = rows.values()
    same = a["fingerprint"] == b["fingerprint"]
    print(f"same tasks both ways: {same}; speedup {a['wall_s'] / b['wall_s']:.2f}x")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
