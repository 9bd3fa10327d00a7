"""tvm_env.PooledLocalBuilder with a compile-size guard: the guard travels to the worker processes, and a
CUDA kernel over it fails its build there with the reason (the host's TVM generates the source, no NVRTC)."""

import os
import time

import pytest
from tvm import te
from tvm.s_tir.meta_schedule.testing import te_workload

from bridge.config import MeasureConfig
from tvm_env import PooledLocalBuilder, ms, parse_target, tvm
from tvm_env.builder import SPARE_AHEAD
from tvm_env.kernel_reuse import KEY_FILE
from tvm_env.popen import end_pool


@pytest.fixture(scope="module")
def builder():
    """The module's 2-worker builder (tests/conftest.py's, but started while the tuning process's
    TVM_NUM_THREADS is 2), warmed: its workers import TVM once for every test that only builds."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TVM_NUM_THREADS", "2")  # inherited by workers started meanwhile
        builder = PooledLocalBuilder(max_workers=2)
        builder.warm()
    yield builder
    builder.shutdown()


@pytest.fixture(scope="module")
def limited():
    """A one-worker builder whose guard refuses any CUDA kernel over 0.1 KB (all of them)."""
    builder = PooledLocalBuilder(max_workers=1, max_source_kb=0.1)
    yield builder
    builder.shutdown()


def test_a_builder_with_a_source_limit_builds_in_its_workers(limited):
    target = parse_target({"kind": "llvm", "num-cores": 1})
    mod = tvm.IRModule({"main": te.create_prim_func(te_workload.matmul(16, 16, 16))})
    (result,) = limited.build([ms.builder.BuilderInput(mod, target)])
    # the limit reaches the worker with the build function; it only bounds CUDA kernels
    assert result.error_msg is None and os.path.isfile(str(result.artifact_path))


def test_a_bad_source_limit_is_refused():
    with pytest.raises(ValueError, match="max_source_kb=0"):
        PooledLocalBuilder(max_source_kb=0)
    with pytest.raises(ValueError, match="--max-source-kb -1"):
        MeasureConfig(max_source_kb=-1)


def test_a_cuda_kernel_over_the_limit_fails_its_build_in_the_worker_with_the_reason(builder, limited):
    target = parse_target("nvidia/nvidia-h100")
    mod = tvm.IRModule({"main": te.create_prim_func(te_workload.matmul(64, 64, 64))})
    sch = tvm.s_tir.Schedule(mod)
    i, j, _ = sch.get_loops(sch.get_sblock("C"))
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    (ok,) = builder.build([ms.builder.BuilderInput(sch.mod, target)])  # no limit
    (refused,) = limited.build([ms.builder.BuilderInput(sch.mod, target)])
    assert ok.error_msg is None and os.path.isfile(str(ok.artifact_path))
    assert refused.artifact_path is None
    assert "over the builder's 0.1 KB limit (max_source_kb), not compiled" in refused.error_msg


def _workers_tvm_threads(pool, n: int) -> list[int]:
    return [r.value for r in pool.map_with_error_catching(lambda _: tvm.runtime.num_threads(), range(n))]


def test_build_workers_run_tvm_on_one_thread_whatever_the_tuning_process_uses(monkeypatch, builder):
    """A worker builds one candidate at a time; with the tuning process's TVM_NUM_THREADS (one thread a
    core) 16 workers built a batch up to 6x slower on a 16-core machine (docs/benchmarks.md)."""
    from tvm.support.popen_pool import PopenPoolExecutor

    monkeypatch.setenv("TVM_NUM_THREADS", "2")  # inherited by workers started from now on
    inherited = PopenPoolExecutor(max_workers=1)
    assert _workers_tvm_threads(inherited, 1) == [2]  # a plain pool's worker: the parent's setting
    end_pool(inherited)
    # the module's builder, whose workers started with the same TVM_NUM_THREADS=2 in the tuning process
    assert _workers_tvm_threads(builder._pool, 4) == [1, 1, 1, 1]
    mod = tvm.IRModule({"main": te.create_prim_func(te_workload.matmul(16, 16, 16))})
    (result,) = builder.build([ms.builder.BuilderInput(mod, parse_target({"kind": "llvm", "num-cores": 1}))])
    assert result.error_msg is None  # and they still build


def test_a_batch_reports_the_cpu_and_wall_seconds_its_workers_spent(builder):
    """`last_batch` is how a tuning curve tells a slow build's cause (busy cores, idle workers)."""
    target = parse_target({"kind": "llvm", "num-cores": 1})
    assert PooledLocalBuilder(max_workers=2).last_batch == {}  # none before a first batch (no process starts)
    inputs = [
        ms.builder.BuilderInput(tvm.IRModule({"main": te.create_prim_func(te_workload.matmul(n, n, n))}), target)
        for n in (16, 24, 32, 48)
    ]
    start = time.perf_counter()
    results = builder.build(inputs)
    wall = time.perf_counter() - start
    assert all(r.error_msg is None for r in results)
    stats = builder.last_batch
    assert set(stats) == {"build_cpu_s", "build_work_s", "compiles_cached"} and stats["compiles_cached"] == 0  # llvm
    # each of 4 builds costs a worker tens of ms; 2 workers can spend at most twice the batch's time
    assert 0.01 < stats["build_cpu_s"] and 0.01 < stats["build_work_s"] <= 2 * wall


def test_the_collectors_build_workers_run_tvm_on_one_thread_at_a_lower_priority(monkeypatch):
    from data.measure import BuildPool

    monkeypatch.setenv("TVM_NUM_THREADS", "2")
    pool = BuildPool(workers=1, timeout=60)
    try:
        (seen,) = pool._pool.map_with_error_catching(lambda _: (tvm.runtime.num_threads(), os.nice(0)), [0])
        threads, niceness = seen.value
        assert threads == 1 and niceness >= min(os.nice(0) + 10, 19)
    finally:
        pool.shutdown()


def test_the_pool_that_replaces_the_workers_starts_ahead_and_the_restart_only_swaps_it(make_builder):
    """A batch that restarted the pool waited for its fresh workers to import TVM (seconds each); the
    successor now starts `SPARE_AHEAD` batches before and is swapped in."""
    target = parse_target({"kind": "llvm", "num-cores": 1})
    mods = [tvm.IRModule({"main": te.create_prim_func(te_workload.matmul(n, n, n))}) for n in (8, 16)]
    builder = make_builder(max_workers=2, reuse_batches=SPARE_AHEAD + 2)
    first = None
    for batch in range(builder.reuse_batches):
        results = builder.build([ms.builder.BuilderInput(m, target) for m in mods])
        assert [r.error_msg for r in results] == [None, None]
        first = first or builder._pool
        assert (builder._spare is not None) == (batch >= 1)  # started SPARE_AHEAD batches before the restart
    spare = builder._spare.result(timeout=120)
    assert len(spare._worker_map) == 2  # both workers started (TVM imported) before any batch needs them
    results = builder.build([ms.builder.BuilderInput(m, target) for m in mods])  # the restart
    assert builder._pool is spare and builder._pool is not first and builder.restarts == 1
    assert [r.error_msg for r in results] == [None, None] and all(os.path.isfile(str(r.artifact_path)) for r in results)


def test_workers_warm_up_for_a_cuda_target_by_building_a_tiny_kernel(make_builder):
    """A fresh worker's first CUDA builds waited 3-5 s each for NVRTC and the CUDA libraries to load;
    `warm(target)` has every worker build one tiny kernel first (here TVM generates its source)."""
    builder = make_builder(max_workers=2, reuse_batches=SPARE_AHEAD + 1)
    builder.warm("nvidia/nvidia-h100")
    assert builder.warmed == [True, True]
    builder.warm({"kind": "llvm", "num-cores": 1})  # nothing to load for a CPU target
    assert builder.warmed == [False, False]
    builder.warm("nvidia/nvidia-h100")
    target = parse_target({"kind": "llvm", "num-cores": 1})
    mod = tvm.IRModule({"main": te.create_prim_func(te_workload.matmul(8, 8, 8))})
    for _ in range(2):  # the spare pool starts after the first batch, warmed for the same CUDA target
        builder.build([ms.builder.BuilderInput(mod, target)])
    builder._spare.result(timeout=120)
    assert builder.warmed == [True, True]


def alive(pids) -> list[int]:
    """The processes of `pids` still running (a zombie, killed but not yet reaped, is not)."""
    import psutil

    running = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                running.append(pid)
        except psutil.NoSuchProcess:
            pass
    return running


def test_shutdown_ends_the_workers_and_the_spare_pool_and_a_later_build_starts_afresh():
    """Pools left to the garbage collector end wherever it runs (TVM's `PopenPoolExecutor.__del__` joins
    their threads there); `shutdown` ends them at once, the spare pool started ahead too."""
    target = parse_target({"kind": "llvm", "num-cores": 1})
    inputs = [ms.builder.BuilderInput(tvm.IRModule({"main": te.create_prim_func(te_workload.matmul(8, 8, 8))}), target)]
    builder = PooledLocalBuilder(max_workers=1, reuse_batches=SPARE_AHEAD + 1)  # a process a pool
    for _ in range(2):  # the spare pool starts after the first batch
        assert builder.build(inputs)[0].error_msg is None
    spare = builder._spare.result(timeout=120)
    pools = [builder._pool, spare]
    pids = [w._proc.pid for pool in pools for w in pool._worker_map.values()]
    assert len(pids) >= 2 and alive(pids) == pids  # the batches' worker(s), and the spare's (warmed)
    builder.shutdown()
    assert alive(pids) == [] and all(pool._shutdown for pool in pools)
    assert builder._pool is None and builder._spare is None
    builder.shutdown()  # twice: nothing more to end
    (again,) = builder.build(inputs)  # a fresh pool
    assert again.error_msg is None and os.path.isfile(str(again.artifact_path))
    fresh = [w._proc.pid for w in builder._pool._worker_map.values()]
    assert fresh and not set(fresh) & set(pids)
    builder.shutdown()
    assert alive(fresh) == []


def test_a_shutdown_while_the_spare_pool_starts_ends_it_once_started():
    builder = PooledLocalBuilder(max_workers=1, reuse_batches=SPARE_AHEAD + 1)
    builder.warm()
    with builder._lock:
        builder._start_spare()  # its worker imports TVM, seconds: shut down before it is up
    spare = builder._spare
    builder.shutdown()
    pool = spare.result(timeout=120)
    deadline = time.monotonic() + 30
    while not pool._shutdown and time.monotonic() < deadline:  # the callback runs as the start ends
        time.sleep(0.05)
    assert pool._shutdown and alive([w._proc.pid for w in pool._worker_map.values() if w._proc]) == []


def test_a_so_artifact_is_linked_in_the_worker_and_a_local_runner_measures_it(make_builder, runner):
    """`artifact="so"` (`export_so`): the build worker links the shared library, so the runner only
    opens it; the runner measures it as it measures MetaSchedule's `.tar`, and MetaSchedule's clean-up
    removes the artifact's folder, which is its own. `set_artifact` switches a builder's next batch
    to the other artifact on the same pool of workers (a suite's variants share one builder)."""
    target = parse_target({"kind": "llvm", "num-cores": 1})
    mod = tvm.IRModule({"main": te.create_prim_func(te_workload.matmul(32, 32, 32))})
    args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    made, pools = make_builder(max_workers=1, artifact="so"), []
    for artifact in ("so", "tar", "so"):
        made.set_artifact(artifact)
        assert made.artifact == artifact
        (built,) = made.build([ms.builder.BuilderInput(mod, target)])
        pools.append(made._pool)
        path = str(built.artifact_path)
        assert built.error_msg is None and path.endswith(f"tvm_tmp_mod.{artifact}") and os.path.isfile(path)
        # a folder of its own, with the kernel's key beside it (tvm_env.kernel_reuse)
        assert sorted(os.listdir(os.path.dirname(path))) == sorted([os.path.basename(path), KEY_FILE])
        if artifact == "so":
            with open(path, "rb") as f:
                assert f.read(4) == b"\x7fELF"  # a shared library, not a tar of objects
        (future,) = runner.run([ms.runner.RunnerInput(path, "cpu", args)])
        result = future.result()
        assert result.error_msg is None and float(result.run_secs[0]) > 0
        ms.utils.remove_build_dir(path)  # what MetaSchedule's RemoveBuildArtifact callback does
        assert not os.path.exists(os.path.dirname(path))
    assert pools[0] is pools[1] is pools[2]  # no restart for a switch
    with pytest.raises(ValueError, match="artifact"):
        PooledLocalBuilder(max_workers=1, artifact="zip")
    with pytest.raises(ValueError, match="artifact='zip'"):
        made.set_artifact("zip")
    assert made.artifact == "so"
    with pytest.raises(ValueError, match="--artifact so needs --runner local"):
        MeasureConfig(artifact="so", runner="rpc", tracker="127.0.0.1:9190", key="k")
    with pytest.raises(ValueError, match="--artifact 'SO'"):
        MeasureConfig(artifact="SO")


def test_a_builders_workers_run_at_the_nice_it_is_given(make_builder):
    """`nice`: every worker process of the pool runs that many steps of nice below this process (so
    a runner's launches do not queue behind compilers), and 0 leaves them at this process's."""
    target = parse_target({"kind": "llvm", "num-cores": 1})
    mod = tvm.IRModule({"main": te.create_prim_func(te_workload.matmul(16, 16, 16))})
    own = os.getpriority(os.PRIO_PROCESS, 0)
    for nice, builder in ((5, make_builder(max_workers=2, nice=5)), (0, make_builder(max_workers=1))):
        (built,) = builder.build([ms.builder.BuilderInput(mod, target)])  # starts the pool's workers
        assert built.error_msg is None
        pids = [w._proc.pid for w in builder._pool._worker_map.values() if w._proc]
        assert pids and all(os.getpriority(os.PRIO_PROCESS, pid) == min(19, own + nice) for pid in pids)
    for bad in (-1, 20):
        with pytest.raises(ValueError, match="nice"):
            PooledLocalBuilder(max_workers=1, nice=bad)
        with pytest.raises(ValueError, match="nice"):
            builder.set_nice(bad)
    with pytest.raises(ValueError, match="--build-nice 20 must be in 0-19"):
        MeasureConfig(build_nice=20)
    from bridge.workers import start_workers

    started, _ = start_workers(target, MeasureConfig(build_nice=3), walk=False)  # what tune.py starts
    try:
        assert started.nice == 3
    finally:
        started.shutdown()


def test_set_nice_moves_the_next_batches_to_workers_at_the_new_priority(make_builder):
    """`set_nice`: a worker cannot go back up in priority, so a change starts a new pool at the new
    nice, which the next batch builds on (the old one ends), and back again; the same nice keeps the
    pool. A tuning suite's variants switch one builder so (`benchmarks/tuning.py`'s `build_nice`)."""
    target = parse_target({"kind": "llvm", "num-cores": 1})
    mod = tvm.IRModule({"main": te.create_prim_func(te_workload.matmul(16, 16, 16))})
    own = os.getpriority(os.PRIO_PROCESS, 0)
    builder = make_builder(max_workers=2)

    def build_and_nices() -> set[int]:
        (built,) = builder.build([ms.builder.BuilderInput(mod, target)])
        assert built.error_msg is None
        pids = [w._proc.pid for w in builder._pool._worker_map.values() if w._proc]
        assert pids
        return {os.getpriority(os.PRIO_PROCESS, pid) for pid in pids}

    assert build_and_nices() == {own}
    first = builder._pool
    builder.set_nice(0)  # unchanged: the same workers
    assert build_and_nices() == {own} and builder._pool is first
    old_pids = [w._proc.pid for w in first._worker_map.values() if w._proc]
    builder.set_nice(7)
    assert builder.nice == 7 and builder._spare is not None  # the new pool starts now, ahead of the batch
    builder.set_nice(7, wait=True)  # the same priority: waits for the pending pool all the same
    assert builder._spare.done()
    assert build_and_nices() == {min(19, own + 7)} and builder._pool is not first
    deadline = time.monotonic() + 30
    while any(os.path.exists(f"/proc/{pid}") for pid in old_pids) and time.monotonic() < deadline:
        time.sleep(0.1)  # the old pool ends in the background
    assert not any(os.path.exists(f"/proc/{pid}") for pid in old_pids)
    builder.set_nice(0, wait=True)  # returns with the new pool started: the next batch swaps it in at once
    assert builder._spare.done()
    assert build_and_nices() == {own}
    assert builder.restarts == 2
    current = builder._pool
    builder.set_nice(3)
    builder.set_nice(0)  # back before any batch: the running pool stays, the spare at 3 goes
    assert builder._spare is None and build_and_nices() == {own} and builder._pool is current
    assert builder.restarts == 2
