"""The shared feature cache: each schedule lowered and walked once, whoever asks; failures remembered."""

import threading

import numpy as np
from tvm.s_tir.meta_schedule.testing import te_workload

from data.features import FeatureCache, featurize_candidates, schedule_key, schedule_keys
from data.features import cache as cache_module


def test_parts_are_computed_once_and_completed_on_demand(cpu_target, sample, te_module, monkeypatch):
    ctx, cands = sample(te_module(te_workload.matmul(64, 64, 64)), cpu_target, 4)
    calls = []
    import data.features.cache as cache_module

    def counting(context, candidates, *, stmt, walk, pool):
        calls.append((len(candidates), stmt, walk))
        return featurize_candidates(context, candidates, stmt=stmt, walk=walk, pool=pool)

    monkeypatch.setattr(cache_module, "featurize_candidates", counting)
    cache = FeatureCache()
    walked = cache.featurize(ctx, cands, stmt=False)  # what PSA asks for
    assert calls == [(4, False, True)] and all(f.stmt is None and f.psa is not None for f in walked)
    full = cache.featurize(ctx, cands + cands[:1])  # what PAM asks for: only the rows are missing
    assert calls[1:] == [(4, True, False)]
    reference = featurize_candidates(ctx, cands)
    for got, want in zip(full, reference + reference[:1]):
        np.testing.assert_array_equal(got.stmt, want.stmt)
        np.testing.assert_array_equal(got.psa, want.psa)
        np.testing.assert_array_equal(got.gemm_matrix, want.gemm_matrix)
    cache.featurize(ctx, cands)  # everything known: nothing computed
    assert len(calls) == 2 and cache.hits == 5 + 4 and cache.misses == 4 and len(cache) == 4


def test_failures_are_remembered_and_capacity_is_kept(cpu_target, sample, te_module, monkeypatch):
    ctx, cands = sample(te_module(te_workload.matmul(32, 32, 32)), cpu_target, 3)
    import data.features.cache as cache_module

    calls = []

    def failing_first(context, candidates, *, stmt, walk, pool):
        calls.append(len(candidates))
        out = featurize_candidates(context, candidates, stmt=stmt, walk=walk, pool=pool)
        bad = schedule_key(cands[0].sch.mod)
        return [None if schedule_key(c.sch.mod) == bad else f for c, f in zip(candidates, out)]

    monkeypatch.setattr(cache_module, "featurize_candidates", failing_first)
    cache = FeatureCache(capacity=2)
    first = cache.featurize(ctx, cands)
    assert first[0] is None and all(f is not None for f in first[1:])
    assert len(cache) == 2  # capacity: the oldest entry went
    again = cache.featurize(ctx, cands[2:])
    assert again[0] is not None and calls == [3]  # the newest entry was kept


def test_threads_share_one_cache(cpu_target, sample, te_module):
    ctx, cands = sample(te_module(te_workload.matmul(32, 32, 32)), cpu_target, 6)
    cache, results, errors = FeatureCache(), {}, []

    def work(name, part):
        try:
            results[name] = cache.featurize(ctx, part, stmt=name == "pam")
        except Exception as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(n, cands)) for n in ("psa", "pam")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(cache) == len({schedule_key(c.sch.mod) for c in cands})
    for f in results["pam"]:
        assert f.stmt is not None and f.psa is not None


def test_long_lists_are_hashed_on_threads_to_the_same_keys(cpu_target, sample, te_module, monkeypatch):
    """`schedule_keys`: a list of `PARALLEL_KEYS_FROM` or more is hashed on threads of the call's own,
    a shorter one in the caller's; either way the keys are `schedule_key`'s, in order."""
    _, cands = sample(te_module(te_workload.matmul(64, 64, 64)), cpu_target, 48)
    mods = [c.sch.mod for c in cands] * 2  # 96, each sampled schedule twice
    serial = [schedule_key(m) for m in mods]
    where = []

    def recorded(mod):
        where.append(threading.current_thread().name)
        return serial_key(mod)

    serial_key = cache_module.schedule_key
    monkeypatch.setattr(cache_module, "schedule_key", recorded)
    monkeypatch.setattr(cache_module, "usable_cores", lambda: 2)
    assert len(mods) >= cache_module.PARALLEL_KEYS_FROM
    assert schedule_keys(mods) == serial
    assert len(where) == 96 and all(name.startswith("schedule-key") for name in where)
    where.clear()
    assert schedule_keys(mods[:10]) == serial[:10]
    assert where == [threading.current_thread().name] * 10
