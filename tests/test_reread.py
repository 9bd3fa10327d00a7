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
    assert reread.reported_s == task.best_s and len(reread.candidates) == 2
    assert reread.candidates[0][0] == task.best_s and reread.candidates[0][0] <= reread.candidates[1][0]
    assert reread.reread_s == min(b for _, b in reread.candidates) and 0 < reread.reread_s < 1
    out = capsys.readouterr().out
    assert f"re-read with the device quiet: {task.name} {reread.reread_s * 1e6:.2f} us" in out
    assert f"its best 2 records, {ROUNDS} rounds each" in out and "estimated total latency, re-read" in out
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
    # tuning on re-reads afresh: the run's best may have changed, and the re-read follows it
    again = tune.main([*ARGS, "--trials", "8", "--reread-top", "3", "--work-dir", str(tmp_path), *QUICK])
    assert again.tasks[0].trials == 8 and again.reread[task.name].reported_s == again.tasks[0].best_s
    assert len(_reread_records(tmp_path)) == 3 == len(again.reread[task.name].candidates)


def test_unset_re_reads_on_a_gpu_only_and_zero_turns_it_off(tmp_path):
    assert reread_count(None, parse_target("nvidia/nvidia-h100")) == 3
    assert reread_count(None, parse_target(TARGET)) == 0 and reread_count(2, parse_target(TARGET)) == 2
    result = tune.main([*ARGS, "--trials", "4", "--work-dir", str(tmp_path), *QUICK])  # llvm: none by default
    assert result.reread == {} and not (tmp_path / REREAD_DIR).exists()
    assert json.loads((tmp_path / "summary.json").read_text())["estimated_total_reread_ms"] is None
    assert not isinstance(tuned_database(tmp_path), ms.database.OrderedUnionDatabase)  # the run's own database
    with pytest.raises(ValueError, match="top >= 1 and rounds >= 1, not 2 and 0"):
        reread_best(result.database, [], parse_target(TARGET), builder=None, runner=None, top=2, rounds=0)
    assert math.isfinite(result.tasks[0].best_s)
