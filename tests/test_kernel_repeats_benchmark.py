"""benchmarks/kernel_repeats.py on real records: two schedules MetaSchedule tells apart (their
structural hashes differ) but whose generated code is the same are one kernel, counted once."""

from pathlib import Path

from benchmark_files import load_benchmark

from data.features import schedule_key
from data.records import read_records
from tvm_env import parse_target, setup, tvm

kernel_repeats = load_benchmark("kernel_repeats")
build_profile = load_benchmark("build_profile")
DB = str(Path(__file__).resolve().parent / "fixtures/tiny_records/llvm-sapphirerapids-2c/matmul_e87e4aed")


def test_a_schedule_that_changes_no_code_is_the_same_kernel(capsys):
    target = parse_target({"kind": "llvm", "num-cores": 2})
    setup(target)
    records = [r for task in read_records([DB]).tasks.values() for r in task.records if r.valid]
    plain, noted = (build_profile.replay(records[0]) for _ in range(2))
    noted.annotate(noted.get_sblock("C_init"), "pruner_note", 1)  # an attribute no pass reads
    assert schedule_key(plain.mod) != schedule_key(noted.mod)  # MetaSchedule would measure both
    keys = [kernel_repeats.kernel_key(tvm.tirx.build(s.mod, target)) for s in (plain, plain, noted)]
    assert keys[0] == keys[1] == keys[2]  # built twice, and with the note: one kernel
    other = kernel_repeats.kernel_key(tvm.tirx.build(build_profile.replay(records[1]).mod, target))
    assert other != keys[0]  # another record's tiles: another kernel

    out = kernel_repeats.main(
        ["--databases", f"[{DB}]", "--target", '{"kind": "llvm", "num-cores": 2}', "--records", "8"]
    )
    got = out[DB]
    assert got["records"] + got["unbuilt"] == 8 and got["kernels"] + got["repeats"] == got["records"]
    assert got["kernels"] >= 2
    assert f"| {DB} | {got['records']} | {got['kernels']} | {got['repeats']} (" in capsys.readouterr().out
