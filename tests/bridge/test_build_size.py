"""bridge.build_size on real schedules of the H200 suite (CUDA target, no GPU, no NVRTC): the count
replayed over the module before UnrollLoop equals the statements the real pass leaves, and the KB
estimate is near the CUDA source TVM generates."""

import json
import random

import pytest
from benchmark_files import REPO, load_benchmark

from bridge.build_size import KB_PER_STATEMENT, estimated_source_kb, unrolled_statements
from data.records import read_records
from tvm_env import parse_target, setup, tvm

source_size = load_benchmark("source_size")
DATABASES = REPO / "benchmarks" / "results" / "suite_databases" / "ablations" / "moa_defaults"


@tvm.ir.instrument.pass_instrument
class _StopAfterUnroll:
    """Keeps the module as `tirx.UnrollLoop` leaves it, and runs no pass after it."""

    def __init__(self):
        self.module = None

    def should_run(self, mod, info) -> bool:
        return self.module is None

    def run_after_pass(self, mod, info) -> None:
        if info.name == "tirx.UnrollLoop":
            self.module = mod


def _statements_after_unroll(mod, target) -> int:
    """Statements of the module TVM's own UnrollLoop produced, counted as a tree (not by replaying it)."""
    pipeline, _, _ = tvm.tirx.get_default_tir_pipeline(target)
    stop = _StopAfterUnroll()
    with target, tvm.transform.PassContext(opt_level=3, instruments=[stop]):
        pipeline(tvm.tirx.transform.BindTarget(target)(mod))
    nodes = json.loads(tvm.ir.save_json(stop.module))["nodes"]

    def count(i: int) -> int:
        kind, d = nodes[i]["type"], nodes[i]["data"]
        if kind in ("tirx.BufferStore", "tirx.Evaluate"):
            return 1
        if kind == "tirx.SeqStmt":
            return sum(count(c) for c in nodes[d["seq"]]["data"])
        if kind == "tirx.For":
            return 1 + count(d["body"])
        if kind == "tirx.IfThenElse":
            return 1 + count(d["then_case"]) + (count(d["else_case"]) if d["else_case"] else 0)
        if isinstance(d, dict) and isinstance(d.get("body"), int) and kind.startswith("tirx."):
            return count(d["body"])
        return 0

    return sum(count(n["data"]["body"]) for n in nodes if n["type"] == "tirx.PrimFunc")


@pytest.fixture(scope="module")
def target():
    h100 = parse_target("nvidia/nvidia-h100")
    setup(h100)
    return h100


@pytest.mark.parametrize("arm", ["dense_128x3072x768/moa-s0", "conv2d_1x35x35x64x96x3x1x1/pruner-s0"])
def test_the_replayed_count_is_what_unroll_loop_leaves_and_the_estimate_tracks_the_source(arm, target):
    records = [r for t in read_records([str(DATABASES / arm)]).tasks.values() for r in t.records if r.valid]
    random.Random(0).shuffle(records)
    counts, ratios = [], []
    for record in records[:4]:
        mod = source_size.replay(record).mod
        count = unrolled_statements(mod, target)
        assert count == _statements_after_unroll(mod, target) > 0
        counts.append(count)
        ratios.append(estimated_source_kb(mod, target) / source_size.source_kb(record, target))
    assert len(set(counts)) > 1  # the schedules differ in size, and the count follows them
    assert all(0.5 < r < 2 for r in ratios), ratios
    assert estimated_source_kb(mod, target) == pytest.approx(KB_PER_STATEMENT * counts[-1])
