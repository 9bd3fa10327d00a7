"""tvm_env.nvrtc: TVM's CUDA kernels compiled with real NVRTC on the host (no GPU needed), against
TVM's own NVRTC compile: the same kernel PTX, less compile time, and the builder's callback."""

import time

import pytest

from data.sampler import sample_schedules
from data.zoo import extract_network_tasks, operator_task
from tvm_env import fast_build, nvrtc, parse_target, setup, tvm

H100 = "nvidia/nvidia-h100"

needs_cuda = pytest.mark.skipif(
    not nvrtc.has_headers(),
    reason="needs the CUDA toolkit's headers (CUDA_PATH or nvcc; the dev VMs have CUDA 13.0)",
)

TVM_PRELUDE = """
#ifdef __CUDACC_RTC__
  #include <cuda/std/cstdint>
  using cuda::std::int64_t;

  #include <cuda/std/type_traits>
  namespace std {
    using cuda::std::is_same;
    using cuda::std::conditional;
  }
#else
  #include <cuda.h>
#endif
"""
KERNEL = 'extern "C" __global__ void k(float* a) { a[threadIdx.x] = %s; }\n'


@pytest.fixture(scope="module")
def cuda_env():
    """CUDA_PATH for TVM's own compile (its search does not follow a symlinked nvcc)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("CUDA_PATH", nvrtc.cuda_path())
    yield
    mp.undo()


def test_unused_headers_are_dropped_and_used_ones_kept():
    plain = nvrtc.lighten(TVM_PRELUDE + KERNEL % "1.0f")
    assert "type_traits" not in plain and "namespace std" not in plain and "cuda/std/limits" not in plain
    assert "#include <cuda.h>" not in plain and "using cuda::std::int64_t;" in plain and "__global__" in plain
    uses_alias = nvrtc.lighten(TVM_PRELUDE + KERNEL % "(std::is_same<float, float>::value ? 1.0f : 0.0f)")
    assert "#include <cuda/std/type_traits>" in uses_alias and "using cuda::std::is_same;" in uses_alias
    cuda_std_only = nvrtc.lighten(TVM_PRELUDE + KERNEL % "(cuda::std::is_same<float, float>::value ? 1.0f : 0.0f)")
    assert "namespace std" not in cuda_std_only, "cuda::std:: needs the header, not the aliases"
    assert "#include <cuda/std/limits>" in nvrtc.lighten(TVM_PRELUDE + KERNEL % "-INFINITY")


def _sample(task, target, seed: int):
    """One sampled schedule of `task`: these tests compile its kernel, so a small population does (a
    sparse space, e.g. the depthwise conv's, was otherwise sampled again at MetaSchedule's default
    population of 2048: 26 s of CPU on the 2-core host for one schedule)."""
    (sch,) = sample_schedules(task, target, 1, seed=seed, exclude=set(), population=16, genetic_iters=1, min_init=1)
    return sch


def _sources(target) -> list[tuple[str, str]]:
    """(name, TVM's generated CUDA) for sampled schedules of operators and of bert_tiny's fused
    kernels (layer norm, GELU, softmax); on a machine without CUDA the build stops at the source."""
    tasks = [operator_task(s) for s in ("matmul:256,256,256", "depthwise_conv2d:1,14,14,64,3,1,1", "softmax:256,1024")]
    fused = {"layer_norm", "fused_reshape10_gelu_reshape11", "fused_softmax_broadcast_to2"}
    tasks += [t for t in extract_network_tasks("bert_tiny", target) if t.name in fused]
    out = []
    for task in tasks:
        (device,) = tvm.tirx.build(_sample(task, target, seed=1).mod, target).imports
        out.append((task.name, device.inspect_source()))
    return out


@needs_cuda
def test_kernels_compile_to_the_ptx_tvms_compile_gives_in_less_time(cuda_env):
    from tvm.support import nvcc

    target = parse_target(H100)
    setup(target)
    sources = _sources(target)
    assert len(sources) == 6
    times = {"tvm": 0.0, "ours": 0.0}
    for name, code in sources:
        start = time.perf_counter()
        theirs = nvcc.compile_cuda(code, target_format="ptx", arch="sm_90a", compiler="nvrtc")
        times["tvm"] += time.perf_counter() - start
        start = time.perf_counter()
        ours = nvrtc.compile_cuda(code, "ptx", arch="sm_90a")
        times["ours"] += time.perf_counter() - start
        assert nvrtc.kernel_lines(ours) == nvrtc.kernel_lines(theirs), name
        assert ".entry" in bytes(ours).decode(errors="replace"), name
    assert times["ours"] < times["tvm"], times  # about 0.7 s less a kernel here (benchmarks/build_profile.py)


@needs_cuda
def test_the_builder_compiles_cuda_through_ours_unless_turned_off(cuda_env, monkeypatch):
    target = parse_target(H100)
    sch = _sample(operator_task("softmax:256,1024"), target, seed=0)
    fast_build(sch.mod, target, None)  # installs the callback (the build itself stops at the source here)
    (device,) = tvm.tirx.build(sch.mod, target).imports
    callback = tvm.get_global_func("tvm_callback_cuda_compile")
    with target:
        ours = bytes(callback(device.inspect_source()))
        monkeypatch.setenv("PRUNER_NVRTC_LITE", "0")
        theirs = bytes(callback(device.inspect_source()))
    assert ours[:4] == theirs[:4] == b"\x7fELF", "cubins"
    assert b"numeric_limits" in theirs and b"numeric_limits" not in ours, "TVM's carries the headers' constants"


@needs_cuda
def test_a_kernel_that_does_not_compile_gets_nvrtcs_log(cuda_env):
    nvrtc.install()
    callback = tvm.get_global_func("tvm_callback_cuda_compile")
    with (
        parse_target(H100),
        pytest.raises(Exception, match="(?s)NVRTC compilation failed.*undefined_name. is undefined"),
    ):
        callback(TVM_PRELUDE + KERNEL % "undefined_name")


def test_a_kernel_over_the_source_limit_is_refused_in_the_build_before_any_compile():
    """The guard is TVM's postproc callback, which the code generator calls with the source before
    the compile callback: the host's TVM (no CUDA runtime) calls only it, so a real build shows it."""
    target = parse_target(H100)
    sch = _sample(operator_task("softmax:256,1024"), target, seed=0)
    (device,) = tvm.tirx.build(sch.mod, target).imports
    code = device.inspect_source()
    try:
        start = time.perf_counter()
        with pytest.raises(Exception, match=r"CUDA source of \d+ KB is over the builder's [\d.]+ KB limit"):
            fast_build(sch.mod, target, None, max_source_kb=len(code) / 1024 / 2)  # what a builder worker does
        assert time.perf_counter() - start < 2.0, "refused without compiling"
        (device,) = fast_build(sch.mod, target, None, max_source_kb=2 * len(code) / 1024).imports
        assert device.inspect_source() == code  # under the limit: the source passes unchanged
    finally:
        fast_build(sch.mod, target, None)  # no limit again for this process


def test_the_guard_keeps_a_postproc_registered_before_it(monkeypatch):
    seen = []
    monkeypatch.setattr(nvrtc, "_previous_postproc", lambda code, target: seen.append(len(code)) or code + "//")
    nvrtc.set_max_source_kb(1)
    try:
        assert nvrtc._postproc("x" * 100, None) == "x" * 100 + "//" and seen == [100]
        with pytest.raises(nvrtc.SourceTooLarge, match="2 KB is over the builder's 1 KB limit"):
            nvrtc._postproc("y" * 2048, None)
        assert seen == [100]  # refused before the earlier postproc
    finally:
        nvrtc.set_max_source_kb(None)


def test_a_bad_source_limit_is_refused():
    with pytest.raises(ValueError, match="max_source_kb=0"):
        nvrtc.set_max_source_kb(0)
