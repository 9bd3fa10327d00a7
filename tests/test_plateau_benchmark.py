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


def _trace(tiles: list[int], unroll: int, postproc: int = 0) -> list:
    instructions = [
        ["SamplePerfectTile", ["l0"], [2, 64], ["a", "b"]],
        ["SampleCategorical", [], [], ["c"]],
        ["EnterPostproc", [], [], []],
        ["SampleCategorical", [], [], ["d"]],
    ]
    return [instructions, [[0, tiles], [1, unroll], [3, postproc]]]


def test_steps_leave_out_postprocessing_and_distance_counts_what_differs():
    a, b = plateau.steps(_trace([8, 8], 1)), plateau.steps(_trace([8, 8], 2, postproc=5))
    assert len(a[0]) == 2 and set(a[1]) == {0, 1}  # the postprocessing's instruction and decision are not steps
    assert plateau.distance(a, b) == 1  # the unroll decision only; the postprocessing's differs too, not counted
    assert plateau.distance(a, plateau.steps(_trace([4, 16], 2))) == 2
    assert plateau.distance(a, ([], {})) is None  # another design space's trace: not comparable


def test_near_best_counts_the_steps_from_the_best_before_and_the_gains_they_made():
    traces = [plateau.steps(t) for t in (_trace([8, 8], 1), _trace([8, 8], 2), _trace([2, 32], 3), _trace([2, 32], 1))]
    got = plateau.near_best([5e-6, 4e-6, 3e-6, math.inf], traces)
    # the 2nd is one step from the 1st and a gain; the 3rd a gain from afar; the 4th, failed, one step from the 3rd
    assert got == {"near_trials": 0.5, "gains": 2, "near_gains": 1}
    later = [*traces[:3], plateau.steps(_trace([8, 8], 4))]  # one step from the 2nd best, two from the best
    assert plateau.near_best([5e-6, 4e-6, 3e-6, 6e-6], later)["near_trials"] == 0.5
    assert plateau.near_best([5e-6, 4e-6, 3e-6, 6e-6], later, parents=1)["near_trials"] == 0.25  # the best only


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
            assert 0 <= s["near_gains"] <= s["gains"] and 0 < s["near_trials"] < 1
    dense = out["dense_128x3072x768"]
    assert dense["pruner"]["tilings"] > 5 * dense["xgb"]["tilings"]  # the spread the docs report
    assert dense["xgb"]["near_trials"] > 3 * dense["pruner"]["near_trials"]  # XGB's evolution stays by its best
    assert "| dense_128x3072x768 | pruner | 36.52 | 1813 |" in capsys.readouterr().out


def test_a_missing_arm_database_is_named(tmp_path):
    (tmp_path / "w").mkdir()
    for arm in ("xgb", "pruner"):
        (tmp_path / "w" / f"{arm}-s0.csv").write_text((RESULTS / "dense_128x3072x768" / f"{arm}-s0.csv").read_text())
    with pytest.raises(ValueError, match=r"xgb-s0: no database of arm xgb seed 0 for w"):
        plateau.plateau(str(tmp_path), str(tmp_path / "nowhere"))
