"""The compiled network finds its tuned kernels: the compile's fused kernels are the extracted tasks."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from data import zoo
from data.zoo.sources import load_network

TARGET = {"kind": "llvm", "mcpu": "native", "num-cores": 2}


@pytest.fixture
def target():
    from tvm_env import parse_target, setup

    parsed = parse_target(TARGET)
    setup(parsed)
    return parsed


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
    """A JSON database in `work_dir` with one (unscheduled) record for every task, as a tuning run leaves it."""
    from tvm_env import ms, tvm

    Path(work_dir).mkdir(parents=True, exist_ok=True)
    database = ms.database.JSONDatabase(work_dir=str(work_dir), module_equality="structural")
    for task in tasks:
        workload = database.commit_workload(task.mod)
        schedule = tvm.s_tir.Schedule(task.mod)
        schedule.get_sblock("root")  # a record's trace needs an instruction: an empty one is never queried
        args = ms.arg_info.ArgInfo.from_prim_func(task.mod["main"])
        database.commit_tuning_record(ms.database.TuningRecord(schedule.trace, workload, [1e-3], target, args))
    return database


def test_every_kernel_of_a_batch_norm_network_finds_its_task(conv_bn_file, target, tmp_path):
    from bridge.network_timing import tuned_kernels

    tasks = zoo.extract_network_tasks(conv_bn_file, target)
    assert tasks and all("conv2d" in t.name for t in tasks), [t.name for t in tasks]
    database = _database_of(tasks, target, tmp_path)
    raw = load_network(conv_bn_file).mod
    # prepared as the tasks were extracted, every kernel the compile looks up has its record
    assert tuned_kernels(database, zoo.inference_module(raw, target), target) == (len(tasks), len(tasks))
    # compiled from the raw module, batch norm fuses otherwise and no convolution finds its record
    found, kernels = tuned_kernels(database, raw, target)
    assert found == 0 and kernels > 0


def test_an_empty_database_tunes_no_kernel(conv_bn_file, target):
    from bridge.network_timing import tuned_kernels
    from tvm_env import ms

    mod = zoo.inference_module(load_network(conv_bn_file).mod, target)
    found, kernels = tuned_kernels(ms.database.MemoryDatabase(), mod, target)
    assert found == 0 and kernels == len(zoo.extract_network_tasks(conv_bn_file, target))


def test_a_work_dir_with_a_reread_is_compiled_and_its_kernels_counted(conv_bn_file, target, tmp_path):
    """After a re-read the compile's database is an OrderedUnionDatabase (no has_workload of its own)."""
    from bridge.network_timing import measure_network
    from bridge.reread import REREAD_DIR, tuned_database
    from tvm_env import ms

    tasks = zoo.extract_network_tasks(conv_bn_file, target)
    _database_of(tasks, target, tmp_path)
    _database_of(tasks[:1], target, tmp_path / REREAD_DIR)
    assert isinstance(tuned_database(tmp_path), ms.database.OrderedUnionDatabase)
    timed = measure_network(tmp_path, conv_bn_file, None, TARGET, number=2, repeat=2)
    assert timed.seconds > 0 and timed.tuned_kernels == timed.kernels == len(tasks)
    untuned = measure_network(None, conv_bn_file, None, TARGET, number=2, repeat=2)
    assert untuned.seconds > 0 and (untuned.tuned_kernels, untuned.kernels) == (0, 0)  # not fused to count


def test_tuned_dirs_are_timed_again_from_the_command_line(conv_bn_file, target, tmp_path):
    """`python -m bridge.network_timing DIRS NETWORK TARGET`: each dir compiled and timed, untuned, eager."""
    tasks = zoo.extract_network_tasks(conv_bn_file, target)
    work = tmp_path / "tuned"
    _database_of(tasks, target, work)
    missing = tmp_path / "never_tuned"  # no database: its timing fails, said, and the others go on
    out = tmp_path / "times.json"
    done = subprocess.run(
        [sys.executable, "-m", "bridge.network_timing", f"[{work}, {missing}]", conv_bn_file, json.dumps(TARGET),
         "--number", "2", "--repeat", "2", "--json_out", str(out)],
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 1 and f"the timing of {missing} failed" in done.stderr, done.stderr[-2000:]
    times = json.loads(out.read_text())  # written all the same, the failed dir null
    tuned = times["tuned"][str(work)]
    assert tuned["tuned_kernels"] == tuned["kernels"] == len(tasks) and tuned["ms"] > 0
    assert times["tuned"][str(missing)] is None and f"{missing}: no tuning database" in done.stdout
    assert not missing.exists()  # nothing written there
    assert times["untuned_ms"] > 0 and times["torch_eager_ms"] > 0
    assert f"tuned schedules for {len(tasks)} of its {len(tasks)} kernels" in done.stdout


def test_torch_eager_times_the_zoo_without_a_device_mode_and_a_users_cpu_tensors_with_one(tmp_path):
    """A transformer's forward makes its positions with `torch.arange`, which failed BERT-base's eager
    timing on the GPU machine (index on cpu, weights on cuda:0). The zoo's make them on the input's
    device, so they are timed without torch's device mode (whose Python costs a launch-bound model a
    third more a call); a user's forward that makes a CPU tensor still times, under the mode. Timed in
    process on the meta device, every embedding's input must be on it."""
    import torch

    from bridge.network_timing import _time_eager

    seen = []

    def record(module, args):
        if isinstance(module, (torch.nn.Embedding, torch.nn.Linear)):
            seen.append((type(module).__name__, args[0].device.type, torch._C._len_torch_function_stack()))

    user = tmp_path / "own_positions.py"
    user.write_text(
        "import torch\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = torch.nn.Linear(4, 4)\n"
        "    def forward(self, x):\n"
        "        return self.fc(x + torch.arange(4.0))  # on the CPU: no device=\n"
        "def make():\n"
        "    return Net(), torch.zeros(1, 4)\n"
    )
    hook = torch.nn.modules.module.register_module_forward_pre_hook(record)
    try:
        assert _time_eager("bert_tiny", 16, "meta", 1, 1, 1, warmup_s=0.0) >= 0
        zoo, seen[:] = list(seen), []
        assert _time_eager(f"{user}:make", None, "meta", 1, 2, 3, warmup_s=0.0) >= 0
    finally:
        hook.remove()
    assert {kind for kind, _, _ in zoo} == {"Embedding", "Linear"}
    assert {(device, modes) for _, device, modes in zoo} == {("meta", 0)}, zoo  # no device mode
    # the first call fails at the add (the Linear's pre-hook never sees it), then warm-up and 3 x 2 calls, all
    # under the mode
    assert seen == [("Linear", "meta", 1)] * (2 + 3 * 2), seen
    start = time.perf_counter()
    _time_eager("bert_tiny", 16, "meta", 1, 1, 1, warmup_s=0.5)  # warms up for half a second at least
    assert time.perf_counter() - start >= 0.5
