"""bridge.reread on llvm: a real short tuning run re-reads each task's best records once its search has
stopped, reports both finals, writes the re-read records to their own database, and puts that one
first for a compile; a run that tunes again re-reads afresh."""

import json
import math

import pytest

import tune
from bridge.reread import REREAD_DIR, ROUNDS, reread_best, reread_count, tuned_database
from data import zoo
from data.labels import mean_latency
from tvm_env import ms, parse_target

TARGET = '{"kind": "llvm", "mcpu": "native", "num-cores": 2}'
WORKLOAD = "matmul:64,64,64"
ARGS = ["--workload", WORKLOAD, "--target", TARGET, "--cost-model", "random", "--trials-per-round", "4"]
QUICK = ["--number", "2", "--min-repeat-ms", "5", "--population", "32"]


def _reread_records(work_dir) -> list:
    return ms.database.JSONDatabase(work_dir=str(work_dir / REREAD_DIR)).get_all_tuning_records()


def test_a_run_re_reads_its_best_records_and_a_compile_takes_the_re_read_best(tmp_path, capsys):
    result = tune.main([*ARGS, "--trials", "4", "--reread-top", "2", "--work-dir", str(tmp_path), *QUICK])
    (task,) = result.tasks
    reread = result.reread[task.name]
    # the run's best reading, and its two best records' medians over the rounds, re-read
    assert reread.reported_s == task.best_s and len(reread.candidates) == 2 and result.reread_s > 0
    readings = sorted(mean_latency(r.run_secs) for r in result.database.get_all_tuning_records())
    assert [a for a, _ in reread.candidates] == readings[:2]  # the two best, best first
    assert 1e-7 < reread.reread_s < 1e-2  # a 64x64x64 matmul on a CPU core, read again
    out = capsys.readouterr().out
    assert f"re-read with the device quiet: {task.name} {reread.reread_s * 1e6:.2f} us" in out
    assert f"2 of its best records, {ROUNDS} rounds each" in out and "estimated total latency, re-read" in out
    summary = json.loads((tmp_path / "summary.json").read_text())
    row = summary["reread"][task.name]
    assert row["reread_us"] == pytest.approx(reread.reread_s * 1e6) and row["ratio"] == pytest.approx(reread.ratio)
    assert summary["estimated_total_reread_ms"] == pytest.approx(reread.reread_s * 1e3)
    # the re-read records, each with its median as its one reading, in a database of their own
    records = _reread_records(tmp_path)
    assert sorted(mean_latency(r.run_secs) for r in records) == pytest.approx(sorted(b for _, b in reread.candidates))
    assert all(len(r.run_secs) == 1 for r in records)
    database = tuned_database(tmp_path)  # the compile's database: the re-read first
    assert isinstance(database, ms.database.OrderedUnionDatabase)
    best = database.query_tuning_record(zoo.operator_task(WORKLOAD).mod, parse_target(TARGET), "main")
    assert mean_latency(best.run_secs) == pytest.approx(reread.reread_s)
    # a record that reads implausibly (0 s, 1e-12 s: MetaSchedule's own top-k takes them first) is never re-read
    run_db = ms.database.JSONDatabase(work_dir=str(tmp_path))
    worst = max(run_db.get_all_tuning_records(), key=lambda r: mean_latency(r.run_secs))
    for secs in ([0.0], [1e-12]):
        run_db.commit_tuning_record(
            ms.database.TuningRecord(worst.trace, worst.workload, secs, target=worst.target, args_info=worst.args_info)
        )
    # tuning on re-reads afresh: the run's best may have changed, and the re-read follows it
    again = tune.main([*ARGS, "--trials", "10", "--reread-top", "3", "--work-dir", str(tmp_path), *QUICK])
    assert again.tasks[0].trials == 10 and again.reread[task.name].reported_s == again.tasks[0].best_s
    assert len(_reread_records(tmp_path)) == 3 == len(again.reread[task.name].candidates)
    assert all(math.isfinite(a) and a >= again.tasks[0].best_s for a, _ in again.reread[task.name].candidates)
    # none asked for: the last re-read goes, and the compile takes the run's own best again
    tune.main([*ARGS, "--trials", "10", "--reread-top", "0", "--work-dir", str(tmp_path), *QUICK])
    assert not (tmp_path / REREAD_DIR).exists()
    assert not isinstance(tuned_database(tmp_path), ms.database.OrderedUnionDatabase)


def test_unset_re_reads_on_a_gpu_only_and_zero_turns_it_off(tmp_path):
    assert reread_count(None, parse_target("nvidia/nvidia-h100")) == 3
    assert reread_count(None, parse_target(TARGET)) == 0 and reread_count(2, parse_target(TARGET)) == 2
    result = tune.main([*ARGS, "--trials", "4", "--work-dir", str(tmp_path), *QUICK])  # llvm: none by default
    assert result.reread == {} and not (tmp_path / REREAD_DIR).exists()
    assert json.loads((tmp_path / "summary.json").read_text())["estimated_total_reread_ms"] is None
    assert not isinstance(tuned_database(tmp_path), ms.database.OrderedUnionDatabase)  # the run's own database
    with pytest.raises(ValueError, match="top >= 1 and rounds >= 1, not 2 and 0"):
        reread_best(result.database, [], parse_target(TARGET), builder=None, runner=None, top=2, rounds=0)
    untuned = zoo.operator_task("matmul:32,32,32")  # a task without records is left out
    assert reread_best(result.database, [untuned], parse_target(TARGET), builder=None, runner=None, top=2) == {}


def test_a_partial_re_read_gives_no_total():
    """`reread_total` (summary.json's `estimated_total_reread_ms`) sums re-read finals only when every
    task has one: a sum of re-read and run's readings would mix two scales."""
    from bridge.report import reread_total, summary
    from bridge.reread import Reread
    from bridge.tuning import TaskResult, TuneResult

    tasks = [TaskResult("a", 2.0, 1e6, 4, 1e-5), TaskResult("b", 1.0, 1e6, 4, 3e-5)]
    both = TuneResult(tasks, [], 1.0, None, reread={"a": Reread(1e-5, 1.1e-5, []), "b": Reread(3e-5, 3e-5, [])})
    assert reread_total(both) == pytest.approx(2 * 1.1e-5 + 3e-5)
    one = TuneResult(tasks, [], 1.0, None, reread={"a": Reread(1e-5, 1.1e-5, [])})
    assert math.isinf(reread_total(one)) and summary(one)["estimated_total_reread_ms"] is None
    assert summary(one)["reread"]["a"]["ratio"] == pytest.approx(1.1)


def test_a_record_whose_trace_no_longer_applies_is_left_out_and_the_next_taken(tmp_path, caplog, builder, runner):
    """A record of the task whose trace names a block its module lacks (here a conv2d's, read the
    fastest) is said in the log and passed over; the task's next best records are re-read instead,
    and its final stays the best valid reading."""
    import logging

    from tvm_env import tvm

    result = tune.main([*ARGS, "--trials", "4", "--reread-top", "0", "--work-dir", str(tmp_path), *QUICK])
    database = ms.database.JSONDatabase(work_dir=str(tmp_path))
    (record, *_) = sorted(database.get_all_tuning_records(), key=lambda r: mean_latency(r.run_secs))
    conv = tvm.s_tir.Schedule(zoo.operator_task("conv2d:1,8,8,8,8,3,1,1").mod)
    conv.get_sblock("conv2d_nhwc")  # the trace: one instruction, for a block the matmul does not have
    fastest = mean_latency(record.run_secs) / 2
    database.commit_tuning_record(
        ms.database.TuningRecord(
            conv.trace, record.workload, [fastest], target=record.target, args_info=record.args_info
        )
    )
    task = zoo.operator_task(WORKLOAD)
    with caplog.at_level(logging.WARNING, logger="bridge.reread"):
        found = reread_best(database, [task], parse_target(TARGET), builder=builder, runner=runner, top=2)
    assert "a record's trace no longer applies, not re-read" in caplog.text
    reread = found[task.name]
    assert len(reread.candidates) == 2 and reread.reported_s == fastest  # the run's best reading, though not re-read
    assert [a for a, _ in reread.candidates] == sorted(
        mean_latency(r.run_secs) for r in result.database.get_all_tuning_records()
    )[:2]
