"""Fault injection on tuning (issue 11, items 0, 1, 5, 6, 9, 11): real tuning work dirs on this CPU.

A crafted cost-model state that would run code, a `kill -9` of tune.py mid-run, a torn and a garbage
line in the tuning database, a kernel that kills its process, an implausible latency, a CUDA target
on a machine without a GPU.
"""

import json
import math
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bridge.config import CostModelConfig, MeasureConfig, SearchConfig, TuneConfig
from bridge.search_log import read_rounds
from bridge.tuning import CURVE_CSV, records_by_task, tune_tasks
from data import zoo
from tvm_env import tvm_ffi

REPO = Path(__file__).resolve().parents[2]
TARGET = {"kind": "llvm", "mcpu": "native", "num-cores": 2}
WORKLOAD = "matmul:64,64,64"
QUICK = ["--number", "2", "--min-repeat-ms", "5", "--population", "32"]


def tune(out, builder, runner, trials, cost_model="random"):
    return tune_tasks(
        [zoo.operator_task(WORKLOAD)],
        TARGET,
        TuneConfig(out=str(out), trials=trials, trials_per_round=3),
        cost_model=CostModelConfig(name=cost_model),
        search=SearchConfig(population=32),
        measure=MeasureConfig(number=2, min_repeat_ms=5),
        builder=builder,
        runner=runner,
        progress=False,
    )


def distinct(database) -> int:
    return len(
        {int(tvm_ffi.structural_hash(r.as_measure_candidate().sch.mod)) for r in database.get_all_tuning_records()}
    )


class Planted:
    """Unpickling this creates the sentinel file: proof that loading ran code."""

    def __init__(self, sentinel: str):
        self.sentinel = sentinel

    def __reduce__(self):
        return (open, (self.sentinel, "w"))


@pytest.mark.parametrize("kind", ["npz-with-pickled-object", "plain-pickle"])
def test_a_cost_model_state_that_would_run_code_is_refused(tmp_path, builder, runner, kind):
    out = tmp_path / "work"
    out.mkdir()
    sentinel = tmp_path / "code-ran"
    state = out / "cost_model.xgb.bin"
    if kind == "plain-pickle":
        state.write_bytes(pickle.dumps(Planted(str(sentinel))))
    else:
        with open(state, "wb") as f:  # what TVM's np.load(allow_pickle=True) would unpickle
            np.savez(f, features=np.array([Planted(str(sentinel))], dtype=object))
    with pytest.raises(ValueError, match="cost_model.xgb.bin"):
        tune(out, builder, runner, 3, cost_model="xgb")
    assert not sentinel.exists()


def test_torn_and_garbage_database_lines_are_skipped_reported_and_kept(tmp_path, builder, runner):
    out = tmp_path / "work"
    first = tune(out, builder, runner, 3)
    assert distinct(first.database) == 3
    records = out / "database_tuning_record.json"
    lines = records.read_text().splitlines()
    records.write_text("\n".join([*lines, "this is not json", lines[-1][: len(lines[-1]) // 2]]) + "\n")
    resumed = tune(out, builder, runner, 6)
    assert [s.split(":")[1] for s in resumed.skipped_lines] == ["4", "5"]
    assert all(s.startswith(str(records)) for s in resumed.skipped_lines)
    assert (out / "database_tuning_record.json.corrupt-0").read_text().count("\n") == 5  # the original, kept
    assert distinct(resumed.database) == 6 and resumed.tasks[0].trials == 6


def test_the_line_by_line_check_runs_only_on_a_database_tvm_cannot_load(tmp_path, builder, runner, monkeypatch):
    """The check replays every record serially (5.6-6.3 s of a 1,448-record resume on 2 cores, against TVM's
    parallel load's 3.6-4.1 s), so a sound database opens with TVM's load alone."""
    import bridge.database

    out = tmp_path / "work"
    tune(out, builder, runner, 3)
    checked = []
    real = bridge.database.check
    monkeypatch.setattr(bridge.database, "check", lambda *paths: checked.append(paths) or real(*paths))
    database, skipped = bridge.database.open_database(out)
    assert distinct(database) == 3 and skipped == [] and checked == []
    records = out / "database_tuning_record.json"
    records.write_text(records.read_text() + "torn\n")
    database, skipped = bridge.database.open_database(out)
    assert distinct(database) == 3 and len(checked) == 1 and skipped[0].startswith(f"{records}:4: ")


def test_an_empty_line_is_skipped_before_tvm_could_load_it(tmp_path, builder, runner):
    """TVM 0.27's load keeps an empty or blank line and dereferences its null: the process dies of a
    segfault (with a record that fails after it too). `open_database` scans for such lines first, so
    they are skipped and named like any bad line, and the resume goes on."""
    from bridge.database import open_database

    out = tmp_path / "work"
    tune(out, builder, runner, 3)
    records = out / "database_tuning_record.json"
    lines = records.read_text().splitlines()
    bad_index = "[5," + lines[0].split(",", 1)[1]  # a record naming a workload that is not there
    records.write_text("\n".join([lines[0], "", lines[1], "   ", lines[2], bad_index]) + "\n")
    database, skipped = open_database(out)
    assert distinct(database) == 3
    assert [s.split(":")[1] for s in skipped] == ["2", "4", "6"]
    assert skipped[0].endswith(":2: empty line") and "workload index 5" in skipped[2]


def kill_9_after(cmd: list[str], out: Path, rows: int) -> Path:
    """Run tune.py `cmd` writing into `out`, and kill -9 it once its curve has `rows` rows; the curve's path."""
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    curve, deadline = out / CURVE_CSV, time.time() + 300
    while time.time() < deadline and not (curve.exists() and curve.read_text().count("\n") >= rows + 1):
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    return curve


def test_kill_9_mid_tune_keeps_the_curve_and_the_cost_model_then_resumes(tmp_path):
    out = tmp_path / "work"
    cmd = [sys.executable, "tune.py", "--workload", WORKLOAD, "--target", json.dumps(TARGET), "--cost-model", "xgb",
           "--trials", "6", "--trials-per-round", "3", "--work-dir", str(out), "--no-progress", *QUICK]  # fmt: skip
    curve = kill_9_after(cmd, out, rows=1)
    rows = read_rounds(curve)  # written atomically after the batch: whole
    assert rows and rows[0]["trials"] == 3
    from bridge.xgb import SafeXGBModel

    SafeXGBModel(num_warmup_samples=0).load(str(out / "cost_model.xgb.bin"))  # a whole, loadable state
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["total_trials"] == 6
    from bridge.database import open_database

    database, skipped = open_database(out)
    assert distinct(database) == 6 and not skipped
    assert len(read_rounds(curve)) == 2  # the curve continued where the killed run left it
    resumed = SafeXGBModel(num_warmup_samples=0)
    resumed.load(str(out / "cost_model.xgb.bin"))
    # every measured record in the model once: what the killed state held, caught up (`bridge.catch_up`), and the rest
    assert resumed.data_size == 6 and sum(len(keys) for keys in resumed.seen.values()) == 6


def test_kill_9_while_pam_trains_in_the_background_leaves_a_whole_state_then_resumes(tmp_path):
    """Pruner's path: PAM trains on each batch, and writes its state, on a thread of its own while the
    loop goes on. A kill -9 leaves a state that is whole (or none yet), never with records the
    database lacks; the resumed run catches the model up on what the state missed (`bridge.catch_up`),
    completes, and its state holds every record of the database once."""
    from bridge.cost_model import PrunerCostModel
    from bridge.database import open_database

    out = tmp_path / "work"
    cmd = [sys.executable, "tune.py", "--workload", WORKLOAD, "--target", json.dumps(TARGET), "--cost-model", "pam",
           "--psa", "a100", "--epochs", "3", "--potential", "16", "--fill-device", "0", "--trials", "12",
           "--trials-per-round", "3", "--work-dir", str(out), "--no-progress", *QUICK]  # fmt: skip
    kill_9_after(cmd, out, rows=2)
    database, _ = open_database(out)
    measured = distinct(database)
    state = out / "cost_model.pam.bin"
    if state.exists():  # written atomically on the training thread: whole, and behind the database at most
        killed = PrunerCostModel(mode="pam", device="cpu")
        killed.load(str(state))
        assert 0 < killed.measured() <= measured
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    database, skipped = open_database(out)
    assert distinct(database) == 12 and not skipped
    resumed = PrunerCostModel(mode="pam", device="cpu")
    resumed.load(str(state))  # the run's last save waits for the training: every batch of the run in it
    assert resumed.measured() == 12 and resumed.trained  # what the killed state missed, caught up: each once


def test_a_resume_without_a_saved_state_learns_every_record_of_the_database(tmp_path, builder, runner):
    """A kill -9 before the first state write leaves measured records and no state: the resumed
    cost model learns those records too, not only the ones it measures itself."""
    from bridge.cost_model import PrunerCostModel
    from bridge.database import open_database

    out = tmp_path / "work"
    tune(out, builder, runner, 3, cost_model="pam")
    (out / "cost_model.pam.bin").unlink()  # as a kill before the training thread's first save leaves it
    tune(out, builder, runner, 6, cost_model="pam")
    database, _ = open_database(out)
    resumed = PrunerCostModel(mode="pam", device="cpu")
    resumed.load(str(out / "cost_model.pam.bin"))
    assert distinct(database) == 6 and resumed.measured() == 6  # the first run's 3 and its own 3, each once


def _crash() -> float:
    os.kill(os.getpid(), signal.SIGILL)  # what a kernel built for another CPU does
    return 0.0


def test_a_crashing_kernel_fails_its_timing_not_the_caller():
    from bridge.network_timing import _in_child

    with pytest.raises(RuntimeError, match="failed in its child process"):
        _in_child(_crash, (), "timing a kernel built for another CPU", timeout=60)
    assert os.getpid() > 0  # still here


def test_an_implausible_latency_never_becomes_the_best(tmp_path, builder, runner):
    out = tmp_path / "work"
    result = tune(out, builder, runner, 3)
    real = result.tasks[0].best_s
    records = out / "database_tuning_record.json"
    line = json.loads(records.read_text().splitlines()[0])
    line[1][1] = [1e-45]  # a timer never measures this
    with open(records, "a") as f:
        f.write(json.dumps(line) + "\n")
    from bridge.database import open_database

    database, _ = open_database(out)
    (count, best) = records_by_task(database, [zoo.operator_task(WORKLOAD)])[zoo.operator_task(WORKLOAD).name]
    assert count == 4 and best == pytest.approx(real) and math.isfinite(best)


def test_a_cuda_target_without_a_gpu_fails_fast(tmp_path):
    from tvm_env import tvm

    if tvm.cuda(0).exist:
        pytest.skip("this machine has a GPU")
    done = subprocess.run(
        [sys.executable, "tune.py", "--workload", WORKLOAD, "--target", "nvidia/nvidia-h100", "--trials", "3",
         "--work-dir", str(tmp_path / "w"), "--cost-model", "random"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2 and "error:" in done.stderr and "no cuda device" in done.stderr, done.stderr[-1500:]
