"""benchmarks/tuning.py's report on hand-made arm curves: equal-time latency, time to XGB's final, speedups."""

import math
from pathlib import Path

import pytest
from benchmark_files import load_benchmark

from bridge.search_log import SearchLog

suite_report = load_benchmark("suite_report")


def write_arm(path: Path, points):
    """points: (elapsed_s, total_trials, estimated_ms[, draft_s]) per batch."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [",".join(SearchLog.FIELDS)]
    for elapsed, trials, est, *draft in points:
        row = dict.fromkeys(SearchLog.FIELDS, "nan")
        row.update(task="t", elapsed_s=elapsed, total_trials=trials, estimated_ms=est, best_us=est * 1e3, run_s=1.0)
        if draft:
            row["draft_s"] = draft[0]
        lines.append(",".join(str(row[k]) for k in SearchLog.FIELDS))
    path.write_text("\n".join(lines) + "\n")


def test_report_times_speedups_and_never(tmp_path):
    write_arm(tmp_path / "op_a" / "xgb-s0.csv", [(10, 16, 0.05), (40, 32, 0.03), (90, 48, 0.02), (120, 64, 0.02)])
    write_arm(tmp_path / "op_a" / "pruner-s0.csv", [(10, 16, 0.04, 7.5), (30, 32, 0.019, 0.0), (120, 96, 0.015, 4.5)])
    write_arm(tmp_path / "op_b" / "xgb-s0.csv", [(20, 16, 0.010), (100, 48, 0.008)])
    write_arm(tmp_path / "op_b" / "pruner-s0.csv", [(20, 16, 0.0095), (100, 64, 0.0083)])
    text = suite_report.report(tmp_path, plot=str(tmp_path / "suite.png"))
    # op_a: XGB's final 0.02 ms first reached at 90 s; pruner reached it at 30 s (32 trials): 3x
    assert "| op_a | pruner | 1 | 96 | 15.00 | 0.750 | 30 s | 32 | 3.00x |" in text
    lines = {
        tuple(c.strip() for c in line.split("|")[1:3]): line for line in text.splitlines() if line.startswith("| op_")
    }
    # drafting: (7.5 + 0 + 4.5) s of drafts over 120 s; XGB drafts nothing; op_b's pruner logged no drafts
    assert lines[("op_a", "pruner")].endswith("| 10% |") and lines[("op_a", "xgb")].endswith("| - |")
    assert lines[("op_b", "pruner")].endswith("| - |")
    # op_b: pruner never reaches 0.008 ms; bound 100/100 = 1x, marked "<"; 0.0083/0.008 = 1.0375 worse
    assert "| op_b | pruner | 1 | 64 | 8.30 | 1.038 | never | never | <1.00x |" in text
    assert "geometric-mean speedup over XGB (search time to XGB's final latency) 1.73x over 2 workloads" in text
    assert "pruner on op_b (1.038x XGB's latency)" in text
    assert (tmp_path / "suite.png").stat().st_size > 1000


def test_time_and_trials_to_a_latency():
    rows = [
        {"elapsed_s": 5.0, "total_trials": 8.0, "estimated_ms": 2.0},
        {"elapsed_s": 9.0, "total_trials": 16.0, "estimated_ms": 1.0},
    ]
    assert suite_report.time_to(rows, 1.0) == 9.0 and suite_report.trials_to(rows, 1.5) == 16.0
    assert math.isinf(suite_report.time_to(rows, 0.5))
    with pytest.raises(FileNotFoundError, match="no such results folder"):
        suite_report.report(Path("/nonexistent-results"))
