"""tvm_env.kernel_reuse with a real build pool and a real local runner: schedules that MetaSchedule tells
apart but that generate the same code are one kernel, measured once; and tvm_env.compile_cache, the
folder of compiled kernels a pool's workers share."""

import os

import pytest
from tvm import te
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.testing import te_workload

from data.features import schedule_key
from tvm_env import ReusingRunner, compile_cache, kernel_key, ms, nvrtc, parse_target, tvm
from tvm_env.kernel_reuse import KEY_FILE, read_key, write_key

TARGET = {"kind": "llvm", "num-cores": 2}
MATMUL = tvm.IRModule({"main": te.create_prim_func(te_workload.matmul(32, 32, 32))})
ARGS = ms.arg_info.ArgInfo.from_prim_func(MATMUL["main"])


def scheduled(note: int | None = None, factor: int = 8):
    """The matmul with its column loop split by `factor`; with `note`, also an annotation that no pass
    reads, so a schedule MetaSchedule tells apart (another structural hash) that compiles to the same code."""
    sch = tvm.s_tir.Schedule(MATMUL)
    _, j, _ = sch.get_loops(sch.get_sblock("C"))
    sch.split(j, [None, factor])
    if note is not None:
        sch.annotate(sch.get_sblock("C"), "pruner_note", note)
    return sch.mod


@derived_object
class Counting(ms.runner.PyRunner):
    """The real runner, and the artifacts it was asked to measure."""

    def __init__(self, *, runner):
        super().__init__()
        self.runner, self.asked = runner, []

    def run(self, runner_inputs):
        self.asked.extend(str(r.artifact_path) for r in runner_inputs)
        return self.runner.run(runner_inputs)


def test_twins_are_measured_once_and_take_the_first_ones_measurement(make_builder, runner):
    target = parse_target(TARGET)
    plain, noted, other = scheduled(), scheduled(note=1), scheduled(factor=4)
    assert schedule_key(plain) != schedule_key(noted)  # MetaSchedule would measure both
    builder = make_builder(max_workers=2)
    built = builder.build([ms.builder.BuilderInput(m, target) for m in (plain, noted, other)])
    paths = [str(b.artifact_path) for b in built]
    keys = [read_key(p) for p in paths]
    assert all(b.error_msg is None for b in built) and None not in keys
    assert keys[0] == keys[1] == kernel_key(tvm.tirx.build(plain, target)) != keys[2]  # the worker's key is the build's
    assert sorted(os.listdir(os.path.dirname(paths[0]))) == sorted([os.path.basename(paths[0]), KEY_FILE])

    counting = Counting(runner=runner)
    reusing = ReusingRunner(runner=counting)
    reusing.count_reused = True  # as a SearchLog sets it
    results = [f.result() for f in reusing.run([ms.runner.RunnerInput(p, "cpu", ARGS) for p in paths])]
    assert counting.asked == [paths[0], paths[2]]  # the twin in the same batch waited for the first
    assert all(r.error_msg is None for r in results)
    secs = [[float(s) for s in r.run_secs] for r in results]
    assert secs[1] == secs[0] and secs[2] != secs[0]
    assert reusing.take_reused(paths) == 1 and reusing.take_reused(paths) == 0  # counted once, then forgotten

    (later,) = builder.build([ms.builder.BuilderInput(scheduled(note=2), target)])  # a third twin, a batch later
    (future,) = reusing.run([ms.runner.RunnerInput(str(later.artifact_path), "cpu", ARGS)])
    assert future.done() and [float(s) for s in future.result().run_secs] == secs[0]
    assert len(counting.asked) == 2 and reusing.take_reused([str(later.artifact_path)]) == 1

    # a twin that comes while its kernel's measurement (of an earlier batch) is still under way waits for it
    other_twin, third = builder.build(
        [ms.builder.BuilderInput(m, target) for m in (scheduled(factor=4, note=1), scheduled(factor=2))]
    )
    fresh = ReusingRunner(runner=counting)
    asked = len(counting.asked)
    (first,) = fresh.run([ms.runner.RunnerInput(paths[2], "cpu", ARGS)])  # not waited for yet
    waiting, new = fresh.run([ms.runner.RunnerInput(str(b.artifact_path), "cpu", ARGS) for b in (other_twin, third)])
    assert counting.asked[asked:] == [paths[2], str(third.artifact_path)]  # the twin never reached the runner
    assert [float(s) for s in waiting.result().run_secs] == [float(s) for s in first.result().run_secs]
    assert new.result().error_msg is None and fresh.reused_total == 1 and fresh._pending == {}  # all settled
    assert fresh.take_reused([str(other_twin.artifact_path)]) == 0  # paths are kept only with count_reused
    for path in [*paths, *(str(b.artifact_path) for b in (later, other_twin, third))]:
        ms.utils.remove_build_dir(path)  # what MetaSchedule's RemoveBuildArtifact does, reused or not


def test_a_failed_measurement_is_not_kept_and_its_twin_in_the_batch_fails_with_it(make_builder, runner, tmp_path):
    """Two artifacts that cannot be loaded, with one kernel's key beside each: the runner fails the
    first, its twin of the batch reports that failure, and a good build with the key is measured."""
    target = parse_target(TARGET)
    (good,) = make_builder(max_workers=1).build([ms.builder.BuilderInput(scheduled(), target)])
    key = read_key(str(good.artifact_path))
    broken = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "tvm_tmp_mod.tar").write_bytes(b"not a tar")
        write_key(str(tmp_path / name / "tvm_tmp_mod.tar"), key)
        broken.append(str(tmp_path / name / "tvm_tmp_mod.tar"))
    counting = Counting(runner=runner)
    reusing = ReusingRunner(runner=counting)
    first, twin = (f.result() for f in reusing.run([ms.runner.RunnerInput(p, "cpu", ARGS) for p in broken]))
    assert first.error_msg and twin.run_secs is None and "whose run failed" in twin.error_msg
    assert first.error_msg in twin.error_msg and counting.asked == broken[:1]
    assert reusing.measured == {}
    (measured,) = reusing.run([ms.runner.RunnerInput(str(good.artifact_path), "cpu", ARGS)])
    assert measured.result().error_msg is None and counting.asked[-1] == str(good.artifact_path)
    assert list(reusing.measured) == [key]
    ms.utils.remove_build_dir(str(good.artifact_path))


def test_a_key_file_that_is_not_a_key_is_ignored(tmp_path):
    artifact = str(tmp_path / "tvm_tmp_mod.tar")
    assert read_key(artifact) is None and read_key(None) is None
    (tmp_path / KEY_FILE).write_text("../../etc/passwd")
    assert read_key(artifact) is None
    write_key(artifact, "0" * 40)
    assert read_key(artifact) == "0" * 40


def test_a_compile_comes_from_the_folder_once_it_is_there(tmp_path, monkeypatch):
    calls = []

    def compile_it():
        calls.append(1)
        return b"cubin %d" % len(calls)

    monkeypatch.setattr(compile_cache, "_folder", None)
    assert compile_cache.compiled("k", lambda: "sm_90", compile_it) == b"cubin 1"  # no folder: compiled every time
    assert compile_cache.compiled("k", lambda: "sm_90", compile_it) == b"cubin 2"
    compile_cache.set_folder(str(tmp_path))
    hits = compile_cache.hits()
    assert compile_cache.compiled("k", lambda: "sm_90", compile_it) == b"cubin 3"
    assert compile_cache.compiled("k", lambda: "sm_90", compile_it) == b"cubin 3"  # from the folder
    assert compile_cache.compiled("k", lambda: "sm_80", compile_it) == b"cubin 4"  # another architecture: compiled
    assert compile_cache.compiled("k2", lambda: "sm_90", compile_it) == b"cubin 5"
    assert compile_cache.hits() - hits == 1 and len(calls) == 5
    assert len(os.listdir(tmp_path)) == 3 and not any(n.startswith(".part-") for n in os.listdir(tmp_path))
    compile_cache.set_folder(str(tmp_path / "gone"))  # a folder removed under a late build: still compiles
    assert compile_cache.compiled("k", lambda: "sm_90", compile_it) == b"cubin 6"


def test_a_builder_makes_its_folder_at_the_first_batch_and_removes_it_at_shutdown(make_builder):
    target = parse_target(TARGET)
    builder = make_builder(max_workers=1, compile_cache=True)
    assert builder._cache_folder is None
    (first,) = builder.build([ms.builder.BuilderInput(scheduled(), target)])
    ms.utils.remove_build_dir(str(first.artifact_path))
    folder = builder._cache_folder
    assert folder is not None and os.path.isdir(folder) and builder.last_batch["compiles_cached"] == 0  # llvm: no NVRTC
    builder.shutdown()
    assert not os.path.exists(folder) and builder._cache_folder is None
    without = make_builder(max_workers=1)  # off by default (MeasureConfig.reuse_kernels turns it on)
    (built,) = without.build([ms.builder.BuilderInput(scheduled(), target)])
    assert without._cache_folder is None and read_key(str(built.artifact_path)) is not None
    without.set_compile_cache(True)
    (again,) = without.build([ms.builder.BuilderInput(scheduled(), target)])
    assert os.path.isdir(without._cache_folder)
    kept = without._cache_folder
    without.set_compile_cache(True, fresh=True)  # a suite's next arm: a folder of its own, made at its first batch
    assert not os.path.exists(kept) and without._cache_folder is None and without.compile_cache
    for b in (built, again):
        ms.utils.remove_build_dir(str(b.artifact_path))


@pytest.mark.skipif(not nvrtc.has_headers(), reason="needs the CUDA toolkit's headers (NVRTC compiles here)")
def test_a_cuda_kernel_built_again_is_not_compiled_again(tmp_path, monkeypatch):
    """The compile callback that the builder's workers use, with real NVRTC: a source compiled once is
    read from the folder the second time, the same cubin, and another architecture compiles apart."""
    import time

    monkeypatch.setenv("CUDA_PATH", nvrtc.cuda_path())
    nvrtc.install()
    callback = tvm.get_global_func("tvm_callback_cuda_compile")
    code = 'extern "C" __global__ void k(float* a) { a[threadIdx.x] = 2.0f * a[threadIdx.x]; }\n'
    compile_cache.set_folder(str(tmp_path))
    try:
        hits = compile_cache.hits()
        with parse_target("nvidia/nvidia-h100"):
            start = time.perf_counter()
            first = bytes(callback(code))
            compiled_s = time.perf_counter() - start
            start = time.perf_counter()
            again = bytes(callback(code))
            cached_s = time.perf_counter() - start
        with parse_target("nvidia/nvidia-a100"):
            other = bytes(callback(code))
    finally:
        compile_cache.set_folder(None)
    assert first == again and first[:4] == b"\x7fELF" and other != first
    assert compile_cache.hits() - hits == 1 and len(os.listdir(tmp_path)) == 2
    assert cached_s < compiled_s
