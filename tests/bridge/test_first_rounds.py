"""When every task of a network had its first round (`bridge.curve.first_rounds_done`), on the ResNet-18
runs that came back from the GPU, and the note tune.py's report prints from it."""

import csv
import io
import json
import math
from pathlib import Path

import pytest
from rich.console import Console

from bridge.curve import first_rounds_done
from bridge.report import print_report, summary
from bridge.search_log import read_rounds
from bridge.tuning import TaskResult, TuneResult

RESNET_18 = Path(__file__).resolve().parents[2] / "benchmarks/results/network_e2e/resnet_18"


def _run(name: str) -> TuneResult:
    """A TuneResult of a committed run: its tasks from summary.json, its curve rows."""
    saved = json.loads((RESNET_18 / name / "summary.json").read_text())
    tasks = [
        TaskResult(t["task"], t["weight"], t["flops"], t["trials"], (t["best_latency_us"] or math.inf) * 1e-6)
        for t in saved["tasks"]
    ]
    return TuneResult(tasks, read_rounds(RESNET_18 / name / "tuning_curve.csv"), saved["search_s"], None)


def test_the_last_tasks_first_round_of_a_network_and_none_while_a_task_never_had_one():
    with open(RESNET_18 / "pruner-s0" / "tuning_curve.csv", newline="") as f:
        first = [float(r["elapsed_s"]) for r in csv.DictReader(f) if r["round"] == "1"]
    rows = read_rounds(RESNET_18 / "pruner-s0" / "tuning_curve.csv")
    assert len(first) == 19 and first_rounds_done(rows, 19) == pytest.approx(max(first)) == pytest.approx(
        248.4, abs=0.05
    )
    assert math.isnan(first_rounds_done(rows, 20)) and math.isnan(first_rounds_done([], 1))
    one = [r for r in rows if r["task"] == rows[0]["task"]]  # one task: its own first round
    assert first_rounds_done(one, 1) == one[0]["elapsed_s"] < max(first)
    xgb = read_rounds(RESNET_18 / "xgb-s0" / "tuning_curve.csv")  # XGB reached 14 of the 19 tasks
    assert len({r["task"] for r in xgb}) == 14 and math.isnan(first_rounds_done(xgb, 19))
    assert first_rounds_done(xgb, 14) == max(r["elapsed_s"] for r in xgb)


def test_the_report_says_when_a_networks_first_rounds_took_most_of_the_run():
    result = _run("pruner-s0")
    assert result.first_rounds_s == pytest.approx(248.4, abs=0.05)
    out = io.StringIO()
    print_report(result, Console(file=out, width=300))
    line = next(x for x in out.getvalue().splitlines() if x.startswith("first rounds:"))
    run = result.rows[-1]["elapsed_s"]
    assert f"done at 248 s of the run's {run:.0f} s" in line and "a longer --deadline" in line  # 71% of it
    assert summary(result)["first_rounds_s"] == pytest.approx(248.4, abs=0.05)
    short = TuneResult(result.tasks, [r for r in result.rows if r["elapsed_s"] <= 248.5] + result.rows[-1:], 0.0, None)
    short.rows[-1] = {**short.rows[-1], "elapsed_s": 1000.0}  # the same first rounds in a 1,000 s run: no advice
    out = io.StringIO()
    print_report(short, Console(file=out, width=300))
    line = next(x for x in out.getvalue().splitlines() if x.startswith("first rounds:"))
    assert "of the run's 1000 s" in line and "--deadline" not in line
    one = TuneResult(result.tasks[:1], [r for r in result.rows if r["task"] == result.tasks[0].name], 0.0, None)
    out = io.StringIO()
    print_report(one, Console(file=out, width=300))
    assert "first rounds:" not in out.getvalue()  # one task: nothing to wait for
    xgb = _run("xgb-s0")
    assert math.isnan(xgb.first_rounds_s) and summary(xgb)["first_rounds_s"] is None
