"""LightningDataModule over HDF5 feature shards: splits, task-grouped batches, train-only scales.

* Data: all shards are read once in `setup` (`data.shards.read_shards`) into one `ProgramStore` of
  contiguous tensors (CSR statement rows), optionally moved to the GPU (`data_on_device`). A batch
  is gathered by a few vectorized index ops; there is no per-record Python in the training loop.
* Splits (seeded):
  - `within-task`: every task's records are split at random, `test_fraction` to test; validation
    is carved from each task's remaining records the same way (`val_fraction`). Easier than a real
    deployment (the model has seen every task): label results "within-task".
  - `hold-out`: every task used by one of `test_networks` goes to test, with all its records (a
    task shared with a training network too goes to the held-out side, so nothing of a held-out
    network is trained on); validation is `val_fraction` of the remaining TASKS, whole, so early
    stopping measures the same kind of generalization as the test. With `val_by="network"`,
    validation is instead whole training NETWORKS, drawn with the seed until their tasks reach that
    share (every task of a drawn network leaves training, as the test's do), so early stopping
    watches an unseen network as the test does. When that rounds to no task (or to all of them),
    validation falls back to `val_fraction` of every training task's records, with a warning that
    says so.
  - A split that leaves no validation record (with `val_fraction` > 0) or no training record fails
    in `setup`, before training, with a message saying what to change.
* Batches hold WHOLE task groups (`TaskBatchSampler`): tasks are packed greedily up to
  `batch_size` records; a task larger than `batch_size` is cut into near-equal chunks. The ranking
  losses compare records of one task only, so a batch must hold comparable labels.
* Normalization: `scales` are the per-column maxima over the TRAINING records only, computed on
  first use; the model copies them at the start of a fit from scratch, and a finetune
  (`--model.init_from`) never asks for them (it keeps the pretrained ones).
* Failed measurements (latency inf, label 0) are dropped when `drop_failed` (default) and counted
  either way.
"""

from __future__ import annotations

from typing import Literal

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor
from torch.utils.data import DataLoader

from data.batch import ProgramStore, compute_scales
from data.shards import ShardData, read_shards, task_network_sets
from data.task_batches import TaskBatchSampler

__all__ = ["ShardDataModule", "SplitError", "TaskBatchSampler", "split_within_task"]

_SCALE_CHUNK = 16384
"""Records per chunk when streaming the training set through `compute_scales` (bounded memory)."""


class SplitError(ValueError):
    """The data cannot be split as asked (no training or validation records); says what to change."""


def split_within_task(record_task: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """A random `fraction` of every task's records (rounded per task), as a boolean mask.

    Vectorized: random keys sorted within tasks; a record is picked when its rank within its task
    is below round(fraction * task size).

    Args:
        record_task: (n,) task id of each candidate record.
        fraction: in [0, 1).
        rng: the seeded generator.

    Returns:
        (n,) bool mask of the picked records.
    """
    n = len(record_task)
    order = np.lexsort((rng.random(n), record_task))
    _, inverse, counts = np.unique(record_task, return_inverse=True, return_counts=True)
    start = np.cumsum(counts) - counts
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - start[inverse[order]]
    return rank < np.rint(fraction * counts)[inverse]


class ShardDataModule(L.LightningDataModule):
    """Feature shards -> train / val / test loaders of task-grouped batches.

    Args:
        shards: a shard file, a folder of `*.h5` shards, or a list of either.
        networks: keep only tasks used by these networks (None: all tasks, operators included).
        split: "within-task" (random records of every task) or "hold-out" (by network).
        test_networks: hold-out split: the networks whose tasks are held out for test.
        test_fraction: within-task split: fraction of every task's records for test.
        val_fraction: fraction carved from the training side for validation (records of every task
            for within-task, whole tasks for hold-out).
        val_by: hold-out split: validate on whole tasks ("task") or on whole networks ("network"),
            drawn at random with the seed.
        batch_size: target records per batch (whole tasks are packed; see TaskBatchSampler).
        drop_failed: drop failed measurements (label 0); they are counted either way.
        seed: seed of the splits and of the training batch order.
        num_workers: DataLoader workers (0 is usually fastest: a batch is a few index ops).
        data_on_device: keep the whole dataset on the accelerator and slice batches there (fastest
            on a GPU when the data fits; needs num_workers=0).

    Attributes (after `setup`):
        store: the ProgramStore of all records (failed ones included; the splits leave them out).
        splits: {"train", "val", "test"} -> (n,) int64 record indices into `store`.
        record_task: (N,) task index of every record; tasks: task_key, task_name, task_networks,
            task_weight arrays (T,) of the shards.
        num_failed: failed measurements in the data (dropped or kept, see drop_failed).
        source_device: the device name(s) of the training tasks' keys ("<device>/<task_dir>"),
            comma-separated; stored in checkpoints as `source_device`.
        scales: (stmt_scale (174,), access_scale (23,)) over the training records, computed on use.
    """

    def __init__(
        self,
        shards: str | list[str],
        networks: list[str] | None = None,
        split: Literal["within-task", "hold-out"] = "within-task",
        test_networks: list[str] | None = None,
        test_fraction: float = 0.2,
        val_fraction: float = 0.1,
        val_by: Literal["task", "network"] = "task",
        batch_size: int = 512,
        drop_failed: bool = True,
        seed: int = 0,
        num_workers: int = 0,
        data_on_device: bool = False,
    ) -> None:
        super().__init__()
        if split not in ("within-task", "hold-out"):
            raise ValueError(f"split must be 'within-task' or 'hold-out', got {split!r}")
        if split == "hold-out" and not test_networks:
            raise ValueError(f"split='hold-out' needs test_networks (the held-out networks), got {test_networks!r}")
        if split == "within-task" and test_networks:
            raise ValueError(f"test_networks={test_networks!r} is only used with split='hold-out'")
        if val_by not in ("task", "network"):
            raise ValueError(f"val_by must be 'task' or 'network', got {val_by!r}")
        if split == "within-task" and val_by != "task":
            raise ValueError(f"val_by={val_by!r} is only used with split='hold-out'")
        for name, value in (("test_fraction", test_fraction), ("val_fraction", val_fraction)):
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value!r}")
        if batch_size < 2:
            raise ValueError(f"batch_size must be >= 2, got {batch_size!r}")
        if data_on_device and num_workers:
            raise ValueError(f"data_on_device needs num_workers=0, got num_workers={num_workers!r}")
        self.save_hyperparameters()
        self.store: ProgramStore | None = None
        self.tasks: dict[str, np.ndarray] = {}
        self.record_task: np.ndarray | None = None
        self.source_device = ""
        self.splits: dict[str, np.ndarray] = {}
        self.num_failed = 0
        self._scales: tuple[Tensor, Tensor] | None = None

    def setup(self, stage: str | None = None) -> None:
        """Read the shards and build the splits (once; later calls reuse them)."""
        if self.store is None:
            self._load()
        trainer = self.trainer
        if self.hparams.data_on_device and trainer is not None:
            device = trainer.strategy.root_device
            if self.store.device != device:
                self.store = self.store.to(device)

    def _load(self) -> None:
        hp = self.hparams
        data = read_shards(hp.shards, networks=hp.networks)
        if data.num_records == 0:
            raise ValueError(f"shards={hp.shards!r} (networks={hp.networks!r}) hold no records")
        failed = ~np.isfinite(data.latency)
        self.num_failed = int(failed.sum())
        usable = np.flatnonzero(~failed) if hp.drop_failed else np.arange(data.num_records)
        rng = np.random.default_rng(hp.seed)
        if hp.split == "within-task":
            test = split_within_task(data.record_task[usable], hp.test_fraction, rng)
            train_val = usable[~test]
            val = split_within_task(data.record_task[train_val], hp.val_fraction, rng)
        else:
            held = self._held_out_tasks(data)
            test = held[data.record_task[usable]]
            train_val = usable[~test]
            train_tasks = np.unique(data.record_task[train_val])
            if not len(train_tasks):
                raise SplitError(
                    f"split='hold-out' with test_networks={hp.test_networks!r} leaves no training task: every task "
                    "is used by a held-out network; hold out fewer networks"
                )
            n_val = int(round(hp.val_fraction * len(train_tasks)))
            if hp.val_fraction > 0 and not 0 < n_val < len(train_tasks):
                # Too few tasks for whole-task validation: validate on records of the training tasks.
                val = split_within_task(data.record_task[train_val], hp.val_fraction, rng)
                rank_zero_warn(
                    f"hold-out: val_fraction={hp.val_fraction!r} of {len(train_tasks)} training tasks is {n_val} "
                    f"whole tasks, which leaves no {'validation' if n_val == 0 else 'training'} task; validation "
                    f"falls back to {hp.val_fraction:.0%} of every training task's records (within-task). For a "
                    "whole-task validation, use more tasks or a val_fraction that rounds to between 1 task and "
                    "all but one"
                )
            else:
                val_tasks = np.zeros(data.num_tasks, dtype=bool)
                if hp.val_by == "network":
                    val_tasks[self._validation_network_tasks(data, train_tasks, n_val, rng)] = True
                else:
                    val_tasks[rng.choice(train_tasks, size=n_val, replace=False)] = True
                val = val_tasks[data.record_task[train_val]]
        self.splits = {"train": train_val[~val], "val": train_val[val], "test": usable[test]}
        if hp.val_fraction > 0 and not len(self.splits["val"]):
            raise SplitError(
                f"val_fraction={hp.val_fraction!r} left no validation records ({len(train_val)} training records "
                f"in {len(np.unique(data.record_task[train_val]))} tasks): raise --data.val_fraction, or set it to 0 "
                "and train without validation (--trainer.limit_val_batches 0, no checkpoint/early-stopping monitor)"
            )
        if not len(self.splits["train"]):
            raise SplitError(
                f"the training split is empty ({len(usable)} usable records, test_fraction={hp.test_fraction!r}, "
                f"val_fraction={hp.val_fraction!r}): lower the fractions or add records"
            )
        self.tasks = {name: getattr(data, name) for name in ("task_key", "task_name", "task_networks", "task_weight")}
        self.record_task = data.record_task
        train_tasks = np.unique(data.record_task[self.splits["train"]])
        self.source_device = ",".join(sorted({key.split("/", 1)[0] for key in data.task_key[train_tasks].tolist()}))
        self.store = ProgramStore.from_shards(data)
        counts = ", ".join(
            f"{name} {len(idx)} records / {len(np.unique(data.record_task[idx]))} tasks"
            for name, idx in self.splits.items()
        )
        rank_zero_info(
            f"ShardDataModule: {data.num_records} records of {data.num_tasks} tasks, {self.num_failed} failed "
            f"({'dropped' if hp.drop_failed else 'kept with label 0'}); split {hp.split}: {counts}"
        )

    def _validation_network_tasks(
        self, data: ShardData, train_tasks: np.ndarray, n_val: int, rng: np.random.Generator
    ) -> np.ndarray:
        """Training tasks of whole networks drawn in a seeded order until they are at least `n_val`
        (a task shared with a network not drawn goes too); at least one task stays in training."""
        task_nets = task_network_sets(data.task_networks[train_tasks].tolist())
        networks = sorted(set().union(*task_nets))
        picked: set[str] = set()
        chosen = np.zeros(len(train_tasks), dtype=bool)
        for net in rng.permutation(networks).tolist():
            trial = chosen | np.array([net in nets for nets in task_nets])
            if trial.all():
                continue
            picked.add(net)
            chosen = trial
            if chosen.sum() >= n_val:
                break
        if not chosen.any():
            raise SplitError(
                f"val_by='network': every training network's tasks cover all {len(train_tasks)} training tasks, so "
                "no network can be held out for validation; use val_by='task'"
            )
        rank_zero_info(f"ShardDataModule: validation networks {sorted(picked)} ({int(chosen.sum())} tasks)")
        return train_tasks[chosen]

    def _held_out_tasks(self, data: ShardData) -> np.ndarray:
        """(T,) bool: tasks used by at least one of `test_networks`."""
        wanted = set(self.hparams.test_networks)
        task_nets = task_network_sets(data.task_networks.tolist())
        known = set().union(*task_nets)
        if not wanted <= known:
            raise ValueError(
                f"test_networks={sorted(wanted - known)!r} are not in the data; networks present: {sorted(known)!r}"
            )
        return np.array([bool(wanted & nets) for nets in task_nets], dtype=bool)

    @property
    def scales(self) -> tuple[Tensor, Tensor]:
        """stmt_scale (174,), access_scale (23,): column maxima over the training records only."""
        if self._scales is None:
            if self.store is None:
                self.setup("fit")
            train = torch.from_numpy(self.splits["train"])
            if len(train) == 0:
                raise ValueError("the training split is empty: no records to compute the normalization from")
            self._scales = compute_scales(self.store[chunk] for chunk in train.split(_SCALE_CHUNK))
        return self._scales

    def _loader(self, name: str) -> DataLoader:
        if self.store is None:
            self.setup(name)
        records = self.splits[name]
        trainer = self.trainer
        world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        train = name == "train"
        sampler = TaskBatchSampler(
            records,
            self.record_task[records],
            self.hparams.batch_size,
            shuffle=train,
            seed=self.hparams.seed,
            num_replicas=world,
            rank=rank,
            pad=train,
        )
        pin = self.store.device.type == "cpu" and trainer is not None and trainer.strategy.root_device.type == "cuda"
        workers = self.hparams.num_workers
        return DataLoader(
            self.store,
            sampler=sampler,
            batch_size=None,
            num_workers=workers,
            pin_memory=pin,
            persistent_workers=workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")
