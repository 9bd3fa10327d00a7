"""benchmarks/artifact_load.py on a real llvm build: a `.tar` artifact is linked when it is loaded, a
`.so` only opened, and one linked by `ld` alone (`tvm_env.link`) exports faster than one linked by the
compiler driver and computes the same product."""

from benchmark_files import load_benchmark

artifact_load = load_benchmark("artifact_load")


def test_a_tar_is_linked_at_load_and_a_so_is_only_opened(capsys):
    out = artifact_load.main(["--size", "32", "--reps", "2"])
    assert set(out) == {"tar", "so (g++)", "so (ld)"}  # each checked against numpy in main
    assert all(t["export_s"] > 0 and t["load_s"] > 0 for t in out.values())
    assert out["so (g++)"]["load_s"] * 5 < out["tar"]["load_s"]  # the link (g++) is what a .tar's load adds
    # the driver's chain of processes (g++, collect2, ld) is what `ld` alone saves: 15 ms of 18 here
    assert out["so (ld)"]["export_s"] < out["so (g++)"]["export_s"] - 0.005
    printed = capsys.readouterr().out
    assert "| .tar |" in printed and "| .so (ld) |" in printed
