"""MoA: the momentum update, the tuning-time adapt() round, and the shared online training loop."""

import pytest
import torch

from data.batch import make_batch
from data.synthetic import synthetic_shard_data
from pruner_models.moa import MoANet, train_online
from pruner_models.pam import PAMConfig, PAMNet

TINY = PAMConfig(stmt_hidden=16, gemm_hidden=8, gemm_embed=8, heads=2, fuse_hidden=16)


def _task_batches(num_tasks=4, records=24, seed=0):
    """One batch per task of the synthetic (learnable) data, as the tuner would build them."""
    data = synthetic_shard_data(num_tasks=num_tasks, records_per_task=records, seed=seed, failed_fraction=0.0)
    batches = []
    for t in range(num_tasks):
        idx = [i for i in range(data.num_records) if data.record_task[i] == t]
        stmt = [data.stmt[data.stmt_ptr[i] : data.stmt_ptr[i + 1]] for i in idx]
        batches.append(make_batch(stmt, data.task_tags[t], data.gemm[idx], data.label[idx], [t] * len(idx)))
    return batches


def _params(net):
    return [p.detach().clone() for p in net.parameters()]


def test_ema_update_moves_parameters_only():
    moa = MoANet(TINY, momentum=0.99)
    with torch.no_grad():
        for p in moa.online.parameters():
            p.add_(1.0)
        moa.online.decoder.norm.running_mean.fill_(5.0)
    target_before, online = _params(moa.target), _params(moa.online)
    moa.ema_update()
    for t_after, t_before, o in zip(moa.target.parameters(), target_before, online):
        torch.testing.assert_close(t_after, 0.99 * t_before + 0.01 * o)
    assert moa.target.decoder.norm.running_mean.abs().max() == 0  # buffers are not averaged
    assert not any(p.requires_grad for p in moa.target.parameters())


def test_adapt_resets_online_from_target_trains_it_and_updates_target():
    batches = _task_batches()
    moa = MoANet(TINY)
    with torch.no_grad():  # an online copy that drifted away since the last round
        for p in moa.online.parameters():
            p.add_(0.5)
    target_before = _params(moa.target)
    history = moa.adapt(batches, epochs=30, lr=3e-3, patience=None, seed=0)
    assert len(history) == 30 and history[-1] < 0.8 * history[0]
    assert not moa.online.training
    # Train an identical copy from the OLD target: the online result must be the same, so adapt
    # started from the target and not from the drifted online weights.
    ref = PAMNet(TINY)
    ref.load_state_dict(moa.target.state_dict())
    with torch.no_grad():
        for p, t in zip(ref.parameters(), target_before):
            p.copy_(t)
    train_online(ref, batches, epochs=30, lr=3e-3, patience=None, seed=0)
    for a, b in zip(moa.online.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b)
    for t_after, t_before, o in zip(moa.target.parameters(), target_before, moa.online.parameters()):
        torch.testing.assert_close(t_after, 0.99 * t_before + 0.01 * o.detach())
    with torch.no_grad():
        torch.testing.assert_close(moa(batches[0]), moa.online(batches[0]))


def test_from_pretrained_copies_weights_and_scales():
    net = PAMNet(TINY)
    net.set_scales(torch.full((174,), 3.0), torch.full((23,), 2.0))
    moa = MoANet.from_pretrained(net)
    for copy in (moa.online, moa.target):
        for a, b in zip(copy.state_dict().values(), net.state_dict().values()):
            torch.testing.assert_close(a, b)
    with pytest.raises(TypeError, match="PAMNet"):
        MoANet.from_pretrained(torch.nn.Linear(2, 2))


def test_train_online_learns_and_early_stops():
    batches = _task_batches(seed=1)
    net = PAMNet(TINY)
    history = train_online(net, batches, epochs=40, lr=3e-3, loss="ranknet", patience=None)
    assert history[-1] < 0.7 * history[0]
    # a patience of 1 with a zero learning rate stops after the second epoch (no improvement)
    assert len(train_online(PAMNet(TINY), batches, epochs=40, lr=1e-12, loss="mse", patience=1)) <= 3
    # single-program batches carry no pair and cannot train BatchNorm: skipped
    single = [dict((k, v[:1]) if k != "rows" else (k, v) for k, v in batches[0].items())]
    single[0]["segment"] = torch.zeros(len(batches[0]["rows"]), dtype=torch.long)
    assert train_online(PAMNet(TINY), single, epochs=3) == []
    with pytest.raises(ValueError, match="loss"):
        train_online(net, batches, loss="hinge")
