"""Batches of whole task groups, split over DDP ranks (`TaskBatchSampler`, used by `data.datamodule`).

The ranking losses compare records of one task only, so a batch must hold whole tasks (or near-equal
chunks of a large one).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DistributedSampler

__all__ = ["TaskBatchSampler"]


class TaskBatchSampler(DistributedSampler):
    """Yields batches of record indices made of whole task groups; splits batches over DDP ranks.

    Per epoch (seeded by `seed` and the epoch, so every rank builds the same list): records are
    grouped by task (shuffled within the task and in task order when `shuffle`), tasks larger than
    `batch_size` are cut into ceil(n / batch_size) near-equal chunks, and groups are packed greedily
    into batches of at most `batch_size` records (a one-record batch is merged into the previous
    one or the next: BatchNorm cannot train on a single program). Every epoch has the same number of
    batches (`steps`; Lightning validates by that count).

    It subclasses DistributedSampler so Lightning does not wrap it: with R ranks, rank r takes
    batches r, r + R, ... . Training pads the list by repeating its first batches so every rank runs
    the same number of steps (DDP needs that); evaluation does not pad, so every record is scored
    exactly once and the synced metrics equal a single-process run (a rank with no batch left gets
    one empty batch, so that it still takes part in the end-of-epoch metric sync).

    Args:
        records: (n,) record indices of the split (into the ProgramStore).
        record_task: (n,) task id of each of them.
        batch_size: target records per batch.
        shuffle: shuffle within tasks and the group order (training only).
        seed: base seed.
        num_replicas, rank: DDP world size and this process's rank.
        pad: repeat batches so all ranks get equally many (training).
    """

    def __init__(
        self,
        records: np.ndarray,
        record_task: np.ndarray,
        batch_size: int,
        shuffle: bool,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        pad: bool = False,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
        if records.shape != record_task.shape:
            raise ValueError(f"records {records.shape} and record_task {record_task.shape} must match")
        super().__init__(records, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed)
        self.records = np.asarray(records, dtype=np.int64)
        self.record_task = np.asarray(record_task, dtype=np.int64)
        self.batch_size = batch_size
        self.pad = pad
        self._cache: tuple[int, list[np.ndarray]] | None = None
        self._steps: int | None = None

    def _groups(self, rng: np.random.Generator) -> list[np.ndarray]:
        """Positions (into `records`) of each task group or chunk, in batching order."""
        n = len(self.records)
        within = rng.random(n) if self.shuffle else np.arange(n)
        order = np.lexsort((within, self.record_task))
        cuts = np.flatnonzero(np.diff(self.record_task[order])) + 1
        groups = []
        for group in np.split(order, cuts) if n else []:
            groups += np.array_split(group, math.ceil(len(group) / self.batch_size))
        if self.shuffle:
            groups = [groups[i] for i in rng.permutation(len(groups))]
        return groups

    def _pack(self, epoch: int) -> list[list[np.ndarray]]:
        """The groups of `epoch`, packed greedily in their order into batches of <= batch_size."""
        batches: list[list[np.ndarray]] = []
        sizes: list[int] = []
        for group in self._groups(np.random.default_rng([self.seed, epoch])):
            if not sizes or (sizes[-1] + len(group) > self.batch_size and sizes[-1] > 1):
                batches.append([])
                sizes.append(0)
            batches[-1].append(group)
            sizes[-1] += len(group)
        if len(sizes) > 1 and sizes[-1] == 1:  # no one-program batch at the end either
            batches[-2] += batches.pop()
        return batches

    def steps(self) -> int:
        """Batches an epoch has, the same in every epoch. The greedy packing of shuffled groups gives
        a count that varies from epoch to epoch by a batch or two, but Lightning takes the length of
        the train loader once, before the first epoch, and validates when an epoch reaches that many
        batches: an epoch one batch short skipped validation (and with it checkpointing and early
        stopping). So every epoch is brought to the largest count of its first 8 epochs."""
        if self._steps is None:
            self._steps = max(len(self._pack(e)) for e in range(8 if self.shuffle else 1))
        return self._steps

    def all_batches(self) -> list[np.ndarray]:
        """Every rank's batches of the current epoch (record indices), before the rank split: `steps()`
        of them (a short epoch splits its largest batches, at a task boundary where it has one)."""
        if self._cache is not None and self._cache[0] == self.epoch:
            return self._cache[1]
        batches = self._pack(self.epoch)
        size = lambda i: sum(len(g) for g in batches[i])  # noqa: E731
        while 0 < len(batches) < self.steps():
            i = max(range(len(batches)), key=size)
            parts = batches[i]
            ends = np.cumsum([len(g) for g in parts])[:-1]
            cuts = [c + 1 for c, end in enumerate(ends) if 2 <= end <= size(i) - 2]  # no one-program half
            if cuts:  # cut between groups, near the middle
                cut = min(cuts, key=lambda c: abs(ends[c - 1] - size(i) / 2))
                halves = [parts[:cut], parts[cut:]]
            elif max(len(g) for g in parts) >= 4:  # halve its largest group (a task's chunk) over two batches
                j = max(range(len(parts)), key=lambda k: len(parts[k]))
                half = len(parts[j]) // 2
                halves = [[*parts[:j], parts[j][:half], *parts[j + 1 :]], [parts[j][half:]]]
            else:
                break  # the largest batch cannot be cut without a one-program batch
            batches[i : i + 1] = halves
        while len(batches) > self.steps():  # rarer than 1 in 8 epochs: the two smallest batches merge
            a, b = sorted(sorted(range(len(batches)), key=size)[:2])
            batches[a] += batches.pop(b)
        out = [self.records[np.concatenate(parts)] for parts in batches]
        self._cache = (self.epoch, out)
        return out

    def _mine(self) -> list[np.ndarray]:
        batches = self.all_batches()
        if self.num_replicas == 1:
            return batches
        if self.pad and batches:
            total = math.ceil(len(batches) / self.num_replicas) * self.num_replicas
            batches = [batches[i % len(batches)] for i in range(total)]
        # A rank left without data still runs one empty batch, so it joins the metric sync.
        return batches[self.rank :: self.num_replicas] or [np.zeros(0, dtype=np.int64)]

    def __iter__(self) -> Iterator[Tensor]:
        return (torch.from_numpy(b) for b in self._mine())

    def __len__(self) -> int:
        return len(self._mine())
