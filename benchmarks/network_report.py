"""Whole networks tuned as a user tunes them (`benchmarks/gpu/network.sh`), one line a run, side by side.

Reads each run folder under a network's results (`<results>/<run>/summary.json` and its
`tuning_curve.csv`, as network.sh brings them back) and prints the compiled network's time, the
kernels that found a tuned schedule, the estimated totals (the run's best readings, and the re-read's),
the trials, when every task's first round was done, the first drafts' seconds and the run's drafting
share and idle GPU. A run named in `<network>-retime.json` (network.sh's RETIME, which compiles a
database again) takes its compiled time from there, marked "retimed": ResNet-18's first two runs
were compiled without their schedules by a bug fixed afterwards (docs/benchmarks.md).

    python benchmarks/network_report.py benchmarks/results/network_e2e/resnet_18 --against pruner-s0
    python benchmarks/network_report.py benchmarks/results/network_e2e/resnet_18 --json report.json

Columns: compiled (ms; the relax VM's mean, tuned database re-read); against (that time over the
`--against` run's: under 1 is faster); estimated and re-read (ms; the sum over tasks of weight x best
latency, the run's readings and the re-read's); first rounds (s: when the last task's first results
were taken up; MetaSchedule's task scheduler gives every task a round before any gets a second;
n/a when some task never had one);
first drafts (the draft seconds of the tasks' first rounds, several at once); drafting (the
run's draft seconds over its wall time, `bridge.curve.drafting_share`: over 100% where drafts ran
at once); drafting wall (the share of the wall during which a draft ran, drafts at once counted
once, `bridge.curve.drafting_wall_share`; n/a for runs from before its column, `draft_wall_s`); idle
(the GPU's idle share, tune.py's). n/a: not logged, or, for the estimated totals, a task the run never
reached.
Untuned and torch eager were timed in each run's call (a retimed run's: in the retime's), and they
move with the machine's state.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402 - after the path insert, as the other benchmarks
from rich.table import Table  # noqa: E402

from benchmarks.cli import doc_parser  # noqa: E402
from bridge.curve import drafting_share, drafting_wall_share, first_rounds_done  # noqa: E402
from bridge.search_log import read_rounds  # noqa: E402


def _json(path: Path, *keys: str) -> dict:
    """The JSON object in `path`, which must have `keys`.

    Raises:
        ValueError: unreadable, not an object, or a key missing (names the file and the key).
    """
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: not a readable JSON file ({err})") from err
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object")
    for key in keys:
        if key not in data:
            raise ValueError(f"{path}: no {key!r}")
    return data


def _retimed(results: Path) -> dict[str, dict]:
    """Run name -> its entry in the network's latest retime JSON that times it (network.sh RETIME;
    `<net>-retime.json` the latest, older ones kept as `<net>-retime-<date>[-<what>].json`, read in
    name order, dated first), if there is one, with that retime's untuned and torch eager times."""
    out = {}
    for path in sorted(results.glob("*-retime*.json")):
        retime = _json(path, "tuned")
        for work_dir, entry in retime["tuned"].items():
            if not isinstance(entry, dict) or "ms" not in entry:
                raise ValueError(f"{path}: the entry of {work_dir!r} has no 'ms'")
            out[Path(work_dir).name] = {**{k: retime.get(k) for k in ("untuned_ms", "torch_eager_ms")}, **entry}
    return out


def run_line(run: Path, retimed: dict | None = None) -> dict:
    """One run's figures (module docstring); `retimed`: its entry in the retime JSON.

    Raises:
        ValueError: a run folder without summary.json or tuning_curve.csv (names it).
    """
    for name in ("summary.json", "tuning_curve.csv"):
        if not (run / name).is_file():
            raise ValueError(f"{run}: no {name} (a network.sh run folder has both)")
    summary = _json(run / "summary.json", "cost_model", "estimated_total_ms", "total_trials", "tasks")
    rows = read_rounds(run / "tuning_curve.csv")
    first = [r for r in rows if r["round"] == 1]
    drafts = [r["draft_s"] for r in first if math.isfinite(r.get("draft_s", math.nan))]
    keys = ("tuned_kernels", "kernels", "untuned_ms", "torch_eager_ms")
    # a run tuned with --no-compile, never retimed, has no compiled time
    source = retimed or {"ms": summary.get("end_to_end_ms", math.nan), **{k: summary.get(k) for k in keys}}
    return {
        "run": run.name,
        "cost_model": summary["cost_model"],
        "compiled_ms": source["ms"],
        "retimed": retimed is not None,
        "tuned_kernels": source.get("tuned_kernels"),
        "kernels": source.get("kernels"),
        "estimated_ms": summary["estimated_total_ms"],
        "reread_ms": summary.get("estimated_total_reread_ms", math.nan),
        "trials": summary["total_trials"],
        "first_rounds_s": first_rounds_done(rows, len(summary["tasks"])),
        "first_drafts_s": sum(drafts) if drafts else math.nan,
        "drafting": drafting_share(rows),
        "drafting_wall": drafting_wall_share(rows),
        "idle": (summary.get("device_idle") or {}).get("idle", math.nan),
        "untuned_ms": source.get("untuned_ms", math.nan),
        "torch_eager_ms": source.get("torch_eager_ms", math.nan),
    }


def report(results: Path, against: str | None = None) -> list[dict]:
    """The lines of every run folder under `results` (those with a summary.json), each with
    `against`: its compiled time over the `against` run's (NaN without one).

    Raises:
        ValueError: no run folder there, or `against` names none of them.
    """
    if not results.is_dir():
        raise ValueError(f"{results}: no such folder")
    retimed = _retimed(results)
    runs = sorted(p for p in results.iterdir() if (p / "summary.json").is_file())
    if not runs:
        raise ValueError(f"{results}: no run folder with a summary.json")
    lines = [run_line(run, retimed.get(run.name)) for run in runs]
    base = {line["run"]: line["compiled_ms"] for line in lines}
    if against is not None and against not in base:
        raise ValueError(f"--against {against!r} is not a run under {results} (runs: {sorted(base)})")
    for line in lines:
        line["against"] = line["compiled_ms"] / base[against] if against else math.nan
    return lines


def _fmt(value, spec: str) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def main(argv: Sequence[str] | None = None) -> list[dict]:
    parser = doc_parser(__doc__)
    parser.add_argument("results", type=str, help="a network's results folder (benchmarks/results/network_e2e/<net>)")
    parser.add_argument("--against", type=str | None, default=None, help="the run the others are compared with")
    parser.add_argument("--json", type=str | None, default=None, help="also write the lines here")
    args = parser.parse_args(argv)
    lines = report(Path(args.results), args.against)
    table = Table(title=f"{Path(args.results).name}: whole-network runs")
    columns = ("run", "compiled ms", "against", "kernels tuned", "estimated", "re-read", "trials", "first rounds s")
    for col in (*columns, "first drafts s", "drafting", "drafting wall", "idle", "untuned", "eager"):
        table.add_column(col, justify="left" if col == "run" else "right")
    for line in lines:
        table.add_row(
            line["run"],
            _fmt(line["compiled_ms"], ".3f") + (" retimed" if line["retimed"] else ""),
            _fmt(line["against"], ".3f"),
            f"{line['tuned_kernels']} of {line['kernels']}",
            _fmt(line["estimated_ms"], ".3f"),
            _fmt(line["reread_ms"], ".3f"),
            str(line["trials"]),
            _fmt(line["first_rounds_s"], ".0f"),
            _fmt(line["first_drafts_s"], ".0f"),
            _fmt(line["drafting"], ".0%"),
            _fmt(line["drafting_wall"], ".0%"),
            _fmt(line["idle"], ".0%"),
            _fmt(line["untuned_ms"], ".3f"),
            _fmt(line["torch_eager_ms"], ".3f"),
        )
    Console(width=200).print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(lines, indent=2) + "\n")
    return lines


if __name__ == "__main__":
    main()
