"""Per-task ranking metrics of a cost model (docs/pruner.md section 6), as torchmetrics `Metric` classes.

Every metric stores the raw (preds, labels, task_ids) of all records seen, as cat-lists, so DDP
sync gathers every record exactly once (`dist_reduce_fx="cat"`), and groups by task only in
`compute()` (like torchmetrics' RetrievalMetric). A task's value is computed on that task's records,
then the tasks are averaged weighted by their number of records (docs/pruner.md section 6). Task ids must be
globally consistent across processes (the batch's `task` field is).

"Record order" below is the order in which records were passed to `update` (after a DDP sync:
rank 0's records, then rank 1's, ...). It only matters where the definitions break ties by it.

`compute()` is vectorized with no Python loop over tasks or records: stable sorts by (task, key)
(`task_order`: one int64 sort per key), padded (tasks x k) matrices for the top-k metrics, and a
wavelet-tree inversion count (O(N log n_max), see `_inversions`) for the pairwise metrics, so
there is no n x n pair matrix and a task of 10^5 records is fine. Records are stored and sorted as
float32 (the metric's dtype), sums are float64. An empty metric computes NaN (torchmetrics warns).

Policies (documented per class): a single-record task scores 0.5 pairwise accuracy, 1.0 peak score,
1.0 top-k recall and 0.0 Kendall tau; it still counts with weight 1.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric, MetricCollection
from torchmetrics.utilities import dim_zero_cat

from pruner_models.losses import rank_within_task, task_groups, task_order


def _run_ids(*sorted_keys: Tensor) -> Tensor:
    """Id (0, 1, ...) of each maximal run of equal key tuples in already sorted keys: (N,) int64."""
    n = sorted_keys[0].numel()
    change = torch.zeros(n, dtype=torch.bool, device=sorted_keys[0].device)
    for key in sorted_keys:
        change[1:] |= key[1:] != key[:-1]
    return change.cumsum(0)


def _tied_pairs(sorted_group: Tensor, runs: Tensor, n_tasks: int) -> Tensor:
    """Per task, the number of unordered pairs within runs of equal keys: (T,) int64.

    Args:
        sorted_group: (N,) int64 group of each position of an order sorted by (group, keys...).
        runs: (N,) int64 run ids of that order (`_run_ids` of the group and the keys).
        n_tasks: T.
    """
    run_size = torch.bincount(runs)
    run_group = torch.zeros_like(run_size).scatter_(0, runs, sorted_group)
    pairs = run_size * (run_size - 1) // 2
    return torch.zeros(n_tasks, dtype=torch.long, device=runs.device).index_add(0, run_group, pairs)


def _inversions(values: Tensor, sizes: Tensor) -> Tensor:
    """Per task, the number of positions a < b of the task with values[a] > values[b] (strictly).

    A wavelet-tree pass over the bits of `values`, most significant first: the positions of each
    task are kept stably partitioned into buckets of equal higher bits (sequence order kept inside a
    bucket), and a pair is an inversion exactly when, at the first bit where the two values differ
    (same bucket), the earlier one has a 1 and the later one a 0. So each level adds, for every
    0-bit position, the number of earlier 1-bits in its bucket (a segmented cumsum), then splits
    every bucket into its 0s and 1s. The buckets start as the task segments, so values are only
    compared within a task and the number of levels is log2 of the largest task, not of N.
    O(N log n_max) with cumsums and scatters only: no sort and no n x n pair matrix.

    Args:
        values: (N,) non-negative int64, the records sorted by task (task segments in group order),
            in sequence order within a task (within-task ranks, so a few bits suffice).
        sizes: (T,) int64 records per task.

    Returns:
        (T,) int64 inversion counts.
    """
    n_tasks = sizes.numel()
    n = values.numel()
    if n < 2:
        return torch.zeros(n_tasks, dtype=torch.long, device=values.device)
    group = torch.repeat_interleave(torch.arange(n_tasks, device=values.device), sizes)
    index = torch.arange(n, device=values.device)
    start = (sizes.cumsum(0) - sizes)[group]
    end = start + sizes[group]
    per_bucket = torch.zeros(n, dtype=torch.long, device=values.device)
    for bit in reversed(range(int(values.max()).bit_length())):
        ones = (values >> bit) & 1
        is_one = ones.bool()
        before = ones.cumsum(0) - ones
        at_start = before.index_select(0, start)
        ones_before = before - at_start
        per_bucket.index_add_(0, start, ones_before.masked_fill(is_one, 0))
        last = end - 1
        split = end - (before.index_select(0, last) + ones.index_select(0, last) - at_start)
        target = torch.where(is_one, split + ones_before, index - ones_before)
        start = torch.where(is_one, split, start)
        end = torch.where(is_one, end, split)
        values, start, end = (torch.empty_like(x).scatter_(0, target, x) for x in (values, start, end))
    # A bucket never leaves its task's segment, so its start position names the task.
    return torch.zeros(n_tasks, dtype=torch.long, device=values.device).index_add_(0, group, per_bucket)


class _TaskGroupedMetric(Metric):
    """Keeps every record's (pred, label, task id); subclasses score each task in `_task_scores`."""

    is_differentiable = False
    full_state_update = False
    higher_is_better = True

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        # All three states share the metric's float dtype (task ids too, exact up to 2^24 for
        # float32): torchmetrics syncs a rank that saw no record as an empty tensor of that dtype,
        # and gloo/NCCL all_gather needs the same dtype on every rank.
        self.add_state("preds", default=[], dist_reduce_fx="cat")
        self.add_state("labels", default=[], dist_reduce_fx="cat")
        self.add_state("task_ids", default=[], dist_reduce_fx="cat")

    def update(self, preds: Tensor, labels: Tensor, task_ids: Tensor) -> None:
        """Append a batch of records.

        Args:
            preds: (B,) float scores (higher = predicted faster).
            labels: (B,) float normalized throughput (higher = faster).
            task_ids: (B,) integer task ids, consistent across processes.
        """
        if preds.dim() != 1 or labels.shape != preds.shape or task_ids.shape != preds.shape:
            raise ValueError(
                f"preds, labels and task_ids must be 1-D of one length, got shapes "
                f"{tuple(preds.shape)}, {tuple(labels.shape)}, {tuple(task_ids.shape)}"
            )
        if task_ids.is_floating_point() or task_ids.is_complex() or task_ids.dtype == torch.bool:
            raise TypeError(f"task_ids must be an integer tensor, got dtype {task_ids.dtype}")
        exact = int(2 / torch.finfo(self.dtype).eps)
        if task_ids.numel() and task_ids.abs().max() > exact:
            raise ValueError(
                f"task_ids must lie within +-{exact} (stored exactly as {self.dtype}), got max |id| "
                f"{int(task_ids.abs().max())}; use dense task indices"
            )
        self.preds.append(preds.detach().to(self.dtype))
        self.labels.append(labels.detach().to(self.dtype))
        self.task_ids.append(task_ids.detach().to(self.dtype))

    def _records(self) -> tuple[Tensor, Tensor, Tensor]:
        """All records in record order: preds, labels (N,) float and task_ids (N,) int64."""
        if isinstance(self.task_ids, list) and not self.task_ids:
            empty = torch.zeros(0, dtype=self.dtype, device=self.device)
            return empty, empty, empty.long()
        return dim_zero_cat(self.preds), dim_zero_cat(self.labels), dim_zero_cat(self.task_ids).long()

    def compute(self) -> Tensor:
        """Record-weighted mean over tasks of the per-task values: () float64 (NaN when empty)."""
        sizes, scores = self.compute_per_task()
        if sizes.numel() == 0:
            return torch.tensor(float("nan"), dtype=torch.float64, device=scores.device)
        return (scores * sizes).sum() / sizes.sum()

    def compute_per_task(self) -> tuple[Tensor, Tensor]:
        """Each task's records (T,) int64 and value (T,) float64, tasks in ascending id order.

        The records this process holds (no DDP sync: `compute` is the synced, combined value).
        """
        preds, labels, task = self._records()
        if task.numel() == 0:
            return task, preds.double()
        group, sizes = task_groups(task)
        return sizes, self._task_scores(preds, labels, group, sizes).double()

    def _task_scores(self, preds: Tensor, labels: Tensor, group: Tensor, sizes: Tensor) -> Tensor:
        """Per-task values (T,) from all records (N,) (metric dtype), dense groups (N,), sizes (T,)."""
        raise NotImplementedError


def _positive_int(k: int) -> int:
    """`k` of a top-k metric, checked."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    return k


class PairwiseAccuracy(_TaskGroupedMetric):
    """Pairwise comparison accuracy (TenSet), taken literally from docs/pruner.md section 6.

    Per task with n records in record order, over unordered pairs i < j, a pair is correct when
    [pred_i > pred_j] == [label_i > label_j]; accuracy = correct / (n (n-1) / 2); 0.5 when n <= 1.

    Ties, read literally (as TenSet's `metric_pairwise_comp_accuracy` does): a pair with equal labels
    is correct iff pred_i <= pred_j (the EARLIER record is not predicted faster); a pair with equal
    predictions and different labels is correct iff label_i < label_j; a pair tied in both is
    correct. So only tied pairs depend on record order (a label-tied pair with different predictions
    is right for one of the two orders), and a constant predictor does not score 1.

    Computed as 1 - inversions / pairs, with both keys tie-broken by record order (which makes the
    literal definition a concordance count of two permutations).
    """

    def _task_scores(self, preds: Tensor, labels: Tensor, group: Tensor, sizes: Tensor) -> Tensor:
        order = task_order(preds, group)
        label_rank = rank_within_task(labels, group, sizes, descending=False)
        wrong = _inversions(label_rank.index_select(0, order), sizes)
        pairs = sizes * (sizes - 1) // 2
        accuracy = 1.0 - wrong.double() / pairs.clamp_min(1).double()
        return torch.where(sizes <= 1, torch.full_like(accuracy, 0.5), accuracy)


class PeakScore(_TaskGroupedMetric):
    """Average peak score@k (TenSet): how close the model's top-k picks get to the task's best.

    Per task: order the records by prediction descending (ties: earlier record first); for
    i = 1..k, peak_i = max label of the first i records / the task's best label; the score is the
    mean of peak_1..peak_k. A task with n < k records: its first i > n records are all n records,
    so peak_i = 1 for i > n (the natural reading of "top i"). A task whose best label is <= 0
    (every measurement failed) scores 1.0: every pick is as good as the best.

    Args:
        k: number of top predictions (k=1 gives peak@1).
        kwargs: forwarded to `torchmetrics.Metric`.
    """

    def __init__(self, k: int = 1, **kwargs) -> None:
        super().__init__(**kwargs)
        self.k = _positive_int(k)

    def _task_scores(self, preds: Tensor, labels: Tensor, group: Tensor, sizes: Tensor) -> Tensor:
        n_tasks = sizes.numel()
        labels = labels.double()
        position = rank_within_task(preds, group, sizes)
        picked = position < self.k
        top = torch.full((n_tasks, self.k), float("-inf"), dtype=labels.dtype, device=labels.device)
        top[group[picked], position[picked]] = labels[picked]
        running = top.cummax(dim=1).values
        best = torch.full((n_tasks,), float("-inf"), dtype=labels.dtype, device=labels.device)
        best = best.scatter_reduce(0, group, labels, reduce="amax")
        ratio = (running / best.clamp_min(torch.finfo(labels.dtype).tiny)[:, None]).mean(dim=1)
        return torch.where(best > 0, ratio, torch.ones_like(ratio))


class TopKRecall(_TaskGroupedMetric):
    """Top-k recall: |predicted top-k intersect true top-k| / k, per task.

    Predicted top-k: the k highest predictions (ties: earlier record first). True top-k under label
    ties is not unique; this takes the most favourable valid choice, i.e. records tied with the
    k-th best label are interchangeable: hits = #(picked with label > v) + min(#(picked with
    label == v), k - #(all with label > v)), v = the task's k-th best label. So a pick that is as
    good as a true top-k record is never counted as a miss, and the value does not depend on record
    order through label ties. A task with n < k records uses k = n (scores 1.0).

    Args:
        k: size of both top sets.
        kwargs: forwarded to `torchmetrics.Metric`.
    """

    def __init__(self, k: int = 5, **kwargs) -> None:
        super().__init__(**kwargs)
        self.k = _positive_int(k)

    def _task_scores(self, preds: Tensor, labels: Tensor, group: Tensor, sizes: Tensor) -> Tensor:
        n_tasks = sizes.numel()
        k = sizes.clamp_max(self.k)
        label_position = rank_within_task(labels, group, sizes)
        kth = label_position == k[group] - 1
        threshold = torch.zeros(n_tasks, dtype=labels.dtype, device=labels.device)
        threshold[group[kth]] = labels[kth]
        above = labels > threshold[group]
        tied = labels == threshold[group]
        picked = rank_within_task(preds, group, sizes) < self.k

        def per_task(mask: Tensor) -> Tensor:
            return torch.zeros(n_tasks, dtype=torch.long, device=labels.device).index_add(0, group, mask.long())

        hits = per_task(picked & above) + torch.minimum(per_task(picked & tied), k - per_task(above))
        return hits.double() / k.double()


class KendallTau(_TaskGroupedMetric):
    """Kendall rank correlation tau-b (scipy's default) between predictions and labels, per task.

    tau_b = (n_c - n_d) / sqrt((n0 - n_p) (n0 - n_l)) with n0 = n(n-1)/2 pairs, n_c / n_d concordant
    / discordant pairs (pairs tied in either are neither), n_p / n_l pairs tied in prediction /
    label. When the denominator is 0 (n <= 1, or constant predictions or labels, where scipy gives
    NaN) the task scores 0.0: no evidence of correlation.
    """

    def _task_scores(self, preds: Tensor, labels: Tensor, group: Tensor, sizes: Tensor) -> Tensor:
        n_tasks = sizes.numel()
        by_label = task_order(labels, group)
        group_by_label = group.index_select(0, by_label)
        label_runs = _run_ids(group_by_label, labels.index_select(0, by_label))
        first_run = label_runs[sizes.cumsum(0) - sizes]
        dense_label = torch.empty_like(group)
        dense_label[by_label] = label_runs - first_run.index_select(0, group_by_label)
        by_label_first = torch.argsort(labels, stable=True)
        order = by_label_first[task_order(preds[by_label_first], group[by_label_first])]
        group_sorted, preds_sorted, labels_sorted, dense_sorted = (
            x.index_select(0, order) for x in (group, preds, labels, dense_label)
        )
        discordant = _inversions(dense_sorted, sizes)
        pairs = sizes * (sizes - 1) // 2
        tied_pred = _tied_pairs(group_sorted, _run_ids(group_sorted, preds_sorted), n_tasks)
        tied_both = _tied_pairs(group_sorted, _run_ids(group_sorted, preds_sorted, labels_sorted), n_tasks)
        tied_label = _tied_pairs(group_by_label, label_runs, n_tasks)
        concordant = pairs - tied_pred - tied_label + tied_both - discordant
        denominator = ((pairs - tied_pred).double() * (pairs - tied_label).double()).sqrt()
        tau = (concordant - discordant).double() / denominator.clamp_min(1.0)
        return torch.where(denominator > 0, tau, torch.zeros_like(tau))


class LabelRMSE(_TaskGroupedMetric):
    """Root mean squared error between prediction and normalized label.

    The record-weighted mean over tasks of per-task mean squared errors is the plain mean over all
    records; the root is taken last (docs/pruner.md section 6). Only meaningful for models trained to predict the
    label (the MSE loss); ranking-loss scores are not calibrated.
    """

    higher_is_better = False

    def compute(self) -> Tensor:
        """sqrt(mean over records of (pred - label)^2): () float64 (NaN when empty)."""
        preds, labels, _ = self._records()
        return ((preds.double() - labels.double()) ** 2).mean().sqrt()


def ranking_metrics(prefix: str = "") -> MetricCollection:
    """The standard metric set, keyed f"{prefix}{name}".

    Names: pairwise_acc, peak@1, peak@5, top5_recall, kendall_tau, rmse. All six keep identical
    states, so MetricCollection's compute groups store the records once. Use one collection per
    stage (train / val / test).

    Args:
        prefix: prepended to every name, e.g. "val_" or "val/".
    """
    return MetricCollection(
        {
            "pairwise_acc": PairwiseAccuracy(),
            "peak@1": PeakScore(k=1),
            "peak@5": PeakScore(k=5),
            "top5_recall": TopKRecall(k=5),
            "kendall_tau": KendallTau(),
            "rmse": LabelRMSE(),
        },
        prefix=prefix,
    )
