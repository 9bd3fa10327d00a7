"""Ranking losses against pure-Python references, with ties, single-record and constant tasks;
the dense (sync-free) computation against the pair lists, and its freedom from host syncs."""

from __future__ import annotations

import math
from typing import get_args

import numpy as np
import pytest
import torch
from references import per_task
from torch.utils._python_dispatch import TorchDispatchMode

from pruner_models.losses import (
    DENSE_MAX_BATCH,
    LOSSES,
    LossName,
    lambda_rank_loss,
    lexsort,
    mse_loss,
    rank_within_task,
    ranknet_loss,
    same_task_pairs,
    task_groups,
    task_order,
    use_dense,
)
from pruner_models.metrics import PairwiseAccuracy


def make_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Interleaved records of tasks with non-contiguous ids: ties in labels and predictions, a
    single-record task, a task whose labels are all equal and one whose labels are all 0."""
    gen = torch.Generator().manual_seed(seed)
    sizes = [1, 2, 5, 9, 17, 6, 4]
    ids = torch.randperm(1000, generator=gen)[: len(sizes)]
    task = torch.cat([torch.full((n,), int(i)) for i, n in zip(ids, sizes)])
    labels = torch.randint(0, 5, (len(task),), generator=gen).double() / 4
    labels[task == ids[5]] = 0.5
    labels[task == ids[6]] = 0.0
    preds = (torch.randn(len(task), generator=gen, dtype=torch.float64) * 2).round(decimals=1)
    perm = torch.randperm(len(task), generator=gen)
    return preds[perm], labels[perm], task[perm]


def log_sigmoid(x: float) -> float:
    return -math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x))


def ref_lambdarank_task(s: list[float], y: list[float], c: float = 1.0, k: int = 0) -> float | None:
    """docs/pruner.md section 1.4, literally (gain 2^(c y) - 1; the paper's c is 1; with k > 0, NDCG@k:
    positions past k discount to 0); None when the task has no pair with y_i > y_j."""
    n = len(s)
    by_pred = sorted(range(n), key=lambda i: -s[i])
    rank = {i: r + 1 for r, i in enumerate(by_pred)}
    ideal = sorted(y, reverse=True)

    def disc(r: int) -> float:
        return 0.0 if k and r > k else 1 / math.log2(1 + r)

    max_dcg = max(sum((2 ** (c * v) - 1) * disc(r + 1) for r, v in enumerate(ideal)), 1e-10)
    gain = [(2 ** (c * v) - 1) / max_dcg for v in y]
    total, pairs = 0.0, 0
    for i in range(n):
        for j in range(n):
            if y[i] > y[j]:
                w = abs(disc(rank[i]) - disc(rank[j])) * abs(gain[i] - gain[j])
                total += -w * log_sigmoid(s[i] - s[j]) / math.log(2)
                pairs += 1
    return total if pairs else None


def ref_ranknet_task(s, y):
    losses = [-log_sigmoid(s[i] - s[j]) for i in range(len(s)) for j in range(len(s)) if y[i] > y[j]]
    return sum(losses) / len(losses) if losses else None


def ref_mse_task(s, y):
    return sum((a - b) ** 2 for a, b in zip(s, y)) / len(s)


def reduce_ref(values: list[float | None], reduction: str) -> float:
    present = [v for v in values if v is not None]
    if reduction == "sum":
        return sum(present)
    return sum(present) / len(present) if present else 0.0


def ref_listnet_task(s, y, t=0.1):
    """-sum softmax(y / t) log softmax(s); None for a task of one record."""
    if len(s) < 2:
        return None
    target = [math.exp(v / t) for v in y]
    target = [v / sum(target) for v in target]
    top = max(s)
    log_z = top + math.log(sum(math.exp(v - top) for v in s))
    return -sum(p * (v - log_z) for p, v in zip(target, s))


REFERENCES = {
    "lambdarank": ref_lambdarank_task,
    "ranknet": ref_ranknet_task,
    "mse": ref_mse_task,
    "listnet": ref_listnet_task,
}


@pytest.mark.parametrize("name", sorted(REFERENCES))
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_loss_matches_reference(name, reduction, seed):
    preds, labels, task = make_batch(seed)
    got = LOSSES[name](preds, labels, task, reduction=reduction)
    groups = per_task(preds, labels, task)
    want = reduce_ref([REFERENCES[name](s, y) for s, y in groups.values()], reduction)
    assert got.dtype == torch.float64
    assert got.item() == pytest.approx(want, rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("c", [0.5, 4.0, 8.0])
@pytest.mark.parametrize("dense", [False, True])
def test_gain_scale_matches_reference(c, dense):
    preds, labels, task = make_batch(3)
    groups = per_task(preds, labels, task).values()
    want = reduce_ref([ref_lambdarank_task(s, y, c) for s, y in groups], "mean")
    got = LOSSES["lambdarank"](preds, labels, task, dense=dense, gain_scale=c)
    assert got.item() == pytest.approx(want, rel=1e-10, abs=1e-12)
    plain = LOSSES["lambdarank"](preds, labels, task, dense=dense)
    assert got.item() != pytest.approx(plain.item(), rel=1e-3)  # the scale changes the weights
    mixed = LOSSES["lambdarank+mse"](preds, labels, task, dense=dense, gain_scale=c)
    assert mixed.item() == pytest.approx(got.item() + LOSSES["mse"](preds, labels, task).item(), rel=1e-10)


@pytest.mark.parametrize("k", [1, 3, 6])
@pytest.mark.parametrize("dense", [False, True])
def test_truncation_matches_the_ndcg_at_k_reference(k, dense):
    preds, labels, task = make_batch(3)
    groups = per_task(preds, labels, task).values()
    want = reduce_ref([ref_lambdarank_task(s, y, 2.0, k) for s, y in groups], "mean")
    got = LOSSES["lambdarank"](preds, labels, task, dense=dense, gain_scale=2.0, truncation=k)
    assert got.item() == pytest.approx(want, rel=1e-10, abs=1e-12)
    mixed = LOSSES["lambdarank+mse"](preds, labels, task, dense=dense, truncation=k)
    plain = LOSSES["lambdarank"](preds, labels, task, dense=dense, truncation=k)
    assert mixed.item() == pytest.approx(plain.item() + LOSSES["mse"](preds, labels, task).item(), rel=1e-10)


def test_a_negative_truncation_is_refused():
    preds, labels, task = make_batch(1)
    with pytest.raises(ValueError, match="truncation must be >= 0"):
        LOSSES["lambdarank"](preds, labels, task, truncation=-1)


def test_gain_scale_weights_the_fastest_pairs_more():
    """A misordered pair at the top of a task costs more against one lower down as c grows."""
    labels = torch.tensor([1.0, 0.9, 0.5, 0.4], dtype=torch.float64)
    task = torch.zeros(4, dtype=torch.int64)
    top_swapped = torch.tensor([3.0, 4.0, 2.0, 1.0], dtype=torch.float64)
    low_swapped = torch.tensor([4.0, 3.0, 1.0, 2.0], dtype=torch.float64)

    def ratio(c: float) -> float:
        loss = LOSSES["lambdarank"]
        return (loss(top_swapped, labels, task, gain_scale=c) / loss(low_swapped, labels, task, gain_scale=c)).item()

    assert ratio(1.0) < ratio(4.0) < ratio(10.0)
    with pytest.raises(ValueError, match="gain_scale"):
        LOSSES["lambdarank"](top_swapped, labels, task, gain_scale=0.0)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_lambdarank_plus_mse_is_the_sum_of_both_references(reduction):
    """Each term reduced on its own (LambdaRank over tasks with a pair, MSE over every task)."""
    preds, labels, task = make_batch(4)
    groups = per_task(preds, labels, task).values()
    want = reduce_ref([ref_lambdarank_task(s, y) for s, y in groups], reduction)
    want += reduce_ref([ref_mse_task(s, y) for s, y in groups], reduction)
    got = LOSSES["lambdarank+mse"](preds, labels, task, reduction=reduction)
    assert got.item() == pytest.approx(want, rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_listnet_is_the_same_on_both_paths_and_adds_to_lambdarank(seed):
    preds, labels, task = make_batch(seed)
    preds.requires_grad_(True)
    dense, sparse = (LOSSES["listnet"](preds, labels, task, dense=d) for d in (True, False))
    assert dense.item() == pytest.approx(sparse.item(), rel=1e-10)
    (grad,) = torch.autograd.grad(dense, preds)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0
    both = LOSSES["lambdarank+listnet"](preds, labels, task, gain_scale=2.0)
    want = LOSSES["lambdarank"](preds, labels, task, gain_scale=2.0) + sparse
    assert both.item() == pytest.approx(want.item(), rel=1e-10)
    with pytest.raises(ValueError, match="temperature"):
        LOSSES["listnet"](preds, labels, task, temperature=0.0)


def test_registry_matches_config_names():
    assert set(LOSSES) == set(get_args(LossName))


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_gradient_matches_finite_differences(name):
    gen = torch.Generator().manual_seed(3)
    task = torch.tensor([4, 9, 4, 4, 9, 2, 4, 9])
    labels = torch.tensor([1.0, 0.5, 0.25, 0.75, 1.0, 1.0, 0.25, 0.5], dtype=torch.float64)
    preds = torch.randn(8, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda s: LOSSES[name](s, labels, task), (preds,))


def test_tasks_do_not_mix():
    """The sum over a two-task batch is the sum of each task alone: no cross-task pair."""
    preds, labels, task = make_batch(5)
    whole = lambda_rank_loss(preds, labels, task, reduction="sum")
    parts = sum(lambda_rank_loss(preds[task == t], labels[task == t], task[task == t], "sum") for t in task.unique())
    assert whole.item() == pytest.approx(parts.item(), rel=1e-12)


@pytest.mark.parametrize("name", ["lambdarank", "ranknet"])
def test_no_pairs_gives_zero_loss_and_zero_gradient(name):
    """Single-record tasks and all-equal labels form no pair: loss 0, finite zero gradient."""
    preds = torch.tensor([0.3, -1.0, 2.0, 2.0], requires_grad=True)
    labels = torch.tensor([1.0, 0.5, 0.5, 0.5])
    task = torch.tensor([0, 1, 2, 2])
    loss = LOSSES[name](preds, labels, task)
    loss.backward()
    assert loss.item() == 0.0
    assert torch.equal(preds.grad, torch.zeros(4))


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_extreme_scores_stay_finite(name):
    preds = torch.tensor([1e4, -1e4, 0.0, 3e4, -3e4], requires_grad=True)
    labels = torch.tensor([0.0, 1.0, 0.5, 0.2, 0.9])
    task = torch.zeros(5, dtype=torch.long)
    loss = LOSSES[name](preds, labels, task)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(preds.grad).all()
    if name == "listnet":  # listwise: the record that takes the whole softmax (3e4) goes down, the best up
        assert preds.grad[1] < 0 < preds.grad[3], "the wrong top of the list keeps a useful gradient"
    elif name != "mse":
        assert preds.grad[1] < 0 < preds.grad[0], "a badly ordered pair keeps a useful gradient"


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_gradient_pushes_the_better_record_up(name):
    preds = torch.full((2,), 0.75, requires_grad=True)
    LOSSES[name](preds, torch.tensor([1.0, 0.5]), torch.tensor([7, 7])).backward()
    assert preds.grad[0] < 0 < preds.grad[1]


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_training_step_improves_ranking(name):
    """A linear scorer trained on a toy problem: one small step lowers the loss, and training
    lifts pairwise accuracy from chance (about 0.5) to above 0.9."""
    gen = torch.Generator().manual_seed(0)
    n_tasks, per, dim = 6, 40, 8
    features = torch.randn(n_tasks * per, dim, generator=gen)
    task = torch.arange(n_tasks).repeat_interleave(per)
    throughput = torch.exp(features @ torch.randn(dim, generator=gen) * 0.5)
    best = torch.zeros(n_tasks).scatter_reduce(0, task, throughput, reduce="amax")
    labels = throughput / best[task]
    model = torch.nn.Linear(dim, 1)
    torch.nn.init.normal_(model.weight, generator=gen)

    def accuracy() -> float:
        metric = PairwiseAccuracy()
        metric.update(model(features).squeeze(1).detach(), labels, task)
        return metric.compute().item()

    loss_fn = LOSSES[name]
    before = accuracy()
    first = loss_fn(model(features).squeeze(1), labels, task)
    first.backward()
    with torch.no_grad():
        for param in model.parameters():
            param -= 1e-3 * param.grad
    assert loss_fn(model(features).squeeze(1), labels, task).item() < first.item()

    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(150):
        optimizer.zero_grad()
        loss_fn(model(features).squeeze(1), labels, task).backward()
        optimizer.step()
    after = accuracy()
    assert after > 0.9 and after > before + 0.3, (before, after)


def test_bad_inputs_raise():
    p, y, t = torch.zeros(3), torch.zeros(3), torch.zeros(3, dtype=torch.long)
    with pytest.raises(ValueError, match="shapes"):
        lambda_rank_loss(p, y[:2], t)
    with pytest.raises(ValueError, match="shapes"):
        ranknet_loss(p[:, None], y, t)
    with pytest.raises(TypeError, match="task must be an integer"):
        mse_loss(p, y, t.float())
    with pytest.raises(TypeError, match="floating point"):
        mse_loss(p.long(), y, t)
    with pytest.raises(ValueError, match="reduction"):
        lambda_rank_loss(p, y, t, reduction="max")


def test_grouping_helpers_match_brute_force():
    gen = torch.Generator().manual_seed(1)
    task = torch.randint(0, 5, (60,), generator=gen) * 10
    key = torch.randint(0, 4, (60,), generator=gen).float()
    assert torch.equal(lexsort(key, task), torch.from_numpy(np.lexsort((key.numpy(), task.numpy()))))
    group, sizes = task_groups(task)
    rank = rank_within_task(key, group, sizes)
    for i in range(60):
        same = [j for j in range(60) if task[j] == task[i]]
        ahead = [j for j in same if key[j] > key[i] or (key[j] == key[i] and j < i)]
        assert rank[i] == len(ahead)
    left, right = same_task_pairs(group, sizes)
    want = sorted((i, j) for i in range(60) for j in range(60) if task[i] == task[j])
    assert sorted(zip(left.tolist(), right.tolist())) == want


def test_fused_float32_task_order_matches_two_sorts():
    """One int64 sort on (group, float32 bits) equals the two stable sorts, for negative values,
    -0.0 vs 0.0 (equal, so record order decides), infinities and subnormals."""
    gen = torch.Generator().manual_seed(2)
    special = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), 1e-45, -1e-45, -2.0, -1.0, 3.5])
    key = torch.cat([special, (torch.randn(300, generator=gen) * 100).round() / 7, -special])
    group = torch.randint(0, 7, (len(key),), generator=gen)
    for narrow in (key, key.half()):
        for descending in (False, True):
            want = lexsort((-narrow if descending else narrow).double(), group)
            assert torch.equal(task_order(narrow, group, descending), want)


def random_batch(seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """5-11 tasks of 1-79 records, interleaved, with unsorted negative and positive ids (int32 for odd
    seeds): a single-record task, a two-record one, one with all labels equal, one with all labels 0,
    and ties in labels (6 levels) and in predictions (one decimal)."""
    gen = torch.Generator().manual_seed(seed)
    n_tasks = int(torch.randint(5, 12, (1,), generator=gen))
    sizes = torch.randint(1, 80, (n_tasks,), generator=gen)
    sizes[:2] = torch.tensor([1, 2])
    ids = torch.randperm(1000, generator=gen)[:n_tasks] - 500
    task = ids.repeat_interleave(sizes)
    labels = torch.randint(0, 6, (len(task),), generator=gen).to(dtype) / 5
    labels[task == ids[2]] = 0.6
    labels[task == ids[3]] = 0.0
    preds = (torch.randn(len(task), generator=gen, dtype=dtype) * 2).round(decimals=1)
    perm = torch.randperm(len(task), generator=gen)
    task = task[perm]
    return preds[perm], labels[perm], task.int() if seed % 2 else task


def loss_and_grad(name, preds, labels, task, reduction, dense):
    preds = preds.detach().clone().requires_grad_(True)
    loss = LOSSES[name](preds, labels, task, reduction, dense=dense)
    loss.backward()
    return loss.detach(), preds.grad


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dense_path_equals_pair_lists(name, reduction, dtype):
    """Loss and gradient of both computations agree; they differ only in summation order, so
    float64 agrees to 1e-12 and float32 to 5e-6 (about 80 float32 epsilons over ~1000-term sums)."""
    rtol = 1e-12 if dtype == torch.float64 else 5e-6
    for seed in range(8):
        preds, labels, task = random_batch(seed, dtype)
        dense_loss, dense_grad = loss_and_grad(name, preds, labels, task, reduction, dense=True)
        list_loss, list_grad = loss_and_grad(name, preds, labels, task, reduction, dense=False)
        assert dense_loss.dtype == dtype and dense_loss.item() > 0
        torch.testing.assert_close(dense_loss, list_loss, rtol=rtol, atol=0)
        torch.testing.assert_close(dense_grad, list_grad, rtol=rtol, atol=rtol * list_grad.abs().max().item())


@pytest.mark.parametrize("name", sorted(REFERENCES))
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_dense_path_matches_reference(name, reduction):
    preds, labels, task = make_batch(4)
    got = LOSSES[name](preds, labels, task, reduction=reduction, dense=True)
    groups = per_task(preds, labels, task)
    want = reduce_ref([REFERENCES[name](s, y) for s, y in groups.values()], reduction)
    assert got.item() == pytest.approx(want, rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_dense_gradient_matches_finite_differences(name):
    gen = torch.Generator().manual_seed(4)
    task = torch.tensor([4, 9, 4, 4, 9, 2, 4, 9, 2])
    labels = torch.tensor([1.0, 0.5, 0.25, 0.75, 1.0, 1.0, 0.25, 0.5, 1.0], dtype=torch.float64)
    preds = torch.randn(9, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda s: LOSSES[name](s, labels, task, dense=True), (preds,))


@pytest.mark.parametrize("name", ["lambdarank", "ranknet"])
def test_dense_no_pairs_gives_zero_loss_and_zero_gradient(name):
    preds = torch.tensor([0.3, -1.0, 2.0, 2.0, 5.0], requires_grad=True)
    loss = LOSSES[name](preds, torch.tensor([1.0, 0.5, 0.5, 0.5, 0.0]), torch.tensor([0, 1, 2, 2, 3]), dense=True)
    loss.backward()
    assert loss.item() == 0.0
    assert torch.equal(preds.grad, torch.zeros(5))


def test_default_path_is_dense_for_training_batches_off_the_cpu():
    """The choice uses only shape and device. The CPU takes the pair lists (less arithmetic, nothing
    to sync), other devices the dense masks up to DENSE_MAX_BATCH records."""
    assert not use_dense(torch.zeros(512, dtype=torch.long))
    assert use_dense(torch.zeros(DENSE_MAX_BATCH, dtype=torch.long, device="meta"))
    assert not use_dense(torch.zeros(DENSE_MAX_BATCH + 1, dtype=torch.long, device="meta"))


class SyncOps(TorchDispatchMode):
    """Records the ATen ops (forward and backward) that make CUDA wait for the GPU: a value read on
    the host (`_local_scalar_dense` is what .item(), int(), bool() and .tolist() run), an output
    whose size depends on the data (unique, nonzero, masked_select, bincount, repeat_interleave
    without output_size, indexing with a boolean mask) or a data-dependent answer (equal)."""

    ALWAYS = {
        "_local_scalar_dense",
        "_unique",
        "_unique2",
        "unique_dim",
        "unique_consecutive",
        "nonzero",
        "argwhere",
        "masked_select",
        "bincount",
        "is_nonzero",
        "equal",
    }
    INDEXING = {"index", "index_put", "index_put_", "_index_put_impl_"}

    def __init__(self) -> None:
        super().__init__()
        self.found: set[str] = set()
        self.seen: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        self.seen.add(name)
        if name in self.ALWAYS:
            self.found.add(name)
        elif name in self.INDEXING and any(
            isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in args[1]
        ):
            self.found.add(f"{name} (boolean mask)")
        elif name == "repeat_interleave" and kwargs.get("output_size") is None:
            self.found.add("repeat_interleave without output_size")
        return func(*args, **kwargs)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_dense_path_makes_no_syncing_op(name):
    """Forward + backward of the dense path contain none of the syncing ops, which the pair lists
    do contain (so the recorder does see them)."""
    preds, labels, task = random_batch(0, torch.float32)
    found = {}
    for dense in (True, False):
        with SyncOps() as ops:
            LOSSES[name](preds.clone().requires_grad_(True), labels, task, dense=dense).backward()
        found[dense] = ops.found
        assert "index_add" in ops.seen, "the recorder sees the ops of the computation"
    assert found[True] == set()
    assert "_unique2" in found[False], found[False]


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_default_path_runs_without_data(name):
    """On the meta device (shapes only, no values) an op that needs a value on the host cannot run:
    the default path there (dense) computes the loss and its gradient all the same."""
    preds = torch.empty(512, device="meta", requires_grad=True)
    loss = LOSSES[name](preds, torch.empty(512, device="meta"), torch.empty(512, dtype=torch.long, device="meta"))
    loss.backward()
    assert loss.shape == () and preds.grad.shape == (512,)
    with pytest.raises(NotImplementedError, match="_unique2"):
        LOSSES[name](
            preds, torch.empty(512, device="meta"), torch.empty(512, dtype=torch.long, device="meta"), dense=False
        )
