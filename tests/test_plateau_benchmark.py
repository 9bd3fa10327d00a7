"""benchmarks/plateau.py on the GPU suite's real arms: counts that agree with the curves and databases."""

import json
import math
from pathlib import Path

import pytest

from benchmarks import plateau
from bridge.search_log import read_rounds

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks/results/ablations/suite_bg"
DATABASES = ROOT / "benchmarks/results/suite_databases/ablations/suite_bg"


def test_last_improvement_counts_up_to_the_last_gain_over_one_percent():
    assert plateau.last_improvement([5.0, 4.0, 3.99, 3.0, 2.98, math.inf]) == 4  # 3.99 and 2.98: under 1%
    assert plateau.last_improvement([math.inf, math.inf]) == 0


def test_tiling_is_the_perfect_tile_decisions_in_trace_order():
    trace = [
        [
            ["SamplePerfectTile", ["l0"], [2, 64], ["a", "b"]],
            ["Split", [], [], []],
            ["SampleCategorical", [], [], ["c"]],
            ["SamplePerfectTile", ["l1"], [2, 64], ["d", "e"]],
        ],
        [[3, [4, 2]], [2, 1], [0, [8, 1]]],
    ]
    assert plateau.tiling(trace) == ((8, 1), (4, 2))


def test_the_suite_arms_statistics_agree_with_their_curves(tmp_path, capsys):
    out = plateau.plateau(str(RESULTS), str(DATABASES), seed=0, json_out=str(tmp_path / "p.json"))
    assert len(out) == 5  # the five operators with both arms; ResNet-50's folder has no xgb arm
    assert json.loads((tmp_path / "p.json").read_text()).keys() == out.keys()
    for workload, arms in out.items():
        for arm, s in arms.items():
            rows = read_rounds(RESULTS / workload / f"{arm}-s0.csv")
            assert s["trials"] == rows[-1]["total_trials"]  # every measured record, none twice
            assert s["best_us"] == pytest.approx(min(r["best_us"] for r in rows), rel=1e-6)
            assert s["last_improved_trials"] + s["tail"] == s["trials"]
            assert 0 < s["within_5pct"] <= s["within_10pct"] <= 1
            assert 1 <= s["on_best_tiling"] and s["tail_tilings"] <= min(s["tail"], s["tilings"])
    dense = out["dense_128x3072x768"]
    assert dense["pruner"]["tilings"] > 5 * dense["xgb"]["tilings"]  # the spread the docs report
    assert "| dense_128x3072x768 | pruner | 36.52 | 1813 |" in capsys.readouterr().out


def test_a_missing_arm_database_is_named(tmp_path):
    (tmp_path / "w").mkdir()
    for arm in ("xgb", "pruner"):
        (tmp_path / "w" / f"{arm}-s0.csv").write_text((RESULTS / "dense_128x3072x768" / f"{arm}-s0.csv").read_text())
    with pytest.raises(ValueError, match=r"xgb-s0: no database of arm xgb seed 0 for w"):
        plateau.plateau(str(tmp_path), str(tmp_path / "nowhere"))
