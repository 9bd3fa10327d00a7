"""Ranking metrics against brute-force / scipy references; merged halves and a real 2-process
gloo DDP run give the same values as one process on all the data."""

from __future__ import annotations

import itertools
import math
import socket
import time

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from ddp_metrics import ddp_worker, update_in_batches
from references import per_task
from scipy.stats import kendalltau

from pruner_models.metrics import (
    KendallTau,
    LabelRMSE,
    PairwiseAccuracy,
    PeakScore,
    TopKRecall,
    ranking_metrics,
)


def make_records(seed: int, sizes=(1, 2, 3, 5, 8, 9, 7, 6, 4, 9)) -> tuple[torch.Tensor, ...]:
    """Interleaved records of tasks with non-contiguous ids, ties in labels and predictions, a
    single-record task, a task with all-equal labels, one with all-zero labels (all failed) and
    one with constant predictions. Tasks stay <= 9 records so top-k sets can be enumerated."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randperm(10_000, generator=gen)[: len(sizes)]
    task = torch.cat([torch.full((n,), int(i)) for i, n in zip(ids, sizes)])
    labels = torch.randint(0, 5, (len(task),), generator=gen).float() / 4
    preds = (torch.randn(len(task), generator=gen) * 1.5).round(decimals=0) / 2
    labels[task == ids[6]] = 0.75
    labels[task == ids[7]] = 0.0
    preds[task == ids[8]] = 0.25
    perm = torch.randperm(len(task), generator=gen)
    return preds[perm], labels[perm], task[perm]


def ref_pairwise(p, y):
    n = len(p)
    if n <= 1:
        return 0.5
    correct = sum((p[i] > p[j]) == (y[i] > y[j]) for i in range(n) for j in range(i + 1, n))
    return correct / (n * (n - 1) / 2)


def ref_peak(k):
    def score(p, y):
        order = sorted(range(len(p)), key=lambda i: -p[i])
        best = max(y)
        if best <= 0:
            return 1.0
        return sum(max(y[o] for o in order[:i]) / best for i in range(1, k + 1)) / k

    return score


def ref_topk(k):
    """Brute force: the best overlap over every set that is a true top-k under some tie-break."""

    def score(p, y):
        n = len(p)
        kk = min(k, n)
        picked = set(sorted(range(n), key=lambda i: -p[i])[:k])
        valid = [
            set(s)
            for s in itertools.combinations(range(n), kk)
            if min(y[i] for i in s) >= max((y[i] for i in range(n) if i not in s), default=-math.inf)
        ]
        return max(len(picked & s) for s in valid) / kk

    return score


def ref_kendall(p, y):
    if len(p) < 2:
        return 0.0
    tau = kendalltau(p, y).statistic
    return 0.0 if math.isnan(tau) else tau


def weighted(score, preds, labels, task) -> float:
    groups = per_task(preds, labels, task)
    return sum(len(p) * score(p, y) for p, y in groups.values()) / len(task)


def ref_rmse(preds, labels, task) -> float:
    return math.sqrt(sum((a - b) ** 2 for a, b in zip(preds.tolist(), labels.tolist())) / len(task))


CASES = {
    "pairwise": (PairwiseAccuracy, lambda *d: weighted(ref_pairwise, *d)),
    "peak@1": (lambda: PeakScore(k=1), lambda *d: weighted(ref_peak(1), *d)),
    "peak@5": (lambda: PeakScore(k=5), lambda *d: weighted(ref_peak(5), *d)),
    "top1_recall": (lambda: TopKRecall(k=1), lambda *d: weighted(ref_topk(1), *d)),
    "top3_recall": (lambda: TopKRecall(k=3), lambda *d: weighted(ref_topk(3), *d)),
    "top5_recall": (lambda: TopKRecall(k=5), lambda *d: weighted(ref_topk(5), *d)),
    "kendall": (KendallTau, lambda *d: weighted(ref_kendall, *d)),
    "rmse": (LabelRMSE, ref_rmse),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("seed", range(4))
def test_metric_matches_reference(name, seed):
    make, reference = CASES[name]
    data = make_records(seed)
    got = update_in_batches(make(), *data).compute()
    assert got.dtype == torch.float64
    assert got.item() == pytest.approx(reference(*data), abs=1e-9)


PER_TASK = {  # the ranking metrics' per-task references (LabelRMSE has no per-task value)
    "pairwise": (PairwiseAccuracy, ref_pairwise),
    "peak@5": (lambda: PeakScore(k=5), ref_peak(5)),
    "top3_recall": (lambda: TopKRecall(k=3), ref_topk(3)),
    "kendall": (KendallTau, ref_kendall),
}


@pytest.mark.parametrize("name", sorted(PER_TASK))
def test_per_task_values_match_the_reference_task_by_task(name):
    make, reference = PER_TASK[name]
    data = make_records(1)
    sizes, values = update_in_batches(make(), *data).compute_per_task()
    groups = sorted(per_task(*data).items())  # ascending task id, as compute_per_task orders them
    assert sizes.tolist() == [len(p) for _, (p, _) in groups]
    assert values.dtype == torch.float64
    assert values.tolist() == pytest.approx([reference(p, y) for _, (p, y) in groups], abs=1e-9)


def test_higher_is_better_flags():
    assert all(m.higher_is_better for m in (PairwiseAccuracy(), PeakScore(), TopKRecall(), KendallTau()))
    assert LabelRMSE().higher_is_better is False
    assert all(not cls.full_state_update for cls in (PairwiseAccuracy, PeakScore, TopKRecall, KendallTau, LabelRMSE))


def test_single_record_and_constant_task_policies():
    """Policies of docs/pruner.md section 6 and the docstrings on hand-checked tasks."""
    cases = {  # task: (preds, labels)
        0: ([0.3], [0.6]),  # single record
        1: ([3.0, 1.0, 2.0], [0.5, 0.5, 0.5]),  # all labels equal
        2: ([1.0, 2.0], [0.0, 0.0]),  # every measurement failed
    }
    preds = torch.tensor([p for ps, _ in cases.values() for p in ps])
    labels = torch.tensor([y for _, ys in cases.values() for y in ys])
    task = torch.tensor([t for t, (ps, _) in cases.items() for _ in ps])

    def per_task_value(metric, t):
        mask = task == t
        metric.update(preds[mask], labels[mask], task[mask])
        return metric.compute().item()

    assert per_task_value(PairwiseAccuracy(), 0) == 0.5
    # Equal labels: a pair is correct iff the earlier record is not predicted faster: only (1, 2).
    assert per_task_value(PairwiseAccuracy(), 1) == pytest.approx(1 / 3)
    assert per_task_value(PeakScore(k=5), 0) == 1.0
    assert per_task_value(PeakScore(k=1), 2) == 1.0
    assert per_task_value(TopKRecall(k=5), 0) == 1.0
    assert per_task_value(TopKRecall(k=2), 1) == 1.0
    assert per_task_value(KendallTau(), 0) == 0.0
    assert per_task_value(KendallTau(), 1) == 0.0
    whole = PairwiseAccuracy()
    whole.update(preds, labels, task)
    assert whole.compute().item() == pytest.approx((1 * 0.5 + 3 * (1 / 3) + 2 * 1.0) / 6)


def test_label_ties_only_depend_on_record_order():
    """Without ties every metric ignores record order; pairwise accuracy's literal tie rule does not."""
    gen = torch.Generator().manual_seed(7)
    task = torch.randint(0, 6, (300,), generator=gen)
    preds, labels = torch.rand(300, generator=gen), torch.rand(300, generator=gen)
    reverse = torch.arange(299, -1, -1)
    for name, (make, _) in CASES.items():
        forward = update_in_batches(make(), preds, labels, task).compute()
        backward = update_in_batches(make(), preds[reverse], labels[reverse], task[reverse]).compute()
        assert forward.item() == pytest.approx(backward.item(), abs=1e-12), name
    tied = torch.tensor([0.5, 0.5])
    forward, backward = PairwiseAccuracy(), PairwiseAccuracy()
    forward.update(torch.tensor([1.0, 2.0]), tied, torch.zeros(2, dtype=torch.long))
    backward.update(torch.tensor([2.0, 1.0]), tied, torch.zeros(2, dtype=torch.long))
    assert (forward.compute().item(), backward.compute().item()) == (1.0, 0.0)


@pytest.mark.parametrize("name", sorted(CASES))
def test_merged_halves_equal_the_whole(name):
    """What DDP does: each half in its own metric, states merged (first half first)."""
    make, _ = CASES[name]
    preds, labels, task = make_records(11)
    half = len(task) // 2
    first = update_in_batches(make(), preds[:half], labels[:half], task[:half])
    second = update_in_batches(make(), preds[half:], labels[half:], task[half:])
    second.merge_state(first)  # incoming state goes first
    whole = update_in_batches(make(), preds, labels, task)
    assert second.compute().item() == pytest.approx(whole.compute().item(), abs=1e-12)


def test_collection_names_and_shared_state():
    data = make_records(3)
    collection = ranking_metrics("val_")
    update_in_batches(collection, *data)
    values = collection.compute()
    assert set(values) == {
        "val_pairwise_acc",
        "val_peak@1",
        "val_peak@5",
        "val_top5_recall",
        "val_kendall_tau",
        "val_rmse",
    }
    assert values["val_pairwise_acc"].item() == pytest.approx(CASES["pairwise"][1](*data), abs=1e-9)
    assert values["val_peak@5"].item() == pytest.approx(CASES["peak@5"][1](*data), abs=1e-9)
    assert values["val_kendall_tau"].item() == pytest.approx(CASES["kendall"][1](*data), abs=1e-9)
    assert len(collection.compute_groups) == 1, "all six keep the same records once"


def test_large_tasks_against_scipy_without_pair_matrix():
    """Tasks of 30k records (a 30k x 30k pair matrix would need ~1 GB) against scipy's
    O(n log n) Kendall tau. With both keys tie-broken by record order, TenSet's pairwise accuracy
    is the concordance of the two permutations: (1 + tau) / 2."""
    gen = torch.Generator().manual_seed(5)
    sizes = [30_000, 20_000, 7]
    task = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])
    labels = (torch.rand(len(task), generator=gen) * 50).round() / 50
    preds = labels + torch.randn(len(task), generator=gen) * 0.3
    preds = preds.round(decimals=2)
    pairwise, kendall = PairwiseAccuracy(), KendallTau()
    start = time.perf_counter()
    pairwise.update(preds, labels, task)
    kendall.update(preds, labels, task)
    got_pairwise, got_kendall = pairwise.compute().item(), kendall.compute().item()
    elapsed = time.perf_counter() - start
    want_pairwise = want_kendall = 0.0
    for t, n in enumerate(sizes):
        p, y = preds[task == t].numpy(), labels[task == t].numpy()
        pred_rank, label_rank = np.argsort(np.argsort(p, kind="stable")), np.argsort(np.argsort(y, kind="stable"))
        want_pairwise += n * (1 + kendalltau(pred_rank, label_rank).statistic) / 2
        want_kendall += n * kendalltau(p, y).statistic
    assert got_pairwise == pytest.approx(want_pairwise / len(task), abs=1e-9)
    assert got_kendall == pytest.approx(want_kendall / len(task), abs=1e-9)
    assert elapsed < 20, f"{elapsed:.1f} s for 50k records"


def test_bad_inputs_raise():
    metric = PairwiseAccuracy()
    with pytest.raises(ValueError, match="shapes"):
        metric.update(torch.zeros(3), torch.zeros(2), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="shapes"):
        metric.update(torch.zeros(3, 1), torch.zeros(3, 1), torch.zeros(3, 1, dtype=torch.long))
    with pytest.raises(TypeError, match="task_ids must be an integer"):
        metric.update(torch.zeros(3), torch.zeros(3), torch.zeros(3))
    for k in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="k must be a positive int"):
            PeakScore(k=k)
        with pytest.raises(ValueError, match="k must be a positive int"):
            TopKRecall(k=k)


def test_update_detaches_and_empty_is_nan():
    preds = torch.tensor([0.2, 0.1], requires_grad=True)
    metric = KendallTau()
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert math.isnan(metric.compute().item())
    metric.update(preds, torch.tensor([1.0, 0.5]), torch.tensor([3, 3]))
    assert not metric.preds[0].requires_grad
    assert metric.compute().item() == 1.0


# ---- a real 2-process DDP run (gloo, CPU) ----


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_ddp_gloo_sync_equals_single_process(tmp_path):
    preds, labels, task = make_records(21, sizes=(1, 2, 9, 40, 17, 33, 5, 3, 60, 11))
    assert len(task) % 2 == 1
    torch.save((preds, labels, task), tmp_path / "data.pt")
    # spawn, not fork: a test worker has threads (TVM's pools, a tuning run's builders and searches), and
    # a forked child can wait forever on a lock one of them held; and a bound on the wait in any case
    args = (2, _free_port(), str(tmp_path / "data.pt"), str(tmp_path))
    ranks = mp.start_processes(ddp_worker, args=args, nprocs=2, join=False, start_method="spawn")
    deadline = time.monotonic() + 240
    while not ranks.join(timeout=max(0.0, deadline - time.monotonic())):
        if time.monotonic() >= deadline:
            for proc in ranks.processes:
                proc.kill()
            pytest.fail("the two gloo processes did not finish within 240 s")
    results = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    assert results[0] == results[1], "every rank computes the same synced value"

    # The gathered record order is rank 0's records, then rank 1's.
    order = torch.cat([torch.arange(0, len(task), 2), torch.arange(1, len(task), 2)])
    single = update_in_batches(ranking_metrics("val_"), preds[order], labels[order], task[order]).compute()
    for name, value in single.items():
        assert results[0][name] == pytest.approx(value.item(), abs=1e-12), name
    shard0 = update_in_batches(ranking_metrics("val_"), preds[0::2], labels[0::2], task[0::2]).compute()
    assert any(results[0][name] != pytest.approx(value.item()) for name, value in shard0.items()), (
        "sync changed nothing"
    )
    alone = update_in_batches(PairwiseAccuracy(), preds, labels, task).compute().item()
    assert results[0]["lonely_pairwise"] == pytest.approx(alone, abs=1e-12)
