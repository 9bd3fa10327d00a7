"""benchmarks/artifact_load.py on a real llvm build: a `.tar` artifact is linked when it is loaded, a
`.so` only opened."""

from benchmark_files import load_benchmark

artifact_load = load_benchmark("artifact_load")


def test_a_tar_is_linked_at_load_and_a_so_is_only_opened(capsys):
    out = artifact_load.main(["--size", "32", "--reps", "2"])
    assert set(out) == {"tar", "so"}
    assert all(t["export_s"] > 0 and t["load_s"] > 0 for t in out.values())
    assert out["so"]["load_s"] * 5 < out["tar"]["load_s"]  # the link (g++) is what a .tar's load adds
    printed = capsys.readouterr().out
    assert "| .tar |" in printed and "| .so |" in printed
