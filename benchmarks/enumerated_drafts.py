"""What a network's enumerated first drafts save: the whole space ranked against it evolved.

A first draft whose samples drew each distinct schedule `bridge.drafting.ENUMERATED_DRAWS` times or
more on average has drawn its task's whole space (`bridge.drafting.enumerated`): it ranks those few
schedules instead of evolving them, and no later draft is made. For each task of a zoo network on a
CUDA target (no GPU needed), the script draws the first draft's samples once to see whether the task
is enumerated; for each task that is, it runs the task's first draft (`DraftVerifySearch` from
`SearchConfig`'s defaults, PSA drafting) with the rule, then with it switched off (the evolution it
skips), `--repeats` times each, alternating, and prints the draft seconds and draft-model scores of
both, side by side in one run.

    python benchmarks/enumerated_drafts.py --network bert_base --input-size 128 --threads 2 --out benchmarks/results/enumerated_drafts/bert_base.json
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cli import doc_parser  # noqa: E402
from benchmarks.sample_yield import pre_tuned  # noqa: E402
from bridge import drafting  # noqa: E402
from bridge.config import SearchConfig  # noqa: E402
from bridge.draft_verify import DraftVerifySearch  # noqa: E402
from bridge.search import _pairs  # noqa: E402
from data.zoo.tasks import extract_network_tasks  # noqa: E402
from tvm_env import parse_target, setup  # noqa: E402


def _strategy(task, target, threads: int, seed: int) -> DraftVerifySearch:
    """The task's search as tune.py makes it (`SearchConfig`'s defaults, PSA drafting), ready to draft."""
    return pre_tuned(
        DraftVerifySearch.from_config(SearchConfig(psa="h100")), task.mod, target, task.name, threads, seed
    )


def _first_draft(task, target, threads: int, seed: int, rule: bool) -> dict:
    strategy = _strategy(task, target, threads, seed)
    try:
        with mock.patch.object(drafting, "enumerated", drafting.enumerated if rule else (lambda *_: False)):
            result = strategy._new_draft().run()
        return {
            "enumerated": result.enumerated,
            "draft_s": result.stats["draft_s"],
            "sample_s": result.stats["sample_s"],
            "samples": result.stats["samples"],
            "distinct": len(result.samples),
            "draft_scored": result.stats["draft_scored"],
            "population": len(result.evolved),
        }
    finally:
        strategy._finish()


def _distinct_samples(task, target, threads: int, seed: int) -> tuple[int, int, bool, float]:
    """(samples, distinct, whether they drew the whole space, seconds) of the task's first draft's
    sampling alone."""
    strategy = _strategy(task, target, threads, seed)
    try:
        draft = strategy._new_draft()
        start = time.perf_counter()
        samples = drafting.sample_init(draft.sampler, draft.fresh)
        seconds = time.perf_counter() - start
        keys = [k for k, _ in _pairs(samples)]
        return len(samples), len(set(keys)), drafting.drew_whole_space(keys), seconds
    finally:
        strategy._finish()


def main(argv: list[str] | None = None) -> dict:
    parser = doc_parser(__doc__)
    parser.add_argument("--network", default="bert_base", help="a zoo network (data.zoo)")
    parser.add_argument("--input-size", type=int, default=None, help="its input size (default: the zoo's)")
    parser.add_argument("--tasks", type=int, default=None, help="the network's first this-many tasks only")
    parser.add_argument("--target", default="nvidia/nvidia-h100")
    parser.add_argument("--threads", type=int, default=2, help="the TuneContext's threads (sampling, evolution)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each setting on each enumerated task")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="a JSON file for the rows")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats} must be >= 1")
    return run(args.network, args.input_size, args.tasks, args.target, args.threads, args.repeats, args.seed, args.out)


def run(
    network: str,
    input_size: int | None,
    first_tasks: int | None,
    target: str,
    threads: int,
    repeats: int,
    seed: int,
    out: str | None,
) -> dict:
    """Each enumerated task's first draft timed with the rule and without it, alternating."""
    tgt = parse_target(target)
    setup(tgt)
    tasks = extract_network_tasks(network, tgt, input_size)[:first_tasks]
    rows = []
    for task in tasks:
        samples, distinct, whole, seconds = _distinct_samples(task, tgt, threads, seed)
        row = {"task": task.name, "weight": task.weight, "samples": samples, "distinct": distinct, "sample_s": seconds}
        row["enumerated"] = whole
        if row["enumerated"]:
            for _ in range(repeats):
                for rule in (True, False):
                    row.setdefault("ranked" if rule else "evolved", []).append(
                        _first_draft(task, tgt, threads, seed, rule)
                    )
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k not in ("ranked", "evolved")}), flush=True)
    enumerated = [r for r in rows if r["enumerated"]]
    print(f"\n{network} on {target}, {threads} threads: {len(enumerated)} of {len(rows)} tasks enumerated")
    print("| task | samples | distinct | draft s, ranked | draft s, evolved | scored, ranked | scored, evolved |")
    print("|---|---|---|---|---|---|---|")
    total = {"ranked": 0.0, "evolved": 0.0}
    for r in enumerated:
        cells = []
        for key in ("ranked", "evolved"):
            draft_s = sorted(d["draft_s"] for d in r[key])
            total[key] += statistics.median(draft_s)
            cells.append("-".join(f"{s:.2f}" for s in (draft_s[0], draft_s[-1])))
        scored = [str(r[key][0]["draft_scored"]) for key in ("ranked", "evolved")]
        print(
            f"| {r['task']} | {r['samples']} | {r['distinct']} | {cells[0]} | {cells[1]} | {scored[0]} | {scored[1]} |"
        )
    print(f"| all {len(enumerated)} (sum of the medians) | | | {total['ranked']:.2f} | {total['evolved']:.2f} | | |")
    summary = {"network": network, "target": target, "threads": threads, "rows": rows, "total_draft_s": total}
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(summary, indent=1) + "\n")
    return summary


if __name__ == "__main__":
    main()
