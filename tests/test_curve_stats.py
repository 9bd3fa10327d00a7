"""benchmarks/curve_stats.py on real device curves: the line and the JSON agree with bridge.curve."""

import json
import math
from pathlib import Path

import pytest

from benchmarks import curve_stats
from bridge.curve import build_bound_idle, device_idle_parts, device_idle_share, idle_between_batches
from bridge.search_log import read_rounds

ROOT = Path(__file__).resolve().parents[1]
CURVES = sorted(str(p) for p in (ROOT / "benchmarks/results/ablations").glob("ab9_fill64*/*/pruner-s0.csv"))


def test_each_curve_gets_a_line_and_its_statistics_in_the_json(tmp_path, capsys):
    assert len(CURVES) == 4
    out = curve_stats.main([*CURVES, "--json", str(tmp_path / "s.json")])
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[0] for line in printed[:-1]] == CURVES
    # NaN (a column these curves predate) is equal only to itself: compare as JSON text
    assert json.dumps(json.loads((tmp_path / "s.json").read_text()), sort_keys=True) == json.dumps(out, sort_keys=True)
    for path in CURVES:
        rows, stats = read_rounds(path), out[path]
        assert stats["trials"] == rows[-1]["total_trials"] and stats["final_us"] == rows[-1]["best_us"]
        assert stats["idle"] == pytest.approx(device_idle_share(rows))
        parts = device_idle_parts(rows)
        assert sum(stats[f"idle_{k}"] for k in parts) == pytest.approx(stats["idle"], abs=1e-6)
        assert stats["idle_builds"] == pytest.approx(build_bound_idle(rows)) and 0 <= stats["idle_builds"] < 1
        # between batches: the idle time after the first round's, over the time from the first batch's start
        first_wait = rows[0]["elapsed_s"] - rows[0]["run_s"]
        between = (
            (stats["idle"] - stats["idle_before_first"]) * rows[-1]["elapsed_s"] / (rows[-1]["elapsed_s"] - first_wait)
        )
        assert stats["idle_between"] == pytest.approx(idle_between_batches(rows)) == pytest.approx(between, abs=1e-6)
        assert 0 < stats["busy"] <= 1 and stats["redrafts"] == sum(1 for r in rows[1:] if r["drafted"])
        assert stats["update_s"] == pytest.approx(sum(r["update_s"] for r in rows)) and stats["update_s"] > 0
        assert math.isnan(stats["learn_s"]) and math.isnan(stats["learn_wait_s"])  # curves from before the columns
        trials = sum(r["trials"] for r in rows)  # the rows' own trials (a fresh run's: its total)
        assert trials == rows[-1]["total_trials"]
        assert stats["runner_ms"] == pytest.approx(1e3 * sum(r["run_s"] for r in rows) / trials)
        assert (
            stats["build_cpu"] == pytest.approx(sum(r["build_cpu_s"] for r in rows) / trials) and stats["build_cpu"] > 0
        )
    ahead = [out[p] for p in CURVES if "ahead" in p]
    assert all(s["draft_wait_s"] >= 0 for s in ahead) and any(s["draft_wait_s"] > 0 for s in ahead)
    assert all(math.isfinite(s["drafting"]) for s in out.values())
    # the first batch: its time and its round's draft and verify, and their medians over the curves
    for path in CURVES:
        rows = read_rounds(path)
        assert (out[path]["first_s"], out[path]["first_draft_s"]) == (rows[0]["elapsed_s"], rows[0]["draft_s"])
        assert 0 < out[path]["first_draft_s"] < out[path]["first_s"]
    firsts = sorted(out[p]["first_s"] for p in CURVES)
    assert printed[-1].startswith(f"median over 4 curves: first batch at {(firsts[1] + firsts[2]) / 2:.1f} s (draft ")


def test_a_missing_curve_is_named(tmp_path):
    with pytest.raises(ValueError, match="nothing.csv: no curve rows"):
        curve_stats.main([str(tmp_path / "nothing.csv")])


def test_curves_without_draft_columns_get_no_draft_median(capsys):
    """XGB's curves (MetaSchedule's evolution) have no draft columns: their line and the
    median over curves say n/a there instead of failing; beside a Pruner curve the median is its own."""
    xgb = sorted(str(p) for p in (ROOT / "benchmarks/results/ablations/suite_bg").glob("*/xgb-s0.csv"))[:2]
    assert len(xgb) == 2
    out = curve_stats.main(xgb)
    printed = capsys.readouterr().out.splitlines()
    assert all(math.isnan(out[p]["first_draft_s"]) for p in xgb)
    firsts = sorted(out[p]["first_s"] for p in xgb)
    verify = (out[xgb[0]]["first_verify_s"] + out[xgb[1]]["first_verify_s"]) / 2  # its evolution's seconds
    assert printed[-1] == (
        f"median over 2 curves: first batch at {(firsts[0] + firsts[1]) / 2:.1f} s (draft n/a, verify {verify:.1f} s)"
    )
    curve_stats.main([*xgb, CURVES[0]])
    draft = read_rounds(CURVES[0])[0]["draft_s"]
    assert f"(draft {draft:.1f} s, verify " in capsys.readouterr().out.splitlines()[-1]
