"""benchmarks/artifact_load.py on a real llvm build: a `.tar` artifact is linked when it is loaded, a
`.so` only opened, and one linked by `ld` alone (`tvm_env.link`) computes the same product."""

import pytest
from benchmark_files import load_benchmark

from tvm_env import nvrtc

artifact_load = load_benchmark("artifact_load")
needs_cuda = pytest.mark.skipif(not nvrtc.has_headers(), reason="needs the CUDA toolkit's headers (NVRTC)")


def test_a_tar_is_linked_at_load_and_a_so_is_only_opened(capsys):
    out = artifact_load.main(["--size", "32", "--reps", "3"])
    assert set(out) == {"tar", "so (g++)", "so (ld)"}  # each checked against numpy in main
    assert all(t["export_s"] > 0 and t["load_s"] > 0 for t in out.values())
    assert out["so (g++)"]["load_s"] * 5 < out["tar"]["load_s"]  # the link (g++) is what a .tar's load adds
    # what `ld` alone saves on the export (12-19 ms, docs/benchmarks.md) is not asserted: under the
    # suite's load the two exports came within 3 ms; tests/tvm_env/test_link.py checks that `ld` linked
    printed = capsys.readouterr().out
    assert "| .tar |" in printed and "| .so (ld) |" in printed


@needs_cuda
def test_a_gpu_targets_exports_are_timed_on_the_host_and_its_loads_left_to_the_gpu(capsys):
    out = artifact_load.main(["--target", "nvidia/nvidia-h100", "--size", "32", "--reps", "1"])
    assert set(out) == {"tar", "so (g++)", "so (ld)"}
    assert all(t["export_s"] > 0 and t["load_s"] is None for t in out.values())  # no CUDA runtime here
    printed = capsys.readouterr().out
    assert printed.startswith("cuda, n=32") and "| .so (ld) |" in printed and " | - |" in printed
