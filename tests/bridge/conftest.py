"""Shared fixtures of the bridge tests: real train.py checkpoints and really measured llvm records."""

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MODULES = ("PAMModule", "MLPModule", "MoAModule")


@pytest.fixture(scope="session")
def shards(tmp_path_factory):
    """A small synthetic shard folder (learnable labels; the shapes of real features)."""
    from data.synthetic import write_synthetic_shards

    root = tmp_path_factory.mktemp("shards")
    write_synthetic_shards(root, num_shards=1, num_tasks=4, records_per_task=32)
    return root


@pytest.fixture(scope="session")
def checkpoints(shards, tmp_path_factory):
    """module name -> the best-epoch checkpoint of one epoch of train.py fit (PAM, TenSet MLP, MoA)."""
    import train

    out = {}
    for name in MODULES:
        directory = tmp_path_factory.mktemp(name)
        # fmt: off
        train.main([
            "fit", "--model", f"pruner_models.module.{name}", "--data.shards", str(shards), "--data.batch_size", "64",
            "--trainer.max_epochs", "1", "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
            "--trainer.enable_model_summary", "false", "--checkpoint.dirpath", str(directory), "--seed_everything", "0",
            "--trainer.default_root_dir", str(directory),
        ])
        # fmt: on
        out[name] = next(directory.glob("best-*.ckpt"))
    return out


@pytest.fixture(scope="session")
def measured_matmul(tmp_path_factory):
    """(context, candidates, results) of the really measured 64^3 matmul records of the tiny fixture."""
    from tvm_env import ms, parse_target, setup

    work = tmp_path_factory.mktemp("records") / "matmul"
    shutil.copytree(next((FIXTURES / "tiny_records" / "llvm-sapphirerapids-2c").glob("matmul_*")), work)
    records = ms.database.JSONDatabase(work_dir=str(work)).get_all_tuning_records()
    target = parse_target(records[0].target.export())
    setup(target)
    context = ms.TuneContext(mod=records[0].workload.mod, target=target, num_threads=1, task_name="matmul")
    candidates = [r.as_measure_candidate() for r in records]
    results = [ms.runner.RunnerResult(r.run_secs, None) for r in records]
    return context, candidates, results


def database_of(context, candidates, results):
    """A MemoryDatabase holding `candidates` measured as `results` for `context`'s task."""
    from tvm_env import ms

    database = ms.database.MemoryDatabase()
    workload = database.commit_workload(context.mod)
    for cand, res in zip(candidates, results):
        database.commit_tuning_record(
            ms.database.TuningRecord(cand.sch.trace, workload, res.run_secs, context.target, cand.args_info)
        )
    return database


@pytest.fixture
def measured_database(measured_matmul):
    """A fresh MemoryDatabase holding the measured matmul records of `measured_matmul`."""
    return database_of(*measured_matmul)
