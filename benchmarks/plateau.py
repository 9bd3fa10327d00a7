"""Where a tuning arm's trials go once it stops improving: how close to its best they stay.

On the GPU suite Pruner led XGB for the first minute of every operator, then plateaued while it
measured hundreds of trials, and XGB's evolution caught up in a few jumps (docs/benchmarks.md, "Why
Pruner plateaus"). For each workload of a suite results folder and each arm's database of one seed
(records in the order they were measured), this reports:
- the arm's best, its trials, and when (curve seconds, trials) it last improved by more than 1%;
- the share of its valid measurements within 5% and 10% of its own best;
- its tilings (a schedule's SamplePerfectTile decisions, all of them, in trace order): how many
  distinct ones it measured, and how many of its measurements share its best's tiling;
- its tail, the measurements after its last improvement of more than 1%: how many, over how many
  tilings, and the share on the tiling of the best it had then (the incumbent);
- against each other arm: whether the arm ever measured the other's best tiling, and the fewest
  tile vectors in which one of its tilings differs from it;
- where its gains came from: the share of its measurements one step (an instruction or a decision,
  as one of MetaSchedule's mutations makes) from one of the 8 best it had measured before them, and
  of its gains (measurements faster than every one before them, after its first valid one), how
  many came that way. Local moves (`local_share`) and XGB's evolution make such steps; a draft's
  picks seldom do.

    python benchmarks/plateau.py --results benchmarks/results/ablations/suite_bg \
        --databases benchmarks/results/suite_databases/ablations/suite_bg --seed 0 \
        --json_out benchmarks/results/plateau_suite_bg.json
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from jsonargparse import CLI

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge.search_log import read_rounds  # noqa: E402
from data.records import read_records  # noqa: E402

__all__ = ["arm_stats", "distance", "last_improvement", "near_best", "plateau", "steps", "tiling"]


def tiling(trace: list) -> tuple:
    """The SamplePerfectTile decisions of a trace JSON `[instructions, decisions]`, in trace order."""
    instructions, decisions = trace
    chosen = {int(i): d for i, d in decisions}
    return tuple(tuple(chosen[i]) for i, inst in enumerate(instructions) if inst[0] == "SamplePerfectTile")


def steps(trace: list) -> tuple[list[str], dict[int, str]]:
    """A trace JSON's instructions before its postprocessing, and its decisions by instruction."""
    instructions, decisions = trace
    cut = next((i for i, inst in enumerate(instructions) if inst[0] == "EnterPostproc"), len(instructions))
    return [json.dumps(inst) for inst in instructions[:cut]], {int(i): json.dumps(d) for i, d in decisions if i < cut}


def distance(a: tuple[list[str], dict[int, str]], b: tuple[list[str], dict[int, str]]) -> int | None:
    """In how many instructions and decisions two `steps` differ (None: traces of other lengths)."""
    (ia, da), (ib, db) = a, b
    if len(ia) != len(ib):
        return None
    return sum(x != y for x, y in zip(ia, ib)) + sum(da.get(i) != db.get(i) for i in da.keys() | db.keys())


def near_best(latencies: list[float], traces: list, parents: int = 8) -> dict:
    """For measurements in order (`latencies`, seconds, inf when failed; `traces`, their `steps`): the
    share one step from one of the `parents` best measured before them, the gains (faster than all
    before them, after the first valid one), and how many of the gains were one step from them."""
    best: list[tuple[float, int]] = []  # (latency, index) of the best so far, fastest first
    near = gains = near_gains = 0
    for i, (latency, trace) in enumerate(zip(latencies, traces)):
        close = any(distance(traces[j], trace) == 1 for _, j in best)
        near += close
        if math.isfinite(latency):
            if best and latency < best[0][0]:
                gains += 1
                near_gains += close
            best = sorted([*best, (latency, i)])[:parents]
    return {"near_trials": near / len(latencies) if latencies else math.nan, "gains": gains, "near_gains": near_gains}


def last_improvement(latencies: list[float], by: float = 0.01) -> int:
    """How many measurements came up to and including the last that beat the best before it by more
    than `by` (0 when none did)."""
    best, last = math.inf, 0
    for i, latency in enumerate(latencies):
        if latency < best * (1 - by):
            last = i + 1
        best = min(best, latency)
    return last


def arm_stats(latencies: list[float], tilings: list[tuple], rows: list[dict]) -> dict:
    """The statistics of the module docstring for one arm: `latencies` (seconds, inf when failed) and
    `tilings` of its measurements in order, `rows` its curve."""
    valid = [x for x in latencies if math.isfinite(x)]
    if not valid:
        return {"trials": len(latencies), "valid": 0}
    best = min(valid)
    at = latencies.index(best)
    last = last_improvement(latencies)
    incumbent = tilings[min(range(last), key=lambda i: latencies[i])] if last else None
    tail = tilings[last:]
    improved = last_improvement([r["best_us"] for r in rows])  # rows up to the curve's last gain over 1%
    return {
        "best_us": best * 1e6,
        "trials": len(latencies),
        "valid": len(valid),
        "last_improved_s": rows[improved - 1]["elapsed_s"] if improved else math.nan,
        "last_improved_trials": last,
        "within_5pct": sum(x <= best * 1.05 for x in valid) / len(valid),
        "within_10pct": sum(x <= best * 1.10 for x in valid) / len(valid),
        "tilings": len(set(tilings)),
        "on_best_tiling": sum(t == tilings[at] for t in tilings),
        "tail": len(tail),
        "tail_tilings": len(set(tail)),
        "tail_on_incumbent_tiling": sum(t == incumbent for t in tail) / len(tail) if tail else math.nan,
    }


def _arm(databases: Path, workload: str, arm: str, seed: int) -> tuple[list[float], list[tuple], list]:
    folder = databases / workload / f"{arm}-s{seed}"
    if not folder.is_dir():
        raise ValueError(f"{folder}: no database of arm {arm} seed {seed} for {workload}")
    records = [r for task in read_records([folder]).tasks.values() for r in task.records]
    records.sort(key=lambda r: int(r.source.rsplit(":", 1)[1]))  # the order they were measured in
    return [r.latency for r in records], [tiling(r.trace) for r in records], [steps(r.trace) for r in records]


def plateau(
    results: str, databases: str, seed: int = 0, arms: list[str] | None = None, json_out: str | None = None
) -> dict:
    """Per workload of `results` (a suite results folder) and arm (default: xgb and pruner) of `seed`,
    the statistics of the module docstring, from the arm's curve CSV and its database under
    `databases/<workload>/<arm>-s<seed>`; printed as a table, and written to `json_out` if given."""
    arms = arms or ["xgb", "pruner"]
    out: dict[str, dict] = {}
    for folder in sorted(p for p in Path(results).iterdir() if p.is_dir()):
        if not all((folder / f"{a}-s{seed}.csv").exists() for a in arms):
            continue
        measured = {a: _arm(Path(databases), folder.name, a, seed) for a in arms}
        out[folder.name] = {
            a: {
                **arm_stats(*measured[a][:2], read_rounds(folder / f"{a}-s{seed}.csv")),
                **near_best(measured[a][0], measured[a][2]),
            }
            for a in arms
        }
        for a in arms:
            for b in arms:
                lat_b, til_b, _ = measured[b]
                if a == b or not any(math.isfinite(x) for x in lat_b):
                    continue
                theirs = til_b[min(range(len(lat_b)), key=lat_b.__getitem__)]
                mine = measured[a][1]
                out[folder.name][a][f"measured_{b}_best_tiling"] = sum(t == theirs for t in mine)
                out[folder.name][a][f"closest_to_{b}_best_tiling"] = min(
                    (sum(x != y for x, y in zip(t, theirs)) for t in mine if len(t) == len(theirs)), default=None
                )
    if not out:
        raise ValueError(f"{results}: no workload folder with the CSVs of arms {arms} for seed {seed}")
    print(
        "| workload | arm | best (us) | trials | last improved >1% at | within 5% / 10% of its best | tilings | on its best's tiling | tail: trials, tilings, on the incumbent's tiling | one step from its 8 best: trials, gains |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for workload, by_arm in out.items():
        for a, s in by_arm.items():
            print(
                f"| {workload} | {a} | {s['best_us']:.2f} | {s['trials']} | {s['last_improved_s']:.0f} s "
                f"({s['last_improved_trials']} trials) | {s['within_5pct']:.1%} / {s['within_10pct']:.1%} | "
                f"{s['tilings']} | {s['on_best_tiling']} | {s['tail']}, {s['tail_tilings']}, "
                f"{s['tail_on_incumbent_tiling']:.1%} | {s['near_trials']:.1%}, {s['near_gains']} of {s['gains']} |"
            )
    for workload, by_arm in out.items():
        for a, s in by_arm.items():
            for b in arms:
                if f"measured_{b}_best_tiling" in s:
                    print(
                        f"- {workload}: {a} measured {b}'s best tiling {s[f'measured_{b}_best_tiling']} times; its "
                        f"closest tiling differs in {s[f'closest_to_{b}_best_tiling']} tile vectors"
                    )
    if json_out:
        Path(json_out).write_text(json.dumps(out, indent=1, default=str))
    return out


def main(argv: list[str] | None = None) -> dict:
    return CLI(plateau, args=argv, as_positional=False)


if __name__ == "__main__":
    main()
