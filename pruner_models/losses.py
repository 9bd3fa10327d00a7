"""Ranking losses computed within each task's records of a batch.

(Over 400 lines on purpose: every loss has a dense and a sparse computation that must stay equal,
built on the within-task sort and pair primitives here; keeping them in one file keeps the two
paths side by side.)

A label is a per-task throughput ratio (best latency of the task / latency, see `data/labels.py`),
so labels of different tasks are not comparable: every loss here compares (or averages) records of
the same task only, giving one loss per task, then reduces the per-task losses over the tasks of the
batch. Batches hold a few whole task groups (the DataModule's task-grouped batches), records of a
task need not be contiguous.

All losses share one signature, `loss(preds, labels, task, reduction="mean", *, dense=None) -> scalar`:
    preds: (B,) float, model scores (higher = faster).
    labels: (B,) float, normalized throughput in [0, 1].
    task: (B,) integer task ids (any values; only equality matters).
    reduction: "mean" averages the per-task losses over the tasks that have a loss (for the pair
        losses: tasks with at least one pair of different labels; single-record tasks and tasks
        whose labels are all equal contribute nothing and are not counted), so the loss scale does
        not depend on how many tasks a batch happens to hold; "sum" adds them (the original summed
        over one list, see `lambda_rank_loss`). A batch without any pair gives 0 (with a gradient
        of zeros, never NaN).
    dense: which of the two computations to use (None: `use_dense(task)`).

Two computations with the same definitions and tie rules, equal up to floating-point summation
order; both rank by one stable sort per key (`rank_within_task`) and reduce per task by `index_add`:
* dense (training batches on an accelerator): a (B, B) same-task mask; a task's slot is its first
  record's index, and the pairs are a (B, B) mask. No operation needs a value on the host (no
  `unique`, `bincount`, boolean indexing, data-dependent sizes or `.item()`), so on CUDA the CPU
  keeps queueing kernels while the GPU runs: a training step of the small PAM is launch-bound, and
  every host-device synchronization would stall it. Memory O(B^2): peak about 0.4 GiB for
  lambdarank's forward + backward at B = 4096 in float32.
* sparse (the CPU, and batches over DENSE_MAX_BATCH): groups from `torch.unique`, the pairs
  enumerated per task block (O(sum of squared task sizes) memory, no Python loop over records or
  tasks). It synchronizes a few times per call on CUDA (the number of tasks and of pairs), but
  touches only same-task pairs where the masks span all B^2, less arithmetic when a batch holds
  several tasks, which is what counts on the CPU.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

LossName = Literal["lambdarank", "ranknet", "mse", "lambdarank+mse", "listnet", "lambdarank+listnet"]
"""The names accepted by `LOSSES` (use as the type of a LightningCLI `loss:` argument)."""

Reduction = Literal["mean", "sum"]

DENSE_MAX_BATCH = 4096
"""Largest batch that `use_dense` sends to the dense, sync-free computation (module docstring)."""

_MAX_DCG_EPS = 1e-10
"""Floor of a task's ideal DCG (a task whose labels are all 0), as in TenSet's LambdaRankLoss."""


def lexsort(*keys: Tensor) -> Tensor:
    """Stable permutation sorting by several keys, the LAST key primary (like `numpy.lexsort`).

    Args:
        keys: (N,) tensors, least significant first. Equal keys keep their input order.

    Returns:
        (N,) int64 permutation.
    """
    if not keys:
        raise ValueError("lexsort needs at least one key, got none")
    perm = torch.arange(keys[0].numel(), device=keys[0].device)
    for key in keys:
        perm = perm[torch.argsort(key[perm], stable=True)]
    return perm


def task_order(key: Tensor, group: Tensor, descending: bool = False) -> Tensor:
    """Stable permutation sorting records by (group, key); equal keys keep record order.

    A float32 (or narrower) key takes ONE int64 sort: its bits mapped to an order-preserving
    integer in [0, 2^32) (negative floats bit-flipped, -0.0 folded into 0.0) under the group in the
    high 32 bits. Other keys (float64, integers) take two stable sorts (`lexsort`).

    Args:
        key: (N,) sort key. group: (N,) int64 dense group index (< 2^31).
        descending: sort `key` from high to low (ties still in record order).

    Returns:
        (N,) int64 permutation.
    """
    if descending:
        key = -key
    if key.dtype in (torch.float32, torch.float16, torch.bfloat16):
        bits = (key.float() + 0.0).view(torch.int32).long()
        ordered = torch.where(bits < 0, -1 - bits, bits + 2**31)
        return torch.argsort(group * 2**32 + ordered, stable=True)
    return lexsort(key, group)


def task_groups(task: Tensor) -> tuple[Tensor, Tensor]:
    """Dense group index of each record and the size of each group.

    Args:
        task: (N,) integer task ids.

    Returns:
        group: (N,) int64 in 0..T-1 (groups ordered by task id); sizes: (T,) int64 records per group.
    """
    _, group, sizes = torch.unique(task, return_inverse=True, return_counts=True)
    return group, sizes


def rank_within_task(key: Tensor, group: Tensor, sizes: Tensor, descending: bool = True) -> Tensor:
    """0-based position of each record when its task's records are sorted by `key`.

    Ties keep record order (the earlier record gets the smaller position).

    Args:
        key: (N,) sort key.
        group: (N,) int64 group index (from `task_groups`; any index < 2^31 works, groups may be
            empty). sizes: (T,) int64 records of each group.
        descending: sort `key` from high to low.

    Returns:
        (N,) int64 position in 0..size-1 of the record's group.
    """
    order = task_order(key, group, descending)
    starts = sizes.cumsum(0) - sizes
    rank = torch.empty_like(group)
    starts_sorted = starts.index_select(0, group.index_select(0, order))
    rank[order] = torch.arange(group.numel(), device=group.device) - starts_sorted
    return rank


def same_task_pairs(group: Tensor, sizes: Tensor) -> tuple[Tensor, Tensor]:
    """All ordered pairs (i, j) of records of the same task, i == j included.

    Args:
        group: (N,) int64 dense group index; sizes: (T,) int64 group sizes.

    Returns:
        left, right: (P,) int64 record indices, P = sum over tasks of size**2.
    """
    order = torch.argsort(group, stable=True)
    starts = sizes.cumsum(0) - sizes
    partners = sizes.index_select(0, group.index_select(0, order))
    n_pairs = int((sizes * sizes).sum())
    left = order.repeat_interleave(partners, output_size=n_pairs)
    run_start = (partners.cumsum(0) - partners).repeat_interleave(partners, output_size=n_pairs)
    within = torch.arange(n_pairs, device=group.device) - run_start
    right = order.index_select(0, starts.index_select(0, group.index_select(0, left)) + within)
    return left, right


def _check_inputs(preds: Tensor, labels: Tensor, task: Tensor) -> None:
    if preds.dim() != 1 or labels.shape != preds.shape or task.shape != preds.shape:
        raise ValueError(
            f"preds, labels and task must be 1-D of one length, got shapes "
            f"{tuple(preds.shape)}, {tuple(labels.shape)}, {tuple(task.shape)}"
        )
    if not preds.is_floating_point() or not labels.is_floating_point():
        raise TypeError(f"preds and labels must be floating point, got {preds.dtype} and {labels.dtype}")
    if task.is_floating_point() or task.is_complex() or task.dtype == torch.bool:
        raise TypeError(f"task must be an integer tensor of task ids, got dtype {task.dtype}")


def _reduce(per_task: Tensor, has_loss: Tensor, reduction: str) -> Tensor:
    """Mean over the tasks flagged in `has_loss` (0 when none), or the plain sum."""
    if reduction == "sum":
        return per_task.sum()
    if reduction == "mean":
        return per_task.sum() / has_loss.sum().clamp_min(1)
    raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")


class _Pairs(ABC):
    """The same-task pairs (i, j) with labels[i] > labels[j] strictly (label ties give no pair).

    `gather` maps a per-record (B,) tensor to its values at i and at j; elementwise arithmetic on
    the two gives one value per pair in the path's layout, which `per_task_sum` reduces per task.
    """

    @abstractmethod
    def gather(self, values: Tensor) -> tuple[Tensor, Tensor]:
        """Values of the pairs' records i and j (broadcastable to the pair layout)."""

    @abstractmethod
    def per_task_sum(self, pair_values: Tensor) -> Tensor:
        """(G,) sum of `pair_values` over each task slot's pairs."""

    @abstractmethod
    def per_task_count(self) -> Tensor:
        """(G,) int64 number of pairs of each task slot."""


class _PairList(_Pairs):
    """The pairs as index lists: left, right, pair_group (P,) int64; `num_groups` task slots."""

    def __init__(self, left: Tensor, right: Tensor, pair_group: Tensor, num_groups: int) -> None:
        self.left, self.right, self.pair_group, self.num_groups = left, right, pair_group, num_groups

    def gather(self, values: Tensor) -> tuple[Tensor, Tensor]:
        return values.index_select(0, self.left), values.index_select(0, self.right)

    def per_task_sum(self, pair_values: Tensor) -> Tensor:
        return pair_values.new_zeros(self.num_groups).index_add(0, self.pair_group, pair_values)

    def per_task_count(self) -> Tensor:
        return torch.bincount(self.pair_group, minlength=self.num_groups)


class _PairMask(_Pairs):
    """The pairs as a (B, B) bool mask (row i, column j); per-record rows go to the task slot `group`."""

    def __init__(self, mask: Tensor, group: Tensor) -> None:
        self.mask, self.group = mask, group

    def gather(self, values: Tensor) -> tuple[Tensor, Tensor]:
        return values[:, None], values[None, :]

    def per_task_sum(self, pair_values: Tensor) -> Tensor:
        # where, not a product with the mask: the masked entries get no gradient at all.
        rows = torch.where(self.mask, pair_values, 0).sum(1)
        return rows.new_zeros(self.group.numel()).index_add(0, self.group, rows)

    def per_task_count(self) -> Tensor:
        return self.group.new_zeros(self.group.numel()).index_add(0, self.group, self.mask.sum(1))


class _Tasks(ABC):
    """The task grouping of a batch: `group` (B,) int64 task slot of each record in 0..G-1 and
    `sizes` (G,) int64 records per slot (slots may be empty: then their size is 0)."""

    group: Tensor
    sizes: Tensor

    def per_task_sum(self, values: Tensor) -> Tensor:
        """(G,) sum of the per-record (B,) `values` over each task slot."""
        return values.new_zeros(self.sizes.numel()).index_add(0, self.group, values)

    def rank(self, key: Tensor) -> Tensor:
        """(B,) int64 0-based position of each record in its task sorted by `key` descending
        (ties: the earlier record first). One sort; empty slots do not disturb the positions."""
        return rank_within_task(key, self.group, self.sizes)

    @abstractmethod
    def ordered_pairs(self, labels: Tensor) -> _Pairs:
        """The same-task pairs with labels[i] > labels[j]."""


class _SparseTasks(_Tasks):
    """Dense group index from `torch.unique` (G = number of tasks), pairs as index lists."""

    def __init__(self, task: Tensor) -> None:
        self.group, self.sizes = task_groups(task)

    def ordered_pairs(self, labels: Tensor) -> _PairList:
        left, right = same_task_pairs(self.group, self.sizes)
        keep = labels.index_select(0, left) > labels.index_select(0, right)
        left, right = left.masked_select(keep), right.masked_select(keep)
        return _PairList(left, right, self.group.index_select(0, left), self.sizes.numel())


class _DenseTasks(_Tasks):
    """(B, B) same-task mask; a task's slot is the index of its first record (G = B), so the number
    of tasks is never needed on the host."""

    def __init__(self, task: Tensor) -> None:
        self.same = task[:, None] == task[None, :]
        self.group = self.same.to(torch.uint8).argmax(1)  # argmax returns the first maximal index
        self.sizes = self.group.new_zeros(task.numel()).index_add(0, self.group, torch.ones_like(self.group))

    def ordered_pairs(self, labels: Tensor) -> _PairMask:
        return _PairMask(self.same & (labels[:, None] > labels[None, :]), self.group)


def use_dense(task: Tensor) -> bool:
    """The default path for a batch: dense off the CPU for B <= DENSE_MAX_BATCH (shape and device
    are host-side facts, so choosing syncs nothing)."""
    return task.device.type != "cpu" and task.numel() <= DENSE_MAX_BATCH


def _tasks(task: Tensor, dense: bool | None) -> _Tasks:
    """The grouping of `task` for the chosen path (None: `use_dense(task)`)."""
    return _DenseTasks(task) if (use_dense(task) if dense is None else dense) else _SparseTasks(task)


def lambda_rank_loss(
    preds: Tensor,
    labels: Tensor,
    task: Tensor,
    reduction: Reduction = "mean",
    *,
    dense: bool | None = None,
    gain_scale: float = 1.0,
    truncation: int = 0,
) -> Tensor:
    """LambdaRank: NDCG-weighted pairwise logistic loss, per task (docs/pruner.md section 1.4).

    Within a task: rank_i is the 1-based position of record i when the task's records are sorted
    by prediction descending (prediction ties: earlier record first); G = (2^(c y) - 1) / maxDCG with
    maxDCG = sum over the task's labels sorted descending of (2^(c y) - 1) / log2(1 + position)
    (floored at 1e-10); for each pair with y_i > y_j,
        w_ij = |1/log2(1 + rank_i) - 1/log2(1 + rank_j)| * |G_i - G_j|,
        loss_task = -sum_ij w_ij * log2(sigmoid(s_i - s_j)).
    The weights are constants (no gradient flows through the sort). Per-task losses are reduced
    with `reduction` (see the module docstring; "mean": over tasks with at least one pair).

    Differences from the original (TenSet's / Pruner's `LambdaRankLoss`): the original treated the
    whole 512-record batch as ONE list mixing tasks and returned the plain sum over its pairs (no
    normalization by pairs or lists); it clamped sigmoid at 1e-10, which zeroes the gradient of a
    badly ordered pair. Here pairs stay within a task, log-sigmoid keeps every pair's gradient
    finite and non-zero, and the default reduction averages over tasks ("sum" reproduces the
    original's per-list sum, with one list per task).

    Args:
        preds: (B,) float scores. labels: (B,) float in [0, 1]. task: (B,) integer task ids.
        reduction: "mean" or "sum" over tasks.
        dense: dense (B, B) masks without host syncs, or pair lists (None: `use_dense(task)`).
        gain_scale: c in the gain 2^(c y) - 1 (the original: 1). Labels are min latency / latency in
            (0, 1], so with c = 1 a task's best schedule gains 1 and one at 80% of its speed 0.74: the
            top is barely weighted above the rest. A larger c weights the pairs around a task's
            fastest schedules more (c = 8: 255 against 83).
        truncation: k > 0 weighs by NDCG@k (LightGBM's `lambdarank_truncation_level`): positions
            past k discount to 0, in the ranking by prediction and in maxDCG's ideal one, so a pair
            weighs only while one of its records is among the task's top k predictions (0: the
            whole list, as published).

    Returns:
        () scalar loss.
    """
    _check_inputs(preds, labels, task)
    if not gain_scale > 0:
        raise ValueError(f"gain_scale must be > 0, got {gain_scale!r}")
    if truncation < 0:
        raise ValueError(f"truncation must be >= 0 (0: none), got {truncation!r}")
    tasks = _tasks(task, dense)
    with torch.no_grad():
        rank = tasks.rank(preds.detach()) + 1
        ideal_rank = tasks.rank(labels) + 1
        gain = torch.pow(2.0, gain_scale * labels) - 1

        def discount_at(position: Tensor) -> Tensor:
            value = 1.0 / torch.log2(1.0 + position.to(gain.dtype))
            return torch.where(position <= truncation, value, 0.0) if truncation else value

        max_dcg = tasks.per_task_sum(gain * discount_at(ideal_rank))
        g = gain / max_dcg.clamp_min(_MAX_DCG_EPS).index_select(0, tasks.group)
        discount = discount_at(rank)
    pairs = tasks.ordered_pairs(labels)
    d_left, d_right = pairs.gather(discount)
    g_left, g_right = pairs.gather(g)
    s_left, s_right = pairs.gather(preds)
    weight = ((d_left - d_right).abs() * (g_left - g_right).abs()).to(preds.dtype)
    pair_loss = -weight * F.logsigmoid(s_left - s_right) / math.log(2.0)
    return _reduce(pairs.per_task_sum(pair_loss), pairs.per_task_count() > 0, reduction)


def ranknet_loss(
    preds: Tensor, labels: Tensor, task: Tensor, reduction: Reduction = "mean", *, dense: bool | None = None
) -> Tensor:
    """RankNet: logistic loss on every same-task pair with y_i > y_j, unweighted.

    loss_task = mean over the task's pairs of -log(sigmoid(s_i - s_j)) (natural log, i.e. binary
    cross-entropy with target "i is faster"); the per-pair mean keeps a large task from dominating.
    Label ties give no pair. Per-task losses are reduced with `reduction` (module docstring).

    Args:
        preds: (B,) float scores. labels: (B,) float in [0, 1]. task: (B,) integer task ids.
        reduction: "mean" or "sum" over tasks.
        dense: dense (B, B) masks without host syncs, or pair lists (None: `use_dense(task)`).

    Returns:
        () scalar loss.
    """
    _check_inputs(preds, labels, task)
    pairs = _tasks(task, dense).ordered_pairs(labels)
    s_left, s_right = pairs.gather(preds)
    per_task_sum = pairs.per_task_sum(-F.logsigmoid(s_left - s_right))
    n_pairs = pairs.per_task_count()
    return _reduce(per_task_sum / n_pairs.clamp_min(1), n_pairs > 0, reduction)


def mse_loss(
    preds: Tensor, labels: Tensor, task: Tensor, reduction: Reduction = "mean", *, dense: bool | None = None
) -> Tensor:
    """Mean squared error between score and normalized label, per task.

    loss_task = mean over the task's records of (s - y)^2; every task (single-record ones included)
    counts in the "mean" over tasks. The model then predicts the label itself, so this is the only
    loss whose scores are calibrated (comparable across tasks).

    Args:
        preds: (B,) float scores. labels: (B,) float in [0, 1]. task: (B,) integer task ids.
        reduction: "mean" or "sum" over tasks.
        dense: group through a (B, B) mask without host syncs, or by `torch.unique` (None:
            `use_dense(task)`).

    Returns:
        () scalar loss.
    """
    _check_inputs(preds, labels, task)
    tasks = _tasks(task, dense)
    per_task_sum = tasks.per_task_sum((preds - labels.to(preds.dtype)) ** 2)
    return _reduce(per_task_sum / tasks.sizes.clamp_min(1), tasks.sizes > 0, reduction)


def lambda_rank_mse_loss(
    preds: Tensor, labels: Tensor, task: Tensor, reduction: Reduction = "mean", *, dense: bool | None = None, **gain
) -> Tensor:
    """LambdaRank plus MSE, summed: the ranking loss orders each task's records, the regression on
    the normalized label pulls the fastest ones apart (on the H100 hold-outs MSE alone led peak@1 and
    LambdaRank alone led pairwise accuracy; docs/benchmarks.md, "Model quality"). `gain` (gain_scale)
    goes to `lambda_rank_loss`."""
    return lambda_rank_loss(preds, labels, task, reduction, dense=dense, **gain) + mse_loss(
        preds, labels, task, reduction, dense=dense
    )


LISTNET_TEMPERATURE = 0.1
"""ListNet's label temperature: a record at 80% of its task's best throughput gets exp(-2) = 0.14 of the
best one's target share."""


def listnet_loss(
    preds: Tensor,
    labels: Tensor,
    task: Tensor,
    reduction: Reduction = "mean",
    *,
    dense: bool | None = None,
    temperature: float = LISTNET_TEMPERATURE,
) -> Tensor:
    """ListNet (top-one probabilities): cross-entropy between softmax(labels / T) and softmax(scores)
    within each task. A small T puts the target's mass on the task's fastest records, so the loss
    spends itself on the top of each list rather than on every pair.

    loss_task = -sum_i softmax(y / T)_i log softmax(s)_i; tasks of one record give 0 and are not
    counted in the "mean". No host sync on either path (per-task max by `scatter_reduce`).

    Returns:
        () scalar loss.
    """
    _check_inputs(preds, labels, task)
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    tasks = _tasks(task, dense)
    group, slots = tasks.group, tasks.sizes.numel()

    def log_softmax(x: Tensor) -> Tensor:
        top = x.detach().new_full((slots,), -math.inf).scatter_reduce(0, group, x.detach(), "amax")
        shifted = x - top.index_select(0, group)
        return shifted - torch.log(tasks.per_task_sum(torch.exp(shifted))).index_select(0, group)

    target = torch.exp(log_softmax(labels.to(preds.dtype) / temperature))
    per_task = tasks.per_task_sum(-target * log_softmax(preds))
    return _reduce(per_task, tasks.sizes > 1, reduction)


def lambda_rank_listnet_loss(
    preds: Tensor, labels: Tensor, task: Tensor, reduction: Reduction = "mean", *, dense: bool | None = None, **gain
) -> Tensor:
    """LambdaRank plus ListNet, summed: pairs ordered over the whole list, and the top pulled out."""
    return lambda_rank_loss(preds, labels, task, reduction, dense=dense, **gain) + listnet_loss(
        preds, labels, task, reduction, dense=dense
    )


LOSSES: dict[str, Callable[..., Tensor]] = {
    "lambdarank": lambda_rank_loss,
    "ranknet": ranknet_loss,
    "mse": mse_loss,
    "lambdarank+mse": lambda_rank_mse_loss,
    "listnet": listnet_loss,
    "lambdarank+listnet": lambda_rank_listnet_loss,
}
"""Loss by name (`LossName`); every entry has the signature `(preds, labels, task, reduction="mean", *, dense=None)`,
and the LambdaRank ones also take `gain_scale` and `truncation` (`GAIN_LOSSES`)."""

GAIN_LOSSES = frozenset({"lambdarank", "lambdarank+mse", "lambdarank+listnet"})
"""The losses whose NDCG gain `gain_scale` sharpens and `truncation` cuts to the top k."""
