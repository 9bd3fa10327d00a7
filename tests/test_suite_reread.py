"""benchmarks/suite_reread.py: which re-read rescales an arm, and what it refuses."""

import json
from pathlib import Path

import pytest
from benchmark_files import load_benchmark

suite_reread = load_benchmark("suite_reread")


def _file(path: Path, kernels: dict, **extra) -> Path:
    """A launch_floor.py JSON: kernel name -> (reported_us, idle readings, loaded readings)."""
    body = {"floor (64 adds)": {"reported_us": None, "idle": {"graph_timer_us": [0.9]}}}
    for name, (reported, idle, loaded) in kernels.items():
        body[name] = {"reported_us": reported, "idle": {"graph_timer_us": idle}, "loaded": {"graph_timer_us": loaded}}
    path.write_text(json.dumps({"burn": 0, **extra, "kernels": body}))
    return path


def test_a_kernel_read_in_two_files_pools_its_readings_whatever_their_order(tmp_path):
    a = _file(tmp_path / "a.json", {"runs/lane0/op/pruner-s1 pruner-s1/7 #3": (2.0, [2.2], [2.2])})
    b = _file(tmp_path / "b.json", {"runs/lane0/op/pruner-s1 pruner-s1/7 #0": (2.0, [2.3], [2.3])})
    # the four readings' median 2.25: the same factor in either order (one file's alone: 1.10 or 1.15)
    assert suite_reread.reread_factors(a, b) == suite_reread.reread_factors(b, a)
    assert suite_reread.reread_factors(a, b)["op", "pruner", 1] == pytest.approx((2.0, 1.125))


def test_a_file_that_trained_on_the_gpu_counts_its_idle_readings_only(tmp_path):
    f = _file(tmp_path / "f.json", {"d/op/xgb-s0 xgb-s0/1 #0": (4.0, [4.4], [8.0, 8.0])}, gpu_burn=True)
    assert suite_reread.reread_factors(f)["op", "xgb", 0] == pytest.approx((4.0, 1.1))


def test_what_a_reread_refuses(tmp_path):
    net = _file(
        tmp_path / "net.json",
        {"d/net/pruner-s0 pruner-s0/1 #0": (5.0, [5.0], []), "d/net/pruner-s0 pruner-s0/2 #1": (9.0, [9.0], [])},
    )
    with pytest.raises(ValueError, match="pruner seed 0 of net holds kernels of 2 workloads"):
        suite_reread.reread_factors(net)
    evaluator_only = tmp_path / "cpu.json"
    evaluator_only.write_text(
        json.dumps({"kernels": {"d/op/xgb-s0 xgb-s0/1 #0": {"reported_us": 1.0, "idle": {"evaluator_us": [1.0]}}}})
    )
    with pytest.raises(ValueError, match="cpu.json: kernel 'd/op/xgb-s0 xgb-s0/1 #0' has no graph_timer_us"):
        suite_reread.reread_factors(evaluator_only)
    unnamed = _file(tmp_path / "bad.json", {"op/pruner kernel": (1.0, [1.0], [])})
    with pytest.raises(ValueError, match="bad.json: kernel 'op/pruner kernel' does not name a database"):
        suite_reread.reread_factors(unnamed)
    with pytest.raises(ValueError, match="not a launch_floor.py JSON"):
        suite_reread.reread_factors(_write(tmp_path / "list.json", "[]"))


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_rescale_checks_the_reread_is_of_this_run_and_skips_what_the_report_does_not_show():
    rows = [{"elapsed_s": 1.0, "estimated_ms": 0.004}, {"elapsed_s": 2.0, "estimated_ms": 0.002}]
    data = {"op": {"xgb": {0: rows}, "pruner": {0: rows}}, "alone": {"pruner": {0: rows}}}  # "alone": no xgb
    factors = {("op", "xgb", 0): (2.0, 1.5), ("op", "pruner", 0): (2.0, 1.1)}
    lines = suite_reread.rescale(data, factors, "xgb")
    assert [r["estimated_ms"] for r in data["op"]["xgb"][0]] == pytest.approx([0.006, 0.003])
    assert [r["estimated_ms"] for r in data["op"]["pruner"][0]] == pytest.approx([0.0044, 0.0022])
    assert data["alone"]["pruner"][0] is rows and lines[1:] == ["  op pruner s0: x1.100", "  op xgb s0: x1.500"]
    other_run = {("op", "xgb", 0): (2.5, 1.5), ("op", "pruner", 0): (2.0, 1.1)}
    fresh = {"op": {"xgb": {0: rows}, "pruner": {0: rows}}}
    with pytest.raises(ValueError, match="xgb seed 0 of op: the re-read kernel was reported at 2.5000 us, the curve's"):
        suite_reread.rescale(fresh, other_run, "xgb")


def test_an_arms_own_reread_gives_its_factor_and_what_it_refuses(tmp_path):
    """`<method>-s<seed>.reread.json` beside an arm's CSV (what `tuning.py` writes from a run's
    `bridge.reread`): its best re-read over its best reading, keyed by its folder and name; never
    beside launch_floor.py files (another timer's scale), never twice for one arm, never a network's."""
    own = tmp_path / "op" / "pruner-s1.reread.json"
    own.parent.mkdir()
    own.write_text(json.dumps({"reread": {"op_task": {"reported_us": 2.0, "reread_us": 2.16, "ratio": 1.08}}}))
    other = tmp_path / "op" / "xgb-s1.reread.json"
    other.write_text(json.dumps({"reread": {"op_task": {"reported_us": 4.0, "reread_us": 4.0, "ratio": 1.0}}}))
    factors = suite_reread.reread_factors(own, other)
    assert sorted(factors) == [("op", "pruner", 1), ("op", "xgb", 1)]
    assert factors["op", "pruner", 1] == pytest.approx((2.0, 1.08)) and factors["op", "xgb", 1] == pytest.approx(
        (4.0, 1.0)
    )
    floor = _file(tmp_path / "f.json", {"d/op/moa-s1 moa-s1/1 #0": (4.0, [4.4], [4.4])})
    with pytest.raises(ValueError, match="give the arms' own re-reads .* or launch_floor.py files, not both"):
        suite_reread.reread_factors(own, floor)
    with pytest.raises(ValueError, match="pruner seed 1 of op has two own re-reads"):
        suite_reread.reread_factors(own, own)
    net = tmp_path / "net" / "moa-s0.reread.json"
    net.parent.mkdir()
    net.write_text(
        json.dumps({"reread": {"a": {"reported_us": 1, "reread_us": 1}, "b": {"reported_us": 1, "reread_us": 1}}})
    )
    with pytest.raises(ValueError, match="moa-s0.reread.json holds 2 tasks"):
        suite_reread.reread_factors(net)
    misnamed = _write(tmp_path / "op" / "pruner.json", json.dumps({"reread": {}}))
    with pytest.raises(ValueError, match="named <method>-s<seed>.reread.json"):
        suite_reread.reread_factors(misnamed)
