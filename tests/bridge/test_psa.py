"""PSA: the scoring function against docs/pruner.md section 4.2 computed by hand, the device table, the cost model."""

import math

import numpy as np
import pytest

from bridge.psa import (
    FORMULAS,
    HIDING_WARPS,
    STAGE_LATENCY,
    Device,
    PSACostModel,
    get_device,
    load_devices,
    naive_scores,
    psa_latency,
    psa_scores,
)
from tvm_env import ms, parse_target, setup, tvm

A100 = Device("a100", peak_gflops=19490, bandwidth_gbs=1935, sm_count=108)


def row(
    flops_thread=0.0,
    total=0.0,
    regs=0.0,
    mem=0.0,
    shared=0.0,
    dram=0.0,
    reuse=1.0,
    gpu=1.0,
    grid=1.0,
    block=1.0,
    vthread=1.0,
    dram_all=None,
):
    dram_all = dram if dram_all is None else dram_all
    return np.array(
        [flops_thread, total, regs, mem, shared, dram, reuse, gpu, grid, block, vthread, dram_all], dtype=np.float32
    )


def spec_time(r, d: Device) -> float:
    """docs/pruner.md section 4.2 written out for one row, scalar by scalar."""
    grid, block = float(r[8]), float(r[9])
    warps_f = block / d.warp_size
    warps = math.ceil(warps_f)
    warp_penalty = warps_f / warps
    thread_penalty = 1 + 1 / float(r[6])
    mid = grid < d.active_blocks_per_sm * d.sm_count
    tiny, small = mid and warps < d.sm_partitions, mid and warps >= d.sm_partitions
    act = warps if tiny else d.sm_partitions if small else 1
    units = grid * act
    total = d.sm_partitions * d.sm_count if mid else d.active_blocks_per_sm * d.sm_count
    peak_penalty = units / (math.ceil(units / total) * total)
    reg_penalty = float(r[2]) / 128 if r[2] >= 128 else 1
    compute = float(r[1]) * thread_penalty / (d.peak_gflops * peak_penalty * warp_penalty / reg_penalty) / 1e6
    memory = float(r[5]) / d.bandwidth_gbs * 1000 / 2**30
    return max(compute, memory)


CASES = [
    row(flops_thread=64, total=64 * 256 * 64, regs=80, mem=40, reuse=2.6, grid=256, block=64),  # big grid, 2 warps
    row(flops_thread=512, total=512 * 20 * 100, regs=300, mem=90, reuse=6.7, grid=20, block=100),  # mid, tiny
    row(flops_thread=8, total=8 * 50 * 256, mem=16, reuse=1.5, grid=50, block=256),  # mid, small
    row(shared=4096, dram=4096 * 300, grid=300, block=128),  # shared-memory load, memory only
    row(dram=1e6, grid=400, block=256),  # write-back
]


def test_latency_matches_the_spec_row_by_row():
    got = psa_latency(np.stack(CASES), A100, "published")
    assert got == pytest.approx([spec_time(r, A100) for r in CASES], rel=1e-6)


def test_score_is_inverse_sum_and_failed_programs_rank_last():
    programs = [np.stack(CASES[:2]), None, np.stack(CASES[2:]), np.zeros((0, 12), np.float32)]
    scores = psa_scores(programs, A100, "published")
    assert scores[0] == pytest.approx(1 / (spec_time(CASES[0], A100) + spec_time(CASES[1], A100)))
    assert scores[2] == pytest.approx(1 / sum(spec_time(r, A100) for r in CASES[2:]))
    assert scores[1] == -np.inf and scores[3] == -np.inf


def test_more_dram_traffic_or_fewer_blocks_is_slower():
    base = row(dram=1e8, grid=1000, block=256)
    more = row(dram=2e8, grid=1000, block=256)
    assert psa_scores([base[None]], A100)[0] > psa_scores([more[None]], A100)[0]
    compute = row(total=1e10, reuse=4.0, grid=2000, block=256)
    starved = row(total=1e10, reuse=4.0, grid=8, block=256)
    assert psa_scores([compute[None]], A100)[0] > psa_scores([starved[None]], A100)[0]


def test_occupancy_formula_only_changes_memory_time():
    memory_bound = np.stack([row(dram=1e8, grid=10, block=32)])
    compute_bound = np.stack([row(total=1e10, reuse=4.0, grid=2000, block=256)])
    assert psa_latency(compute_bound, A100, "occupancy") == pytest.approx(psa_latency(compute_bound, A100, "published"))
    assert psa_latency(memory_bound, A100, "occupancy")[0] > psa_latency(memory_bound, A100, "published")[0]
    with pytest.raises(ValueError, match="formula"):
        psa_latency(memory_bound, A100, "nope")


def test_traffic_formulas_take_the_memory_time_from_every_trip():
    # a shared-memory load whose reduction is split into 8 stages: column 5 counts one stage, 11 all
    staged = np.stack([row(shared=4096, dram=4096 * 300, dram_all=8 * 4096 * 300, grid=300, block=128)])
    published, traffic = psa_latency(staged, A100, "published")[0], psa_latency(staged, A100, "traffic")[0]
    assert traffic == pytest.approx(8 * published)
    assert psa_latency(staged, A100, "traffic-occupancy")[0] > traffic  # 300 blocks of 4 warps: not full occupancy
    compute_bound = np.stack([row(total=1e10, reuse=4.0, grid=2000, block=256)])
    assert psa_latency(compute_bound, A100, "traffic") == pytest.approx(psa_latency(compute_bound, A100, "published"))
    assert set(FORMULAS) == {
        "published",
        "occupancy",
        "traffic",
        "traffic-occupancy",
        "traffic-warps",
        "traffic-stages",
    }


def test_traffic_warps_charges_too_few_warps_to_hide_latency():
    # the same work in blocks of one warp and of two, 3 blocks an SM (A100: 108 SMs, 4 partitions):
    # equal to the published model (one block an SM at a time), but a partition has 0.75 or 1.5
    # resident warps; below one (HIDING_WARPS) the row's time is divided by that share
    one, two = (row(total=1e9, reuse=50.0, dram_all=1e6, grid=3 * 108, block=b) for b in (32, 64))
    for formula, equal in (("traffic-occupancy", True), ("traffic-warps", False)):
        a, b = psa_latency(np.stack([one]), A100, formula)[0], psa_latency(np.stack([two]), A100, formula)[0]
        assert bool(a == pytest.approx(b)) is equal, (formula, a, b)
    assert HIDING_WARPS == 1.0
    assert psa_latency(np.stack([one]), A100, "traffic-warps")[0] == pytest.approx(
        psa_latency(np.stack([one]), A100, "traffic-occupancy")[0] / 0.75
    )
    assert psa_latency(np.stack([two]), A100, "traffic-warps") == pytest.approx(
        psa_latency(np.stack([two]), A100, "traffic-occupancy")
    )
    # many warps a partition: no charge
    busy = np.stack([row(total=1e10, reuse=4.0, dram_all=1e8, grid=20000, block=256)])
    assert psa_latency(busy, A100, "traffic-warps") == pytest.approx(psa_latency(busy, A100, "traffic-occupancy"))


def test_traffic_stages_charges_each_stage_once_a_wave():
    # the 3x3 conv's two schedule families on one H100 (132 SMs): a block computes its outputs in 2
    # stages (loads both tiles twice) or in 8; both kernels are one wave, so 8 stages wait 6 more times
    h100 = Device("h100", peak_gflops=66900, bandwidth_gbs=3350, sm_count=132)

    def kernel(stages, grid=105, block=112):
        compute = row(flops_thread=1e4, total=1.4e8, mem=2e3, reuse=6.0, grid=grid, block=block)
        loads = [row(shared=2e3 * k, dram=2e5 * k, dram_all=2e5 * k * stages, grid=grid, block=block) for k in (1, 4)]
        writeback = row(dram=1.2e5, grid=grid, block=block)
        return np.stack([compute, *loads, writeback])

    two, eight = kernel(2), kernel(8)
    for program in (two, eight):  # the rows are traffic-occupancy's
        assert psa_latency(program, h100, "traffic-stages") == pytest.approx(
            psa_latency(program, h100, "traffic-occupancy")
        )
    base = 1 / psa_scores([two, eight], h100, "traffic-occupancy")
    staged = 1 / psa_scores([two, eight], h100, "traffic-stages")
    # one charge a program (the most trips of its loads, not their sum): 2 and 8 stages, one wave
    assert staged - base == pytest.approx([2 * STAGE_LATENCY, 8 * STAGE_LATENCY])
    # more blocks than fit an SM at once: 4 warps a block, 16 resident an SM, so 3 waves of 132 x 16
    many = kernel(8, grid=132 * 16 * 2 + 1, block=128)
    assert 1 / psa_scores([many], h100, "traffic-stages")[0] - 1 / psa_scores([many], h100, "traffic-occupancy")[0] == (
        pytest.approx(3 * 8 * STAGE_LATENCY)
    )
    # a program without a shared-memory load (a depthwise conv reading global memory) pays nothing
    plain = np.stack([row(total=1e8, reuse=2.0, grid=500, block=256), row(dram=1e6, grid=500, block=256)])
    assert psa_scores([plain], h100, "traffic-stages")[0] == pytest.approx(
        psa_scores([plain], h100, "traffic-occupancy")[0]
    )


def test_naive_heuristic_counts_threads():
    scores = naive_scores([np.stack([row(grid=10, block=32), row(grid=4, block=512)]), None])
    assert scores[0] == 2048 and scores[1] == -np.inf


def test_device_table_has_the_published_rows():
    devices = load_devices()
    published = {
        "k80": (8226, 480, 26),
        "t4": (8141, 320, 40),
        "titanv": (14900, 651, 80),
        "orin": (2660, 204, 16),
        "a100": (19490, 1935, 108),
        "a100_40": (19490, 1555, 108),
        "h100": (66900, 3350, 132),
        "h200": (66900, 4800, 132),
    }
    for name, (peak, bandwidth, sms) in published.items():
        d = devices[name]
        assert (d.peak_gflops, d.bandwidth_gbs, d.sm_count) == (peak, bandwidth, sms)
        assert (d.sm_partitions, d.warp_size, d.active_blocks_per_sm) == (4, 32, 1)


def test_user_device_file_adds_and_overrides_rows(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(
        "l4: {peak_gflops: 30300, bandwidth_gbs: 300, sm_count: 58}\n"
        "h100: {peak_gflops: 60000, bandwidth_gbs: 3350, sm_count: 114}\n"
    )
    assert get_device("l4", path) == Device("l4", 30300, 300, 58)
    assert get_device("h100", path).sm_count == 114
    assert get_device("h100").sm_count == 132


@pytest.mark.parametrize(
    "text, match",
    [
        ("x: {peak_gflops: 1, bandwidth_gbs: 1}\n", "x"),
        ("x: {peak_gflops: -5, bandwidth_gbs: 1, sm_count: 2}\n", "peak_gflops=-5"),
        ("x: {peak_gflops: 1, bandwidth_gbs: 1, sm_count: 2, color: red}\n", "unknown fields"),
        ("- just a list\n", "mapping"),
        ("x: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_device_file_names_the_file(tmp_path, text, match):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=match) as err:
        load_devices(path)
    assert str(path) in str(err.value)


def test_unknown_device_missing_file_and_auto_without_gpu(tmp_path):
    with pytest.raises(ValueError, match="'v100' is not in the device table"):
        get_device("v100")
    with pytest.raises(FileNotFoundError, match="nowhere.yaml"):
        load_devices(tmp_path / "nowhere.yaml")
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="needs a CUDA GPU"):
            get_device("auto")


@pytest.fixture(scope="module")
def measured(measured_matmul):
    context, candidates, _ = measured_matmul
    return context, candidates


def test_cost_model_scores_real_candidates(measured):
    context, candidates = measured
    model = PSACostModel(device="h100")
    scores = model.predict(context, candidates)
    assert scores.shape == (len(candidates),) and scores.dtype == np.float64
    assert np.all(np.isfinite(scores)) and np.all(scores > 0)
    assert len(np.unique(scores)) > 1  # the memory-work columns differ between the schedules


def test_cost_model_rejects_bad_formula_and_round_trips(tmp_path, measured):
    with pytest.raises(ValueError, match="formula"):
        PSACostModel(formula="magic")
    context, candidates = measured
    model = PSACostModel(device="t4", formula=FORMULAS[1])
    model.save(str(tmp_path / "psa.json"))
    other = PSACostModel(device="h200")
    other.load(str(tmp_path / "psa.json"))
    assert other.device == model.device and other.formula == model.formula
    np.testing.assert_array_equal(other.predict(context, candidates[:4]), model.predict(context, candidates[:4]))


@pytest.fixture(scope="module")
def cuda_candidates():
    """(context, candidates) of a CUDA matmul design space, sampled and lowered without a GPU.

    A V100 target (sm_70) has no tensor-core rules, so the slow CUDA tensor-intrinsic import is not
    needed (setup() without a target registers only the stub).
    """
    from tvm import te
    from tvm.s_tir.meta_schedule.testing import te_workload

    from tvm_env import tvm_ffi

    target = parse_target("nvidia/nvidia-v100")
    setup()
    mod = tvm.IRModule({"main": te.create_prim_func(te_workload.matmul(256, 256, 256))})
    context = ms.TuneContext(
        mod=mod, target=target, space_generator="post-order-apply", num_threads=2, rand_state=0
    ).clone()
    search = ms.search_strategy.EvolutionarySearch(population_size=16)
    search._initialize_with_tune_context(context)
    search.pre_tuning(
        16, 16, context.generate_design_space(), ms.database.MemoryDatabase(), ms.cost_model.RandomModel()
    )
    sample = tvm_ffi.get_global_func("s_tir.meta_schedule.SearchStrategyEvolutionarySearchSampleInitPopulation")
    schedules = list(sample(search, 16))
    return context, [
        ms.MeasureCandidate(s, ms.arg_info.ArgInfo.from_entry_func(s.mod, remove_preproc=True)) for s in schedules
    ]


def test_cuda_candidates_get_distinct_gpu_scores(cuda_candidates):
    context, candidates = cuda_candidates
    scores = PSACostModel(device="h100", workers=0).predict(context, candidates)
    assert np.all(scores > 0) and len(np.unique(scores)) > len(scores) // 2


def test_every_entry_point_drafts_with_the_default_formula():
    import inspect

    from bridge.config import SearchConfig
    from bridge.psa import DEFAULT_FORMULA
    from pruner_lightning import api

    assert DEFAULT_FORMULA in FORMULAS
    assert SearchConfig().psa_formula == DEFAULT_FORMULA
    assert inspect.signature(api.draft_verify).parameters["formula"].default == DEFAULT_FORMULA
    assert PSACostModel(device="h100").formula == DEFAULT_FORMULA
