"""How often would a re-draft rule have drafted in a finished tuning run? A replay of its curve.

    python benchmarks/redraft_replay.py --curves "[benchmarks/results/tuning_240/*/moa-s0.csv]" --stall 3

For each draft-then-verify curve (a `benchmarks/tuning.py` arm's CSV, one row a measured round), the
rounds' best latencies are fed to `bridge.stall_rule.StallRule` without and with backoff, and the
drafts each would have made are counted beside those the run made (the first draft included; a
draft because the potential space ran low is not modelled, it is rare on the GPU). It is a replay
of the recorded improvements: a run with fewer drafts would have measured other schedules, so this
tells how much drafting a rule saves, not what it costs in latency; that takes a GPU A/B.
"""

from __future__ import annotations

import csv
import glob
import math
from pathlib import Path

from jsonargparse import CLI

from bridge.stall_rule import StallRule


def replay(bests_us: list[float], stall: int, backoff: bool) -> int:
    """Drafts `StallRule(stall, backoff)` makes over rounds with these best latencies (first included)."""
    rule, drafts = StallRule(stall, backoff=backoff), 0
    for best in bests_us:
        if drafts == 0 or rule.due():
            rule.drafted(on_stall=drafts > 0)
            drafts += 1
        rule.observe([best * 1e-6])
    return drafts


def redraft_replay(curves: list[str], stall: int = 3) -> list[dict]:
    """Print a table: per curve, the drafts it made and the drafts of the rule without and with backoff.

    Args:
        curves: arm CSVs or glob patterns.
        stall: the rule's `redraft_stall`.
    """
    paths = sorted({p for pattern in curves for p in glob.glob(pattern)})
    if not paths:
        raise SystemExit(f"no curves match {curves}")
    out = []
    print("| curve | rounds | drafts made | replay: stall | replay: stall + backoff |")
    print("|---|---|---|---|---|")
    for path in paths:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        if not rows or not any(r.get("draft_scored") not in (None, "", "nan") for r in rows):
            continue  # MetaSchedule's evolution (xgb, mlp): no draft model
        bests = [float(r["best_us"]) if r["best_us"] not in ("", "inf") else math.inf for r in rows]
        row = {
            "curve": str(Path(*Path(path).parts[-2:])),
            "rounds": len(rows),
            "drafts": sum(1 for r in rows if r["drafted"] not in ("", "0", "0.0")),
            "stall": replay(bests, stall, backoff=False),
            "backoff": replay(bests, stall, backoff=True),
        }
        out.append(row)
        print(f"| {row['curve']} | {row['rounds']} | {row['drafts']} | {row['stall']} | {row['backoff']} |")
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    return CLI(redraft_replay, args=argv, as_positional=False)


if __name__ == "__main__":
    main()
