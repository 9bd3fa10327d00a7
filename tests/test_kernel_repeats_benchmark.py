"""benchmarks/kernel_repeats.py on real records: two schedules MetaSchedule tells apart (their
structural hashes differ) but whose generated code is the same are one kernel, counted once."""

import math
from pathlib import Path

import pytest
from benchmark_files import load_benchmark, twin_database

from data.features import schedule_key
from data.records import read_records
from tvm_env import kernel_key, parse_target, setup, tvm

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
    keys = [kernel_key(tvm.tirx.build(s.mod, target)) for s in (plain, plain, noted)]
    assert keys[0] == keys[1] == keys[2]  # built twice, and with the note: one kernel
    for record in records[:8]:  # LLVM's alias metadata names addresses ("0x55d6...", "0x55d6....w4.b12")
        twice = {kernel_key(tvm.tirx.build(build_profile.replay(record).mod, target)) for _ in range(2)}
        assert len(twice) == 1, record.source
    other = kernel_key(tvm.tirx.build(build_profile.replay(records[1]).mod, target))
    assert other != keys[0]  # another record's tiles: another kernel

    out = kernel_repeats.main(
        ["--databases", f"[{DB}]", "--target", '{"kind": "llvm", "num-cores": 2}', "--records", "8"]
    )
    got = out[DB]
    assert got["records"] + got["unbuilt"] == 8 and got["kernels"] + got["repeats"] == got["records"]
    assert got["kernels"] >= 2
    if got["repeats"]:  # the share of a repeated kernel's measurements that ran slow
        assert 0 <= got["slow_share"] <= 1
    else:
        assert math.isnan(got["slow_share"])
    assert f"| {DB} | {got['records']} | {got['kernels']} | {got['repeats']} (" in capsys.readouterr().out


def test_a_repeated_kernel_is_counted_once_with_its_slow_measurement(tmp_path):
    """A database of three records (a schedule with a note no pass reads, then the same without it,
    measured half as long, and another schedule): two kernels, one repeat, half the repeated kernel's
    measurements slow, and a best twice as high had the kernel been measured once."""
    target = parse_target({"kind": "llvm", "num-cores": 2})
    setup(target)
    twin_database(DB, tmp_path, target)
    got = kernel_repeats.repeats(str(tmp_path), target, 10, fastest=5)
    assert (got["records"], got["kernels"], got["repeats"]) == (3, 2, 1)
    first, second = got["fastest"]  # two kernels, the fastest first, each with its measurements in order
    assert len(first) + len(second) == 3 and min(us for _, us in first) <= min(us for _, us in second)
    assert sorted(place for m in got["fastest"] for place, _ in m) == [0, 1, 2]
    (twice,) = [m for m in got["fastest"] if len(m) == 2]
    assert twice[0][0] < twice[1][0] and max(us for _, us in twice) == pytest.approx(2 * min(us for _, us in twice))
    assert got["spread_max"] == pytest.approx(2.0) and got["slow_share"] == 0.5
    assert got["first_best"] == pytest.approx(2.0)  # counted by first measurements only, the best is 2 ms


def test_a_negative_count_of_fastest_kernels_is_refused(capsys):
    with pytest.raises(SystemExit):
        kernel_repeats.main(["--databases", f"[{DB}]", "--fastest", "-1"])
    assert "--fastest -1: a count of kernels, >= 0" in capsys.readouterr().err
