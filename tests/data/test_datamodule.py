"""ShardDataModule on real HDF5 shards: splits, whole-task batches, DDP sharding, train-only scales."""

import numpy as np
import pytest
import torch

from data.batch import compute_scales, make_batch
from data.datamodule import ShardDataModule, split_within_task
from data.shards import read_shards
from data.synthetic import write_synthetic_shards
from data.task_batches import TaskBatchSampler


@pytest.fixture(scope="module")
def shard_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("shards")
    # 2 shards x 8 tasks; task sizes 40 records; 3% failed; task i in net_{a,b,c,d}[i % 4], every 4th shared
    write_synthetic_shards(path, num_shards=2, num_tasks=8, records_per_task=40, failed_fraction=0.05)
    return path


def _task_sets(data, records):
    return set(data.record_task[records].tolist())


def test_within_task_split_is_disjoint_complete_and_seeded(shard_dir):
    dm = ShardDataModule(str(shard_dir), split="within-task", test_fraction=0.25, val_fraction=0.2, seed=3)
    dm.setup("fit")
    data = read_shards(shard_dir)
    ok = np.flatnonzero(np.isfinite(data.latency))
    train, val, test = (dm.splits[k] for k in ("train", "val", "test"))
    assert dm.num_failed == int((~np.isfinite(data.latency)).sum()) > 0
    assert sorted(np.concatenate([train, val, test]).tolist()) == ok.tolist()
    for t in range(data.num_tasks):  # every task is in every split, in the asked proportions
        n_task = np.isin(ok, np.flatnonzero(data.record_task == t)).sum()
        n_test = (data.record_task[test] == t).sum()
        assert n_test == round(0.25 * n_task)
        assert (data.record_task[val] == t).sum() == round(0.2 * (n_task - n_test))
    again = ShardDataModule(str(shard_dir), split="within-task", test_fraction=0.25, val_fraction=0.2, seed=3)
    again.setup("fit")
    other = ShardDataModule(str(shard_dir), split="within-task", test_fraction=0.25, val_fraction=0.2, seed=4)
    other.setup("fit")
    assert np.array_equal(again.splits["test"], test) and not np.array_equal(other.splits["test"], test)


def test_split_within_task_rounds_per_task():
    task = np.repeat([0, 1, 2], [10, 3, 1])
    picked = split_within_task(task, 0.3, np.random.default_rng(0))
    assert [picked[task == t].sum() for t in range(3)] == [3, 1, 0]


def test_hold_out_keeps_every_task_of_held_out_networks_out_of_training(shard_dir):
    dm = ShardDataModule(
        str(shard_dir), split="hold-out", test_networks=["net_a"], val_fraction=0.25, drop_failed=False
    )
    dm.setup("fit")
    data = read_shards(shard_dir)
    nets = [set(n.split(",")) for n in data.task_networks]
    held = {t for t, n in enumerate(nets) if "net_a" in n}
    shared = {t for t in held if len(nets[t]) > 1}
    assert shared, "the fixture must have a task shared by net_a and another network"
    assert _task_sets(data, dm.splits["test"]) == held
    assert not held & (_task_sets(data, dm.splits["train"]) | _task_sets(data, dm.splits["val"]))
    assert not _task_sets(data, dm.splits["train"]) & _task_sets(data, dm.splits["val"])  # val: whole tasks
    assert len(_task_sets(data, dm.splits["val"])) == round(0.25 * (data.num_tasks - len(held)))
    total = sum(len(v) for v in dm.splits.values())
    assert total == data.num_records  # drop_failed=False keeps the failed records (label 0)
    assert (data.label[np.concatenate(list(dm.splits.values()))] == 0).sum() == dm.num_failed


def test_hold_out_can_validate_on_whole_networks(shard_dir):
    data = read_shards(shard_dir)
    nets = [set(filter(None, n.split(","))) for n in data.task_networks]
    dm = ShardDataModule(str(shard_dir), split="hold-out", test_networks=["net_a"], val_fraction=0.25, val_by="network")
    dm.setup("fit")
    train, val, test = (_task_sets(data, dm.splits[k]) for k in ("train", "val", "test"))
    assert val and train and not (train & val) and not (test & (train | val))
    # the drawn networks: those with a task in val and none in training; every val task is one of theirs
    drawn = {n for t in val for n in nets[t]} - {n for t in train for n in nets[t]}
    assert drawn and all(nets[t] & drawn for t in val)
    assert len(val) >= round(0.25 * (data.num_tasks - len(test)))
    again = ShardDataModule(
        str(shard_dir), split="hold-out", test_networks=["net_a"], val_fraction=0.25, val_by="network"
    )
    again.setup("fit")
    assert np.array_equal(again.splits["val"], dm.splits["val"])
    by_task = ShardDataModule(str(shard_dir), split="hold-out", test_networks=["net_a"], val_fraction=0.25)
    by_task.setup("fit")
    assert np.array_equal(by_task.splits["test"], dm.splits["test"])
    with pytest.raises(ValueError, match="val_by='network' is only used with split='hold-out'"):
        ShardDataModule(str(shard_dir), val_by="network")


def test_bad_arguments_name_the_flag(shard_dir):
    with pytest.raises(ValueError, match="test_networks"):
        ShardDataModule(str(shard_dir), split="hold-out")
    with pytest.raises(ValueError, match="test_networks"):
        ShardDataModule(str(shard_dir), split="within-task", test_networks=["net_a"])
    with pytest.raises(ValueError, match="val_fraction"):
        ShardDataModule(str(shard_dir), val_fraction=1.0)
    dm = ShardDataModule(str(shard_dir), split="hold-out", test_networks=["resnet_9000"])
    with pytest.raises(ValueError, match="resnet_9000"):
        dm.setup("fit")


def test_batches_hold_whole_tasks_and_cover_the_split_once(shard_dir):
    dm = ShardDataModule(str(shard_dir), batch_size=64, seed=0)
    dm.setup("fit")
    data = read_shards(shard_dir)
    for name, loader in (("train", dm.train_dataloader()), ("test", dm.test_dataloader())):
        batches = list(loader)
        seen = torch.cat([b["task"] for b in batches])
        assert len(seen) == len(dm.splits[name])
        counts = np.bincount(data.record_task[dm.splits[name]], minlength=data.num_tasks)
        for b in batches:
            assert 2 <= len(b["label"]) <= 64 + 1
            for t in b["task"].unique().tolist():  # a task is split only when it exceeds the batch size
                if counts[t] <= 64:
                    assert (b["task"] == t).sum() == counts[t]
        assert sorted(seen.tolist()) == sorted(data.record_task[dm.splits[name]].tolist())


def test_gathered_batch_equals_make_batch_from_per_program_arrays(shard_dir):
    dm = ShardDataModule(str(shard_dir), batch_size=64)
    dm.setup("fit")
    data = read_shards(shard_dir)
    idx = dm.splits["train"][[5, 0, 17, 3, 60]]
    stmt = [data.stmt[data.stmt_ptr[i] : data.stmt_ptr[i + 1]] for i in idx]
    expected = make_batch(
        stmt, data.task_tags[data.record_task[idx]], data.gemm[idx], data.label[idx], data.record_task[idx]
    )
    got = dm.store[idx]
    for key in expected:
        assert torch.equal(got[key], expected[key]), key


def test_only_the_train_loader_shuffles(shard_dir):
    dm = ShardDataModule(str(shard_dir), batch_size=64)
    dm.setup("fit")
    train = dm.train_dataloader()
    first = torch.cat([b["task"] for b in train])
    train.sampler.set_epoch(1)
    assert not torch.equal(first, torch.cat([b["task"] for b in train]))
    val = dm.val_dataloader()
    a = torch.cat([b["label"] for b in val])
    val.sampler.set_epoch(1)
    assert torch.equal(a, torch.cat([b["label"] for b in val]))


def test_sampler_shards_batches_over_ranks():
    records = np.arange(100, 300)
    task = np.repeat(np.arange(10), 20)
    full = TaskBatchSampler(records, task, batch_size=50, shuffle=True, seed=1).all_batches()
    for pad in (False, True):
        parts = [
            list(TaskBatchSampler(records, task, 50, shuffle=True, seed=1, num_replicas=3, rank=r, pad=pad))
            for r in range(3)
        ]
        got = sorted(torch.cat([b for part in parts for b in part]).tolist())
        if pad:  # training: equal step counts, the first batches repeated
            assert len({len(p) for p in parts}) == 1 and len(got) >= 200
        else:  # evaluation: every record exactly once
            assert got == sorted(np.concatenate(full).tolist())
    lonely = list(TaskBatchSampler(records[:20], task[:20], 50, shuffle=False, num_replicas=2, rank=1))
    assert [len(b) for b in lonely] == [0]  # an idle rank still runs one (empty) batch: it must join the sync


def test_scales_come_from_the_training_records_only(shard_dir):
    dm = ShardDataModule(str(shard_dir), split="hold-out", test_networks=["net_a"])
    dm.setup("fit")
    stmt_scale, access_scale = dm.scales
    train = dm.splits["train"]
    expected = compute_scales(dm.store[train])
    torch.testing.assert_close(stmt_scale, expected[0])
    torch.testing.assert_close(access_scale, expected[1])
    everything = compute_scales(dm.store[np.arange(len(dm.store))])
    assert (stmt_scale <= everything[0]).all()
    assert stmt_scale.shape == (174,) and access_scale.shape == (23,) and (stmt_scale > 0).all()
    # a column that is zero in every training row gets scale 1
    assert torch.equal(compute_scales({"rows": torch.zeros(3, 174), "gemm": -torch.ones(2, 8, 23)})[1], torch.ones(23))


@pytest.mark.parametrize("low", [30, 1], ids=["tasks-of-30-to-200", "one-record-tasks-too"])
def test_every_epoch_has_the_same_number_of_batches(low):
    """Greedy packing of shuffled task groups gives 53-56 batches here depending on the epoch; the
    sampler must give one count (Lightning validates when an epoch reaches the count it took once),
    and splitting a batch to get there must not leave a one-program batch (BatchNorm)."""
    sizes = np.random.default_rng(0).integers(low, 200, size=200)
    task = np.repeat(np.arange(200), sizes)
    records = np.arange(len(task))
    sampler = TaskBatchSampler(records, task, 512, shuffle=True, seed=0)
    assert len({len(sampler._pack(e)) for e in range(20)}) > 1, "the fixture must make the raw counts vary"
    for epoch in range(30):
        sampler.set_epoch(epoch)
        batches = sampler.all_batches()
        assert len(batches) == len(sampler) == sampler.steps()
        assert sorted(np.concatenate(batches).tolist()) == records.tolist()  # every record once
        assert all(2 <= len(b) <= 512 for b in batches)
        for b in batches:  # each batch holds whole groups: a task's records in it are contiguous
            runs = np.flatnonzero(np.diff(task[b])) + 1
            assert len(np.unique(task[b])) == len(runs) + 1


def test_validation_runs_every_epoch_with_uneven_tasks(tmp_path):
    """A real Trainer on shards whose task sizes make the packing vary: validation (and with it the
    checkpoint and early stopping) must run at the end of every epoch."""
    import lightning as L

    from data.shards import write_shard
    from data.synthetic import synthetic_shard_data
    from pruner_models.mlp import MLPConfig
    from pruner_models.module import MLPModule

    for i, (n, per_task) in enumerate([(9, 23), (7, 41), (5, 67)]):
        write_shard(
            tmp_path / f"shard_{i}.h5",
            synthetic_shard_data(n, per_task, seed=i, task_offset=100 * i),
            {"source": "test"},
        )
    dm = ShardDataModule(str(tmp_path), batch_size=48, val_fraction=0.2, seed=5)
    dm.setup("fit")
    sampler = dm.train_dataloader().sampler
    raw = [len(sampler._pack(e)) for e in range(6)]
    assert min(raw[1:]) < raw[0], f"the fixture must pack a later epoch shorter than the first: {raw}"

    class CountValidations(L.Callback):
        epochs: list[int] = []

        def on_validation_epoch_end(self, trainer, pl_module):
            if not trainer.sanity_checking:
                self.epochs.append(trainer.current_epoch)

    counter = CountValidations()
    L.seed_everything(0)
    trainer = L.Trainer(max_epochs=6, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[counter])  # fmt: skip
    trainer.fit(MLPModule(net=MLPConfig(hidden=16), lr=3e-3), dm)
    assert counter.epochs == list(range(6))


def test_splitting_a_batch_never_leaves_one_program():
    """A batch of a one-record task and a ten-record one, to be split in two: cutting between the
    tasks would leave a one-program batch, so the ten-record task is halved instead."""
    task = np.repeat([0, 1], [1, 10])
    sampler = TaskBatchSampler(np.arange(11), task, 11, shuffle=False)
    assert [len(b) for b in sampler._pack(0)] == [2]  # [[one record], [ten records]]: one batch of two groups
    sampler._steps = 2  # as if another epoch had packed two batches
    batches = sampler.all_batches()
    assert sorted(len(b) for b in batches) == [5, 6] and sorted(np.concatenate(batches).tolist()) == list(range(11))


def test_synthetic_shards_written_by_two_processes_equal_those_written_in_one(tmp_path):
    """`write_synthetic_shards(workers=2)` spawns its writers (a caller with threads must not be forked)."""
    write_synthetic_shards(tmp_path / "one", num_shards=2, num_tasks=2, records_per_task=8)
    write_synthetic_shards(tmp_path / "two", num_shards=2, num_tasks=2, records_per_task=8, workers=2)
    one, two = read_shards(tmp_path / "one"), read_shards(tmp_path / "two")
    np.testing.assert_array_equal(one.latency, two.latency)
    np.testing.assert_array_equal(one.record_task, two.record_task)
