"""LightningModules with real Trainers on CPU and real HDF5 shards: checkpoints, learning, finetune, MoA."""

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from data.datamodule import ShardDataModule
from data.schema import MODEL_SCHEMA_VERSION
from data.shards import read_shards, write_shard
from data.synthetic import write_synthetic_shards
from pruner_models.losses import lambda_rank_loss
from pruner_models.mlp import MLPConfig
from pruner_models.module import MLPModule, MoAModule, PAMModule, load_net
from pruner_models.pam import PAMConfig

TINY_PAM = PAMConfig(stmt_hidden=32, gemm_hidden=16, gemm_embed=16, heads=2, fuse_hidden=32)
TINY_MLP = MLPConfig(hidden=32)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    path = tmp_path_factory.mktemp("shards")
    write_synthetic_shards(path, num_shards=1, num_tasks=12, records_per_task=32)
    return path


def _trainer(root, epochs=1, **kwargs):
    kwargs.setdefault("callbacks", [ModelCheckpoint(dirpath=root / "ckpt", save_last=True)])
    return L.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        default_root_dir=root,
        enable_progress_bar=False,
        enable_model_summary=False,
        gradient_clip_val=kwargs.pop("gradient_clip_val", 0.5),
        **kwargs,
    )


def _predict(net_or_module, dm):
    net_or_module.eval()
    with torch.no_grad():
        return torch.cat([net_or_module(b) for b in dm.test_dataloader()])


@pytest.fixture(scope="module")
def pretrained(shards, tmp_path_factory):
    """A PAM checkpoint trained 2 epochs on `shards`, with its DataModule."""
    root = tmp_path_factory.mktemp("pretrain")
    L.seed_everything(0)
    dm = ShardDataModule(str(shards), batch_size=64)
    module = PAMModule(net=TINY_PAM, lr=3e-3)
    _trainer(root, epochs=2).fit(module, dm)
    return root / "ckpt" / "last.ckpt", module, dm


@pytest.mark.parametrize(
    "cls, config",
    [(PAMModule, TINY_PAM), (MLPModule, TINY_MLP), (MoAModule, TINY_PAM)],
    ids=["pam", "mlp", "moa"],
)
def test_checkpoint_round_trip_gives_the_same_predictions(cls, config, shards, tmp_path):
    L.seed_everything(0)
    dm = ShardDataModule(str(shards), batch_size=64)
    module = cls(net=config, lr=3e-3)
    _trainer(tmp_path).fit(module, dm)
    path = tmp_path / "ckpt" / "last.ckpt"
    expected = _predict(module, dm)
    raw = torch.load(path, map_location="cpu", weights_only=True)  # plain types only
    assert raw["hyper_parameters"]["net"] == vars(config)
    assert (raw["cost_model"], raw["schema_version"], raw["source_device"]) == (
        cls.__name__,
        MODEL_SCHEMA_VERSION,
        "synthetic",
    )
    torch.testing.assert_close(_predict(cls.load_from_checkpoint(path), dm), expected)
    net = load_net(str(path))
    assert not net.training and net.config == config
    torch.testing.assert_close(_predict(net, dm), expected)
    # the normalization travels in the checkpoint: the training records' column maxima
    scaled = net.online if cls is MoAModule else net
    torch.testing.assert_close(scaled.stmt_scale, dm.scales[0])


def test_training_beats_random_ranking_on_held_out_tasks(tmp_path):
    write_synthetic_shards(tmp_path / "data", num_shards=1, num_tasks=32, records_per_task=64)
    L.seed_everything(0)
    dm = ShardDataModule(str(tmp_path / "data"), split="hold-out", test_networks=["net_d"], batch_size=32)
    module = PAMModule(net=TINY_PAM, loss="ranknet", lr=3e-3)
    trainer = _trainer(tmp_path, epochs=10, enable_checkpointing=False, callbacks=[])
    trainer.fit(module, dm)
    untrained = trainer.test(PAMModule(net=TINY_PAM), dm, verbose=False)[0]
    result = trainer.test(module, dm, verbose=False)[0]
    # random ranking scores 0.5 pairwise accuracy (about +-0.03 on these 8 held-out tasks)
    assert result["test_pairwise_acc"] > 0.62, result
    assert result["test_pairwise_acc"] > untrained["test_pairwise_acc"] + 0.08, (result, untrained)


def test_finetune_keeps_the_pretrained_normalization(pretrained, shards, tmp_path):
    path, pre_module, pre_dm = pretrained
    # the new device's data has 3x larger features: its own scales would differ
    data = read_shards(shards)
    data.stmt *= 3.0
    data.gemm *= 3.0
    write_shard(tmp_path / "new_device.h5", data, {"source": "test"})
    dm = ShardDataModule(str(tmp_path / "new_device.h5"), batch_size=64)
    module = PAMModule(net=TINY_PAM, init_from=str(path), optimizer="sgd", lr=1e-12)
    _trainer(tmp_path, gradient_clip_val=None).fit(module, dm)
    torch.testing.assert_close(module.net.stmt_scale, pre_module.net.stmt_scale)
    torch.testing.assert_close(module.net.access_scale, pre_module.net.access_scale)
    assert dm._scales is None  # the new data's scales were never computed
    assert not torch.allclose(dm.scales[0], pre_module.net.stmt_scale)
    for a, b in zip(module.net.parameters(), pre_module.net.parameters()):  # started from the weights
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="init_from"):
        _trainer(tmp_path).fit(PAMModule(net=PAMConfig(stmt_hidden=8, gemm_embed=8, heads=2), init_from=str(path)), dm)


def test_moa_fit_starts_both_copies_from_pam_and_moves_the_target_by_ema(pretrained, shards, tmp_path):
    path, pre_module, _ = pretrained
    dm = ShardDataModule(str(shards), batch_size=64)
    module = MoAModule(net=TINY_PAM, init_from=str(path), momentum=0.9, lr=3e-3)
    _trainer(tmp_path, epochs=1).fit(module, dm)
    pre = list(pre_module.net.parameters())
    online = list(module.net.online.parameters())
    assert not all(torch.allclose(a, b) for a, b in zip(online, pre))  # the online copy trained
    for target, p, o in zip(module.net.target.parameters(), pre, online):  # one EMA step per epoch
        torch.testing.assert_close(target, 0.9 * p + 0.1 * o.detach())
    torch.testing.assert_close(module.net.target.stmt_scale, pre_module.net.stmt_scale)
    # a PAM finetune from this MoA checkpoint starts from its momentum (target) copy
    pam = PAMModule(net=TINY_PAM)
    pam.load_pretrained(str(tmp_path / "ckpt" / "last.ckpt"))
    for a, b in zip(pam.net.parameters(), module.net.target.parameters()):
        torch.testing.assert_close(a, b)


def test_gain_scale_and_truncation_reach_the_loss_and_the_checkpoint(shards, tmp_path):
    """`gain_scale` and `truncation` are the LambdaRank loss's, travel in the hyper-parameters, and
    are refused for a loss without a gain."""
    L.seed_everything(0)
    dm = ShardDataModule(str(shards), batch_size=64)
    module = PAMModule(net=TINY_PAM, gain_scale=8.0, truncation=5, lr=3e-3)
    dm.setup("fit")
    module.net.set_scales(*dm.scales)
    batch = next(iter(dm.train_dataloader()))
    preds = module(batch)

    want = lambda_rank_loss(preds, batch["label"], batch["task"], gain_scale=8.0, truncation=5)
    torch.testing.assert_close(module.loss_fn(preds, batch["label"], batch["task"]), want)
    assert not torch.allclose(want, lambda_rank_loss(preds, batch["label"], batch["task"], gain_scale=8.0))
    assert not torch.allclose(want, lambda_rank_loss(preds, batch["label"], batch["task"], truncation=5))
    _trainer(tmp_path).fit(module, dm)
    hparams = PAMModule.load_from_checkpoint(tmp_path / "ckpt" / "last.ckpt").hparams
    assert (hparams.gain_scale, hparams.truncation) == (8.0, 5)
    with pytest.raises(ValueError, match="truncation"):
        PAMModule(net=TINY_PAM, loss="mse", truncation=5)
    with pytest.raises(ValueError, match="gain_scale"):
        PAMModule(net=TINY_PAM, loss="ranknet", gain_scale=8.0)
    with pytest.raises(ValueError, match="gain_scale"):
        PAMModule(net=TINY_PAM, gain_scale=-1.0)
