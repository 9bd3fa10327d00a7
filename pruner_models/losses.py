"""Ranking losses computed within each task's records of a batch.

A label is a per-task throughput ratio (best latency of the task / latency, see `data/labels.py`),
so labels of different tasks are not comparable: every loss here compares (or averages) records of
the same task only, giving one loss per task, then reduces the per-task losses over the tasks of the
batch. Batches hold a few whole task groups (the DataModule's task-grouped batches), records of a
task need not be contiguous.

All losses share one signature, `loss(preds, labels, task, reduction="mean") -> scalar`:
    preds: (B,) float, model scores (higher = faster).
    labels: (B,) float, normalized throughput in [0, 1].
    task: (B,) integer task ids (any values; only equality matters).
    reduction: "mean" averages the per-task losses over the tasks that have a loss (for the pair
        losses: tasks with at least one pair of different labels; single-record tasks and tasks
        whose labels are all equal contribute nothing and are not counted), so the loss scale does
        not depend on how many tasks a batch happens to hold; "sum" adds them (the original summed
        over one list, see `lambda_rank_loss`). A batch without any pair gives 0 (with a gradient
        of zeros, never NaN).

Pairs are enumerated per task block (O(sum of squared task sizes) memory, no Python loop over
records or tasks), so a batch of 2048 records in a few tasks is a few million pair entries at most.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

LossName = Literal["lambdarank", "ranknet", "mse"]
"""The names accepted by `LOSSES` (use as the type of a LightningCLI `loss:` argument)."""

Reduction = Literal["mean", "sum"]

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
        group: (N,) int64 dense group index (from `task_groups`).
        sizes: (T,) int64 group sizes.
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


def _ordered_pairs(labels: Tensor, group: Tensor, sizes: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Same-task pairs (i, j) with labels[i] > labels[j] strictly (label ties give no pair).

    Returns:
        left, right, pair_group: (P,) int64 records i and j and their task group.
    """
    left, right = same_task_pairs(group, sizes)
    keep = labels.index_select(0, left) > labels.index_select(0, right)
    left, right = left.masked_select(keep), right.masked_select(keep)
    return left, right, group.index_select(0, left)


def _pair_gather(values: Tensor, left: Tensor, right: Tensor) -> tuple[Tensor, Tensor]:
    return values.index_select(0, left), values.index_select(0, right)


def lambda_rank_loss(preds: Tensor, labels: Tensor, task: Tensor, reduction: Reduction = "mean") -> Tensor:
    """LambdaRank: NDCG-weighted pairwise logistic loss, per task (spec pam.md section 4).

    Within a task: rank_i is the 1-based position of record i when the task's records are sorted
    by prediction descending (prediction ties: earlier record first); G = (2^y - 1) / maxDCG with
    maxDCG = sum over the task's labels sorted descending of (2^y - 1) / log2(1 + position)
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

    Returns:
        () scalar loss.
    """
    _check_inputs(preds, labels, task)
    group, sizes = task_groups(task)
    with torch.no_grad():
        rank = rank_within_task(preds.detach(), group, sizes) + 1
        ideal_rank = rank_within_task(labels, group, sizes) + 1
        gain = torch.pow(2.0, labels) - 1
        max_dcg = torch.zeros(sizes.numel(), dtype=gain.dtype, device=gain.device)
        max_dcg = max_dcg.index_add(0, group, gain / torch.log2(1.0 + ideal_rank.to(gain.dtype)))
        g = gain / max_dcg.clamp_min(_MAX_DCG_EPS).index_select(0, group)
        discount = 1.0 / torch.log2(1.0 + rank.to(gain.dtype))
    left, right, pair_group = _ordered_pairs(labels, group, sizes)
    d_left, d_right = _pair_gather(discount, left, right)
    g_left, g_right = _pair_gather(g, left, right)
    s_left, s_right = _pair_gather(preds, left, right)
    weight = ((d_left - d_right).abs() * (g_left - g_right).abs()).to(preds.dtype)
    pair_loss = -weight * F.logsigmoid(s_left - s_right) / math.log(2.0)
    per_task = torch.zeros(sizes.numel(), dtype=preds.dtype, device=preds.device).index_add(0, pair_group, pair_loss)
    has_pair = torch.bincount(pair_group, minlength=sizes.numel()) > 0
    return _reduce(per_task, has_pair, reduction)


def ranknet_loss(preds: Tensor, labels: Tensor, task: Tensor, reduction: Reduction = "mean") -> Tensor:
    """RankNet: logistic loss on every same-task pair with y_i > y_j, unweighted.

    loss_task = mean over the task's pairs of -log(sigmoid(s_i - s_j)) (natural log, i.e. binary
    cross-entropy with target "i is faster"); the per-pair mean keeps a large task from dominating.
    Label ties give no pair. Per-task losses are reduced with `reduction` (module docstring).

    Args:
        preds: (B,) float scores. labels: (B,) float in [0, 1]. task: (B,) integer task ids.
        reduction: "mean" or "sum" over tasks.

    Returns:
        () scalar loss.
    """
    _check_inputs(preds, labels, task)
    group, sizes = task_groups(task)
    left, right, pair_group = _ordered_pairs(labels, group, sizes)
    n_tasks = sizes.numel()
    s_left, s_right = _pair_gather(preds, left, right)
    pair_loss = -F.logsigmoid(s_left - s_right)
    per_task_sum = torch.zeros(n_tasks, dtype=preds.dtype, device=preds.device).index_add(0, pair_group, pair_loss)
    n_pairs = torch.bincount(pair_group, minlength=n_tasks)
    return _reduce(per_task_sum / n_pairs.clamp_min(1), n_pairs > 0, reduction)


def mse_loss(preds: Tensor, labels: Tensor, task: Tensor, reduction: Reduction = "mean") -> Tensor:
    """Mean squared error between score and normalized label, per task.

    loss_task = mean over the task's records of (s - y)^2; every task (single-record ones included)
    counts in the "mean" over tasks. The model then predicts the label itself, so this is the only
    loss whose scores are calibrated (comparable across tasks).

    Args:
        preds: (B,) float scores. labels: (B,) float in [0, 1]. task: (B,) integer task ids.
        reduction: "mean" or "sum" over tasks.

    Returns:
        () scalar loss.
    """
    _check_inputs(preds, labels, task)
    group, sizes = task_groups(task)
    squared = (preds - labels.to(preds.dtype)) ** 2
    per_task_sum = torch.zeros(sizes.numel(), dtype=preds.dtype, device=preds.device).index_add(0, group, squared)
    return _reduce(per_task_sum / sizes.to(preds.dtype), sizes > 0, reduction)


LOSSES: dict[str, Callable[..., Tensor]] = {
    "lambdarank": lambda_rank_loss,
    "ranknet": ranknet_loss,
    "mse": mse_loss,
}
"""Loss by name (`LossName`); every entry has the signature `(preds, labels, task, reduction="mean")`."""
