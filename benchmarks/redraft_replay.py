"""How often would a re-draft rule have drafted in a finished tuning run? A replay of its curve.

    python benchmarks/redraft_replay.py --curves "[benchmarks/results/tuning_240/*/moa-s0.csv]" --stall 3

For each draft-then-verify curve (a `benchmarks/tuning.py` arm's CSV, one row a measured round), the
rounds' best latencies are fed to `bridge.stall_rule.StallRule` without and with backoff, and
without backoff under a drafting share (`share_allows`, `--share`, the run's `redraft_share`), and
the drafts each would have made are counted beside those the run made (the first draft included; a
draft because the potential space ran low is not modelled, it is rare on the GPU). Under the share,
a draft is reckoned to take the run's mean draft seconds, and the share it would have drafted is
that times its drafts over the run's time. It is a replay of the recorded improvements: a run with
fewer drafts would have measured other schedules, so this tells how much drafting a rule saves, not
what it costs in latency; that takes a GPU A/B.
"""

from __future__ import annotations

import csv
import glob
import math
from pathlib import Path

from jsonargparse import CLI

from bridge.stall_rule import StallRule, share_allows


def replay(
    bests_us: list[float],
    stall: int,
    backoff: bool,
    *,
    tasks: list[str] | None = None,
    starts_s: list[float] | None = None,
    draft_s: float = 0.0,
    share: float | None = None,
) -> int:
    """Drafts `StallRule(stall, backoff)` makes over rounds with these best latencies (each task's
    first included; `tasks` names each round's task, one rule a task); with `share`, a stall draft
    before a round that starts `starts_s[i]` into the run waits while the run's drafts, of `draft_s`
    seconds each, would take more than that share of the run."""
    rules: dict[str, StallRule] = {}
    drafts = 0
    for i, best in enumerate(bests_us):
        task = tasks[i] if tasks else ""
        first = task not in rules
        rule = rules.setdefault(task, StallRule(stall, backoff=backoff))
        held = share is not None and not share_allows(drafts * draft_s, starts_s[i], draft_s, share)
        if first or (not held and rule.due()):
            rule.drafted(on_stall=not first)
            drafts += 1
        rule.observe([best * 1e-6])
    return drafts


def redraft_replay(curves: list[str], stall: int = 3, share: float = 0.15) -> list[dict]:
    """Print a table: per curve, the drafts it made and the drafts of the rule without and with
    backoff, and under the drafting share, with the share of the run drafting took and would take.

    Args:
        curves: arm CSVs or glob patterns.
        stall: the rule's `redraft_stall`.
        share: the rule's `redraft_share`.
    """
    paths = sorted({p for pattern in curves for p in glob.glob(pattern)})
    if not paths:
        raise SystemExit(f"no curves match {curves}")
    out = []
    print(
        f"| curve | rounds | drafts made | drafting share | replay: stall | replay: stall + backoff "
        f"| replay: stall + share {share:g} | its drafting share |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for path in paths:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        if not rows or not any(r.get("draft_scored") not in (None, "", "nan") for r in rows):
            continue  # MetaSchedule's evolution (xgb, mlp): no draft model
        bests = [float(r["best_us"]) if r["best_us"] not in ("", "inf") else math.inf for r in rows]
        ends = [float(r["elapsed_s"]) for r in rows]
        drafted = sum(float(r["draft_s"]) for r in rows if r["draft_s"] not in ("", "nan"))
        drafts = sum(1 for r in rows if r["drafted"] not in ("", "0", "0.0"))
        mean_draft = drafted / max(drafts, 1)
        tasks = [r["task"] for r in rows]
        starts = [0.0, *ends[:-1]]
        shared = replay(bests, stall, False, tasks=tasks, starts_s=starts, draft_s=mean_draft, share=share)
        row = {
            "curve": str(Path(*Path(path).parts[-2:])),
            "rounds": len(rows),
            "drafts": drafts,
            "draft_share": drafted / ends[-1],
            "stall": replay(bests, stall, backoff=False, tasks=tasks),
            "backoff": replay(bests, stall, backoff=True, tasks=tasks),
            "share": shared,
            "share_draft_share": shared * mean_draft / ends[-1],
        }
        out.append(row)
        print(
            f"| {row['curve']} | {row['rounds']} | {row['drafts']} | {100 * row['draft_share']:.0f}% | {row['stall']} "
            f"| {row['backoff']} | {row['share']} | {100 * row['share_draft_share']:.0f}% |"
        )
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    return CLI(redraft_replay, args=argv, as_positional=False)


if __name__ == "__main__":
    main()
