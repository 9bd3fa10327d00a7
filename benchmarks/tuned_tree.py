"""Tuned schedules as training data: the suite's measured databases written as a record tree.

    python benchmarks/tuned_tree.py --per_workload 300 --out runs/suite_tuned300_tree

The tuning suite's databases (`benchmarks/results/suite_databases`) hold schedules that a search
chose and measured, concentrated near each workload's optimum, unlike the collector's random ones.
This writes them as a tree (`data.record_tree`) that `data.featurize` takes beside `data/h100`, to
test whether such records help a model pretrained on random schedules (docs/benchmarks.md, "Tuned
schedules in pretraining").

- Arms (database folders): `--arms`, by default the suite's H100 arms (`H100_ARMS`; H200 arms are
  left out: a task's labels are latencies of one device).
- A workload of a held-out network is never written: every workload hash of a task of
  `--without_networks` in `--like` (a device folder with its index.json) is left out.
- Per workload: failed and implausible measurements dropped (`data.records.read_records`), the same
  trace measured again merged into one record with the median latency, then `--per_workload`
  records drawn with `--seed`, stratified over latency rank (the sorted records cut into that many
  equal strata, one drawn from each).
- Written as OUT/<--like's device>/tuned_<suite folder>_<hash8>/, each workload its own task, of the
  network `--network`, with `--like`'s target.
"""

from __future__ import annotations

import glob
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from jsonargparse import CLI

from data.atomic import atomic_write_text
from data.record_tree import INDEX, add_task, new_index, read_index, task_dir, write_index
from data.records import read_records

SUITE = "benchmarks/results/suite_databases"
H100_ARMS = (
    # the suite at 240 s (benchmarks/results/tuning_240), on one H100; ResNet-50's network arms are not
    # listed here, and `--without_networks` leaves out its workloads from any folder
    *(
        f"{SUITE}/{w}/*"
        for w in (
            "batch_matmul_12x128x128x64",
            "conv2d_1x35x35x192x64x1x1x0",
            "conv2d_1x35x35x64x96x3x1x1",
            "dense_128x3072x768",
            "depthwise_conv2d_1x28x28x240x5x1x2",
            "net_vit_b16_1",
        )
    ),
    # the A/Bs whose logs (benchmarks/results/ablations/logs) or sections name an H100
    *(
        f"{SUITE}/ablations/{a}/*/*"
        for a in (
            "ab2_base",
            "ab2_fill64_src512",
            "ab3_base",
            "ab3_fill64_src512",
            "ab4_fill64",
            "ab4_fill64_grace05",
            "ab5_fill64",
            "ab5_fill64_grace05",
            "ab6_r16",
            "ab6_r16_grace05",
            "backoff",
            "blend",
            "every2",
            "fill32_src512",
            "fill64",
            "gate_off",
            "gen1_backoff",
            "redraft_when_low",
            "sameday_base",
            "sameday_fill64",
            "stall3_nopipe",
            "traffic_warps",
        )
    ),
)


def stratified(latencies: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of `k` records, one drawn from each of `k` equal strata of the latency ranking (all
    when there are no more than `k`), in ascending index order."""
    order = np.argsort(latencies, kind="stable")
    if len(order) <= k:
        return np.sort(order)
    edges = np.linspace(0, len(order), k + 1).astype(int)
    return np.sort(np.array([order[rng.integers(edges[i], edges[i + 1])] for i in range(k)]))


def tuned_tree(
    out: str,
    per_workload: int = 300,
    arms: list[str] = list(H100_ARMS),  # noqa: B006 - jsonargparse shows it as the default
    like: str = "data/h100/cuda-sm_90a",
    without_networks: list[str] = ["resnet_50"],  # noqa: B006
    network: str = "suite_tuned",
    seed: int = 0,
) -> dict:
    """Write the tree; returns (and writes to OUT/tuned_tree.json) what was read and written, by task."""
    folders = sorted({p for pattern in arms for p in glob.glob(pattern) if Path(p).is_dir()})
    if not folders:
        raise ValueError(f"--arms {arms}: no database folder matches")
    like_index = read_index(Path(like))
    if like_index is None:
        raise ValueError(f"--like {like}: no {INDEX} there")
    held_out = {
        meta["workload_hash"]
        for meta in like_index["tasks"].values()
        if set(meta.get("networks", [])) & set(without_networks)
    }
    records = read_records(folders, failed="drop")
    by_workload: dict[str, dict[str, list]] = defaultdict(dict)  # hash -> trace JSON -> [record, latencies]
    home: dict[str, str] = {}  # hash -> the suite folder it was first read from (its name)
    left_out = 0  # records of held-out workloads
    for task in records.tasks.values():
        for record in task.records:
            shash = record.workload.shash
            if shash in held_out:
                left_out += 1
                continue
            home.setdefault(shash, Path(record.source.rsplit(":", 1)[0]).parent.parent.name)
            same = by_workload[shash].setdefault(json.dumps(record.trace, sort_keys=True), [record, []])
            same[1].append(record.latency)
    root = Path(out) / Path(like).name
    root.mkdir(parents=True, exist_ok=False)
    index = new_index(like_index["target"])
    rng = np.random.default_rng(seed)  # one stream, the workloads in turn
    report = {"arms": len(folders), "read": records.summary.kept, "held_out_records": left_out}
    for shash in sorted(by_workload, key=lambda h: (home[h], h)):
        kept = list(by_workload[shash].values())
        latency = np.array([float(np.median(lat)) for _, lat in kept])
        pick = stratified(latency, per_workload, rng)
        name = f"tuned_{home[shash]}"
        folder = root / task_dir(name, shash)
        folder.mkdir()
        first = kept[0][0]
        atomic_write_text(folder / "database_workload.json", json.dumps(first.workload.as_json()) + "\n")
        lines = [
            json.dumps([0, [kept[i][0].trace, [float(latency[i])], first.target, kept[i][0].args_info]]) for i in pick
        ]
        atomic_write_text(folder / "database_tuning_record.json", "\n".join(lines) + "\n")
        add_task(index, folder.name, name, 0.0, shash, {network: 1})
        report[folder.name] = {
            "measured": sum(len(lat) for _, lat in kept),
            "distinct": len(kept),
            "written": len(pick),
            "best_us": round(float(latency.min()) * 1e6, 3),
            "best_written_us": round(float(latency[pick].min()) * 1e6, 3),
        }
    write_index(root, index)
    atomic_write_text(Path(out) / "tuned_tree.json", json.dumps(report, indent=1) + "\n")
    return report


def main(argv: list[str] | None = None) -> None:
    print(json.dumps(CLI(tuned_tree, args=argv, as_positional=False), indent=1))


if __name__ == "__main__":
    main()
