"""pruner_lightning, the Python API: docs/api.md's examples run as written (real tune_tir and
tune_relax on this CPU, with a trained and exported PAM), and bad arguments fail clearly."""

import logging
import re
from pathlib import Path

import pytest

import pruner_lightning as pl
from bridge.export import ArtifactError

REPO = Path(__file__).resolve().parents[1]
API_DOC = REPO / "docs" / "api.md"


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    """A small PAM: `train.py fit` one epoch on synthetic shards, then `python -m bridge.export`."""
    import train
    from bridge import export
    from data.synthetic import write_synthetic_shards

    root = tmp_path_factory.mktemp("model")
    write_synthetic_shards(root / "shards", num_shards=1, num_tasks=4, records_per_task=32)
    # fmt: off
    train.main([
        "fit", "--config", "pam", "--data.shards", str(root / "shards"), "--data.batch_size", "64",
        "--model.init_args.net.stmt_hidden", "32", "--model.init_args.net.fuse_hidden", "32",
        "--model.init_args.net.gemm_embed", "16", "--model.init_args.net.heads", "2",
        "--trainer.max_epochs", "1", "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false", "--checkpoint.dirpath", str(root / "ckpt"),
        "--trainer.default_root_dir", str(root),
    ])
    # fmt: on
    out = root / "pam.pt"
    assert export.main([str(next((root / "ckpt").glob("best-*.ckpt"))), "--out", str(out)]) == 0
    return out


def _example(name: str, model: Path, work_dir: Path) -> str:
    """The code block of docs/api.md marked `<!-- tested: name -->`, with our model and work dir."""
    match = re.search(rf"<!-- tested: {name} -->\n```python\n(.*?)```", API_DOC.read_text(), re.S)
    assert match, f"docs/api.md has no example marked {name!r}"
    code = match.group(1)
    for pattern, value in (
        (r'^MODEL = "[^"]*"', f"MODEL = {str(model)!r}"),
        (r'^WORK_DIR = "[^"]*"', f"WORK_DIR = {str(work_dir)!r}"),
    ):
        code, n = re.subn(pattern, value, code, count=1, flags=re.M)
        assert n == 1, f"the {name} example must set {pattern}"
    return code


def _run(code: str) -> dict:
    """exec the example as a script. MetaSchedule's `get_loggers_from_work_dir` fails on a handler
    without a name on its logger, which pytest's log capture leaves there (tvm_env.task_loggers):
    those are set aside meanwhile, as a user's script has none."""
    root = logging.getLogger("tvm.s_tir.meta_schedule")
    unnamed = [h for h in root.handlers if h.get_name() is None]
    for handler in unnamed:
        root.removeHandler(handler)
    scope: dict = {"__name__": "__main__"}
    try:
        exec(compile(code, str(API_DOC), "exec"), scope)
    finally:
        for handler in unnamed:
            root.addHandler(handler)
    return scope


def _measured(database) -> list[float]:
    return [float(r.run_secs[0]) for r in database.get_all_tuning_records()]


def test_tune_tir_example_runs_as_documented(artifact, tmp_path):
    scope = _run(_example("tune_tir", artifact, tmp_path / "work"))
    latencies = _measured(scope["database"])
    assert len(latencies) == 8
    # every candidate built and ran: the stock builder's timeouts would be stored as 1e10 s
    assert max(latencies) < 1.0, latencies
    assert (tmp_path / "work" / "database_tuning_record.json").exists()


def test_tune_relax_example_runs_as_documented(artifact, tmp_path):
    scope = _run(_example("tune_relax", artifact, tmp_path / "work"))
    latencies = _measured(scope["database"])
    assert 1 <= len(latencies) <= 8 and max(latencies) < 1.0, latencies


def test_load_model_and_the_modes_it_fits(artifact):
    model = pl.load_model(artifact)
    assert model.net_class == "PAMNet" and not model.net.training
    assert pl.cost_model("pam-no-update", model).net is not None
    with pytest.raises(ValueError, match="needs a MLPNet artifact"):
        pl.cost_model("mlp-no-update", model)


def test_bad_arguments_name_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match="mode='nope'"):
        pl.cost_model("nope")
    with pytest.raises(ValueError, match="needs a pretrained artifact"):
        pl.cost_model("pam-siamese-update")
    with pytest.raises(ValueError, match="'nowhere' is not in the device table"):
        pl.draft_verify("nowhere")
    with pytest.raises(ValueError, match="potential_size=64 must be <= population_size=32"):
        pl.draft_verify("h100", population_size=32, potential_size=64)
    with pytest.raises(ArtifactError, match="missing.pt"):
        pl.load_model(tmp_path / "missing.pt")
    with pytest.raises(ValueError, match="CLI form"):
        pl.setup("llvm -mcpu=native")
