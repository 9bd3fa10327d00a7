"""Artifacts: exported from real train.py checkpoints, loaded back with identical scores, clear errors."""

import subprocess
import sys
import textwrap

import pytest
import torch

from bridge.export import (
    ArtifactError,
    export_checkpoint,
    load_artifact,
    load_model,
    main,
)
from data.batch import make_batch
from data.schema import MODEL_SCHEMA_VERSION
from data.shards import read_shards
from pruner_models.module import load_net

NET = {"PAMModule": "PAMNet", "MLPModule": "MLPNet", "MoAModule": "MoANet"}


@pytest.fixture(scope="module")
def batch(shards):
    """A batch of 40 real shard records (statement rows + tags + GEMM matrices)."""
    data = read_shards(str(shards))
    idx = range(40)
    stmt = [data.stmt[data.stmt_ptr[i] : data.stmt_ptr[i + 1]] for i in idx]
    tags = data.task_tags[data.record_task[list(idx)]]
    return make_batch(stmt, tags, data.gemm[list(idx)])


@pytest.mark.parametrize("module", list(NET))
def test_artifact_scores_like_the_checkpoint(checkpoints, batch, tmp_path, module):
    artifact = export_checkpoint(checkpoints[module], tmp_path / "model.pt", device="cuda-sm_90a")
    loaded = load_artifact(tmp_path / "model.pt")
    assert loaded.net_class == artifact.net_class == NET[module]
    assert loaded.source_device == "cuda-sm_90a" and loaded.schema_version == MODEL_SCHEMA_VERSION
    reference = load_net(str(checkpoints[module]))
    with torch.no_grad():
        expected = reference(batch)
        assert torch.equal(loaded.net(batch), expected)
        assert torch.equal(load_model(checkpoints[module]).net(batch), expected)  # a .ckpt works directly too
    scale = "online.stmt_scale" if module == "MoAModule" else "stmt_scale"
    assert torch.equal(loaded.net.state_dict()[scale], reference.state_dict()[scale])


def test_source_device_and_schema_come_from_the_checkpoint(checkpoints, tmp_path):
    ckpt = torch.load(checkpoints["MLPModule"], weights_only=True)
    assert ckpt["schema_version"] == MODEL_SCHEMA_VERSION and ckpt["source_device"]
    artifact = export_checkpoint(checkpoints["MLPModule"], tmp_path / "mlp.pt")
    assert artifact.source_device == ckpt["source_device"] and artifact.schema_version == MODEL_SCHEMA_VERSION


def test_artifact_loads_without_lightning(checkpoints, tmp_path):
    """A tuning machine needs torch and our nn.Modules only: block Lightning and load."""
    export_checkpoint(checkpoints["PAMModule"], tmp_path / "pam.pt")
    code = textwrap.dedent(
        f"""
        import importlib.abc, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name.split(".")[0] in ("lightning", "pytorch_lightning"):
                    raise ImportError("blocked " + name)
        sys.meta_path.insert(0, Block())
        from bridge.export import load_artifact
        print(type(load_artifact({str(tmp_path / "pam.pt")!r}).net).__name__)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "PAMNet"


def test_missing_and_corrupt_files_name_the_file(checkpoints, tmp_path):
    with pytest.raises(ArtifactError, match="nowhere.pt.*does not exist"):
        load_artifact(tmp_path / "nowhere.pt")
    with pytest.raises(ArtifactError, match="nowhere.ckpt.*does not exist"):
        export_checkpoint(tmp_path / "nowhere.ckpt", tmp_path / "out.pt")
    corrupt = tmp_path / "corrupt.pt"
    export_checkpoint(checkpoints["MLPModule"], corrupt)
    corrupt.write_bytes(corrupt.read_bytes()[: corrupt.stat().st_size // 2])
    with pytest.raises(ArtifactError, match=f"{corrupt}: cannot read artifact"):
        load_artifact(corrupt)
    with pytest.raises(ArtifactError, match="export it with python -m bridge.export"):
        load_artifact(checkpoints["PAMModule"])
    torch.save({"something": 1}, tmp_path / "other.ckpt")
    with pytest.raises(ArtifactError, match="other.ckpt: not a train.py checkpoint"):
        export_checkpoint(tmp_path / "other.ckpt", tmp_path / "out.pt")
    assert not (tmp_path / "out.pt").exists()


def test_schema_mismatch_is_refused(checkpoints, tmp_path):
    path = tmp_path / "pam.pt"
    export_checkpoint(checkpoints["PAMModule"], path)
    data = torch.load(path, weights_only=True)
    data["schema_version"] = MODEL_SCHEMA_VERSION + 1
    torch.save(data, path)
    with pytest.raises(ArtifactError, match=f"{path}: feature schema version {MODEL_SCHEMA_VERSION + 1}"):
        load_artifact(path)
    ckpt = torch.load(checkpoints["PAMModule"], weights_only=True)
    ckpt["schema_version"] = MODEL_SCHEMA_VERSION + 1
    torch.save(ckpt, tmp_path / "old.ckpt")
    with pytest.raises(ArtifactError, match=f"old.ckpt: trained on feature schema {MODEL_SCHEMA_VERSION + 1}"):
        export_checkpoint(tmp_path / "old.ckpt", tmp_path / "x.pt")


def test_weights_that_do_not_fit_are_refused(checkpoints, tmp_path):
    path = tmp_path / "pam.pt"
    export_checkpoint(checkpoints["PAMModule"], path)
    data = torch.load(path, weights_only=True)
    data["config"]["stmt_hidden"] = 32
    torch.save(data, path)
    with pytest.raises(ArtifactError, match="do not fit PAMNet"):
        load_artifact(path)


def test_cli(checkpoints, tmp_path, capsys):
    assert main([str(checkpoints["MLPModule"]), "--out", str(tmp_path / "mlp.pt"), "--device", "llvm-x"]) == 0
    assert "MLPNet" in capsys.readouterr().out
    assert load_artifact(tmp_path / "mlp.pt").source_device == "llvm-x"
    assert main([str(tmp_path / "missing.ckpt"), "--out", str(tmp_path / "y.pt")]) == 2
    assert "missing.ckpt" in capsys.readouterr().err


def test_shipped_models_load_and_are_picked_by_device():
    from bridge.config import CostModelConfig
    from bridge.factory import make_cost_model
    from bridge.pretrained import available, find_pretrained
    from tvm_env import parse_target

    assert {"pam-cuda-sm_90a", "mlp-cuda-sm_90a"} <= set(available())
    h100 = parse_target("nvidia/nvidia-h100")
    assert find_pretrained("pam-siamese-update", h100).name == "pam-cuda-sm_90a.pt"
    assert find_pretrained("mlp-no-update", h100).name == "mlp-cuda-sm_90a.pt"
    model = make_cost_model(CostModelConfig(name="pam-no-update"), target=h100)
    assert model.trained and model.source.endswith("pam-cuda-sm_90a.pt")
    with pytest.raises(ValueError, match="none ships for llvm"):
        find_pretrained("pam-no-update", parse_target({"kind": "llvm", "mcpu": "native", "num-cores": 2}))


def test_half_export_halves_the_weights_and_scores_alike(checkpoints, tmp_path):
    import torch

    ckpt = checkpoints["PAMModule"]
    full = export_checkpoint(ckpt, tmp_path / "full.pt")
    half = export_checkpoint(ckpt, tmp_path / "half.pt", half=True)
    assert (tmp_path / "half.pt").stat().st_size < 0.6 * (tmp_path / "full.pt").stat().st_size
    stored = torch.load(tmp_path / "half.pt", weights_only=True)["state_dict"]
    assert any(v.dtype == torch.float16 for v in stored.values())
    for (name, a), b in zip(full.net.state_dict().items(), half.net.state_dict().values()):
        assert a.dtype == b.dtype, name  # loaded back as float32
        torch.testing.assert_close(a.float(), b.float(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("flag", [["--half"], ["--half", "true"]], ids=["bare", "valued"])
def test_the_cli_half_flag_stores_float16_with_or_without_a_value(checkpoints, tmp_path, flag):
    out = tmp_path / "half.pt"
    assert main([str(checkpoints["MLPModule"]), "--out", str(out), "--device", "llvm-x", *flag]) == 0
    stored = torch.load(out, weights_only=True)["state_dict"]
    assert any(v.dtype == torch.float16 for v in stored.values())


def test_non_finite_weights_are_refused_at_export_and_at_load(checkpoints, tmp_path):
    ckpt = torch.load(checkpoints["PAMModule"], weights_only=False)
    name = next(k for k, v in ckpt["state_dict"].items() if k.startswith("net.") and v.is_floating_point())
    ckpt["state_dict"][name] = torch.full_like(ckpt["state_dict"][name], float("nan"))
    poisoned = tmp_path / "nan.ckpt"
    torch.save(ckpt, poisoned)
    with pytest.raises(ArtifactError, match=name[len("net.") :].replace(".", r"\.")):
        export_checkpoint(poisoned, tmp_path / "nan.pt")
    assert not (tmp_path / "nan.pt").exists()
    good = tmp_path / "good.pt"
    export_checkpoint(checkpoints["PAMModule"], good)
    artifact = torch.load(good, weights_only=True)
    key = next(k for k, v in artifact["state_dict"].items() if v.is_floating_point() and v.numel() > 1)
    artifact["state_dict"][key][0] = float("inf")
    torch.save(artifact, tmp_path / "inf.pt")
    with pytest.raises(ArtifactError, match=r"inf\.pt"):
        load_artifact(tmp_path / "inf.pt")


def test_export_never_writes_over_its_checkpoint(checkpoints, tmp_path, capsys):
    import shutil

    ckpt = tmp_path / "model.ckpt"
    shutil.copy(checkpoints["PAMModule"], ckpt)
    before = ckpt.read_bytes()
    assert main([str(ckpt), "--out", str(ckpt)]) == 2
    assert "is the input checkpoint" in capsys.readouterr().err and ckpt.read_bytes() == before


def test_an_artifact_of_another_device_kind_draws_a_warning(checkpoints, tmp_path):
    from bridge.config import CostModelConfig
    from bridge.factory import make_cost_model
    from tvm_env import parse_target

    export_checkpoint(checkpoints["PAMModule"], tmp_path / "cuda.pt", device="cuda-sm_90a")
    llvm = parse_target({"kind": "llvm", "mcpu": "native", "num-cores": 2})
    with pytest.warns(UserWarning, match="trained on 'cuda-sm_90a' measurements scores llvm"):
        make_cost_model(CostModelConfig(name="pam-no-update", checkpoint=str(tmp_path / "cuda.pt")), target=llvm)
