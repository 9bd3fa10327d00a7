"""The compiled network finds its tuned kernels: the compile's fused kernels are the extracted tasks."""

import pytest

from data import zoo
from data.zoo.sources import load_network

TARGET = {"kind": "llvm", "mcpu": "native", "num-cores": 2}


@pytest.fixture
def conv_bn_file(tmp_path):
    """A user's torch model with batch norm, whose inference form fuses into the convolution."""
    path = tmp_path / "conv_bn.py"
    path.write_text(
        "import torch\n\n"
        "def factory():\n"
        "    torch.manual_seed(0)\n"
        "    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),\n"
        "                              torch.nn.Conv2d(8, 8, 1), torch.nn.BatchNorm2d(8)).eval()\n"
        "    return net, (torch.randn(1, 3, 8, 8),)\n"
    )
    return f"{path}:factory"


def _database_of(tasks, target, work_dir):
    """A JSON database with one (unscheduled) record for every task, as a tuning run leaves it."""
    from tvm_env import ms, tvm

    database = ms.database.JSONDatabase(work_dir=str(work_dir), module_equality="structural")
    for task in tasks:
        workload = database.commit_workload(task.mod)
        schedule = tvm.s_tir.Schedule(task.mod)
        schedule.get_sblock("root")  # a record's trace needs an instruction: an empty one is never queried
        trace = schedule.trace
        args = ms.arg_info.ArgInfo.from_prim_func(task.mod["main"])
        database.commit_tuning_record(ms.database.TuningRecord(trace, workload, [1e-3], target, args))
    return database


def test_every_kernel_of_a_batch_norm_network_finds_its_task(conv_bn_file, tmp_path):
    from bridge.network_timing import tuned_kernels
    from tvm_env import parse_target, setup

    target = parse_target(TARGET)
    setup(target)
    tasks = zoo.extract_network_tasks(conv_bn_file, target)
    assert any("conv2d" in t.name for t in tasks), [t.name for t in tasks]
    database = _database_of(tasks, target, tmp_path)
    raw = load_network(conv_bn_file).mod
    # prepared as the tasks were extracted, every kernel the compile looks up has its record
    assert tuned_kernels(database, zoo.inference_module(raw, target), target) == (len(tasks), len(tasks))
    # compiled from the raw module, batch norm fuses otherwise and the convolutions miss their records
    found, kernels = tuned_kernels(database, raw, target)
    assert found < len(tasks) and kernels >= found


def test_an_empty_database_tunes_no_kernel(conv_bn_file):
    from bridge.network_timing import tuned_kernels
    from tvm_env import ms, parse_target, setup

    target = parse_target(TARGET)
    setup(target)
    mod = zoo.inference_module(load_network(conv_bn_file).mod, target)
    found, kernels = tuned_kernels(ms.database.MemoryDatabase(), mod, target)
    assert found == 0 and kernels == len(zoo.extract_network_tasks(conv_bn_file, target))


def test_tuned_dirs_are_timed_again_from_the_command_line(conv_bn_file, tmp_path):
    """`python -m bridge.network_timing DIRS NETWORK TARGET`: each dir compiled and timed, untuned, eager."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from tvm_env import parse_target, setup

    target = parse_target(TARGET)
    setup(target)
    tasks = zoo.extract_network_tasks(conv_bn_file, target)
    work = tmp_path / "tuned"
    work.mkdir()
    _database_of(tasks, target, work)
    out = tmp_path / "times.json"
    done = subprocess.run(
        [sys.executable, "-m", "bridge.network_timing", f"[{work}]", conv_bn_file, json.dumps(TARGET),
         "--number", "2", "--repeat", "2", "--json_out", str(out)],
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    times = json.loads(out.read_text())
    tuned = times["tuned"][str(work)]
    assert tuned["tuned_kernels"] == tuned["kernels"] == len(tasks) and tuned["ms"] > 0
    assert times["untuned_ms"] > 0 and times["torch_eager_ms"] > 0
    assert f"tuned schedules for {len(tasks)} of {len(tasks)} kernels" in done.stdout
