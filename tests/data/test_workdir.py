"""A user's own MetaSchedule work dir (issue 9, item 6): a real `ms.tune_tir` run of a 32^3 matmul on
llvm, featurized with its task name and network kept, so the hold-out-by-network split works on it."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from data.datamodule import ShardDataModule
from data.featurize import main as featurize
from data.record_tree import index_tasks, read_index
from data.shards import read_shards
from data.zoo import operator_task
from tvm_env import PooledLocalBuilder, ms, parse_target, setup, target_device_name

TARGET = '{"kind": "llvm", "mcpu": "native", "num-cores": 2}'
FIXTURE = Path(__file__).parents[1] / "fixtures" / "tiny_records"
TRIALS = 8


@pytest.fixture(scope="module")
def work_dir(tmp_path_factory):
    """What a user's tuning script leaves: database_workload.json + database_tuning_record.json (+ logs)."""
    import logging

    # Earlier tests' tuning runs leave pytest's (unnamed) log-capture handlers on MetaSchedule's
    # logger, and the stock tune_tir below fails on a handler without a name (tvm_env.task_loggers
    # works around it for our own runs). A user's process has none: remove them, as it would be.
    logger = logging.getLogger("tvm.s_tir.meta_schedule")
    for handler in [h for h in logger.handlers if h.get_name() is None]:
        logger.removeHandler(handler)
    target = parse_target(TARGET)
    setup(target)
    path = tmp_path_factory.mktemp("tune") / "my_run"
    builder = PooledLocalBuilder(max_workers=1)  # one build process: 8 tiny builds
    try:
        ms.tune_tir(
            operator_task("matmul:32,32,32").mod,
            target,
            str(path),
            max_trials_global=TRIALS,
            num_trials_per_iter=TRIALS,
            builder=builder,
            runner=ms.runner.LocalRunner(
                evaluator_config=ms.runner.EvaluatorConfig(number=1, repeat=2, min_repeat_ms=1)
            ),
            strategy=ms.search_strategy.EvolutionarySearch(population_size=64),
            cost_model="random",
        )
    finally:
        builder.shutdown()
    return path


@pytest.fixture
def copy(work_dir, tmp_path):
    out = tmp_path / "my_run"
    shutil.copytree(work_dir, out)
    return out


def test_bare_work_dir_with_network_name_supports_hold_out(copy, tmp_path):
    records = len((copy / "database_tuning_record.json").read_text().splitlines())
    assert records >= TRIALS // 2
    out = tmp_path / "shards"
    summary = featurize([FIXTURE, copy, "--out", out, "--network", "my_net"])
    assert summary.skipped() == 0
    data = read_shards(out)
    device = target_device_name(parse_target(TARGET))
    mine = [i for i, key in enumerate(data.task_key.tolist()) if key.startswith(f"{device}/my_run_")]
    assert len(mine) == 1 and data.task_networks[mine[0]] == "my_net"
    assert json.loads(data.task_network_weights[mine[0]]) == {"my_net": 1.0}
    assert (data.record_task == mine[0]).sum() == records
    assert set(data.task_networks.tolist()) == {"", "my_net"}  # the tree's operators stay without a network

    dm = ShardDataModule(str(out), split="hold-out", test_networks=["my_net"], val_fraction=0.0)
    dm.setup("fit")
    assert set(dm.record_task[dm.splits["test"]].tolist()) == {mine[0]}
    assert mine[0] not in set(dm.record_task[dm.splits["train"]].tolist())


def test_index_beside_the_database_keeps_task_name_and_networks(copy, tmp_path):
    spec = operator_task("matmul:32,32,32")
    index = index_tasks(copy, [("dense_in_my_model", spec.mod, 3)], TARGET, network="my_model")
    ((folder, meta),) = index["tasks"].items()
    wl_hash = json.loads((copy / "database_workload.json").read_text().splitlines()[0])[0]
    assert meta["workload_hash"] == wl_hash, "one identity: the database's own structural hash"
    assert read_index(copy) == index and index["networks"] == {"my_model": [[folder, 3]]}

    out = tmp_path / "shards"
    featurize([copy, "--out", out])
    data = read_shards(out)
    device = target_device_name(parse_target(TARGET))
    assert data.task_key.tolist() == [f"{device}/{folder}"] and folder.startswith("dense_in_my_model_")
    assert data.task_name.tolist() == ["dense_in_my_model"] and data.task_networks.tolist() == ["my_model"]
    np.testing.assert_array_equal(data.task_weight, [3.0])
    assert data.task_flops[0] == 2 * 32**3
