"""`FeatureCache`: each candidate is lowered and featurized once per tuning run, whoever asks.

In a draft-then-verify round the draft (PSA: access walk only) and the verifier (PAM: PerStoreFeature
rows plus the walk's GEMM matrix) score largely the same schedules: the potential space that PSA
drafted is what PAM ranks, and the schedules PAM picks are what its `update` learns from. Without a
shared cache each of them lowers and walks the same module again. The cache is keyed by the
structural hash of the scheduled module (the database's notion of "the same schedule") and keeps
what was computed so far for each key, so a later request computes only the missing part (e.g. the
PerStoreFeature rows of a schedule that PSA has walked). Failures are remembered too: a schedule
that does not lower is not tried again.

It is thread-safe: a search that drafts on a background thread (`bridge.search`) and a cost model
updating on the main thread share one cache.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from data.features.extract import featurize_candidates
from data.features.program import ProgramFeatures
from tvm_env import ms, tvm_ffi, usable_cores

if TYPE_CHECKING:
    from data.features.pool import WalkPool

__all__ = ["FeatureCache", "schedule_key", "schedule_keys"]

_FAILED = object()
"""Marks a schedule whose lowering or feature extraction failed."""


def schedule_key(mod) -> int:
    """Structural hash of a scheduled module: the key of a schedule in every cache and dedupe."""
    return int(tvm_ffi.structural_hash(mod))


PARALLEL_KEYS_FROM = 64
"""`schedule_keys` hashes lists at least this long on threads; shorter ones in the caller's."""


def schedule_keys(mods: Sequence) -> list[int]:
    """`schedule_key` of each module, in order. A list of `PARALLEL_KEYS_FROM` or more is hashed in
    chunks on up to one thread a usable core (TVM's hash releases the GIL), started for the call: a
    draft hashes its population each generation, and hashed in turn that was 5% of a draft's time,
    at 1 core busy of 16 (docs/benchmarks.md, "Where a draft's time goes on 16 cores"). Threads of
    the call's own, not a pool's, so that they run at the caller's CPU priority (a draft's
    `draft_nice`, which new threads inherit)."""
    mods = list(mods)
    threads = usable_cores()
    if len(mods) < PARALLEL_KEYS_FROM or threads < 2:
        return [schedule_key(m) for m in mods]
    size = -(-len(mods) // min(threads, -(-len(mods) // 16)))  # at least 16 a chunk, one chunk a thread at most
    chunks = [mods[i : i + size] for i in range(0, len(mods), size)]
    with ThreadPoolExecutor(len(chunks), thread_name_prefix="schedule-key") as pool:
        return list(itertools.chain.from_iterable(pool.map(lambda c: [schedule_key(m) for m in c], chunks)))


class FeatureCache:
    """LRU map: schedule key -> `ProgramFeatures` computed so far (module docstring).

    Attributes:
        hits: candidates served (partly) from the cache.
        misses: candidates featurized from nothing.
    """

    def __init__(self, capacity: int = 16384, *, pool: WalkPool | None = None):
        """
        Args:
            capacity: schedules kept (about 10 KB each with statement rows).
            pool: worker processes for the walk of large batches, shared by every model using
                this cache (None: walk in this process).
        """
        if capacity < 1:
            raise ValueError(f"capacity={capacity!r} must be >= 1")
        self.capacity, self.pool = capacity, pool
        self.hits = self.misses = 0
        self._items: collections.OrderedDict[int, object] = collections.OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def featurize(
        self,
        context: ms.TuneContext,
        candidates: Sequence[ms.MeasureCandidate],
        *,
        stmt: bool = True,
        walk: bool = True,
        keys: Sequence[int] | None = None,
    ) -> list[ProgramFeatures | None]:
        """`data.features.featurize_candidates`, computing only what the cache lacks (on `self.pool`).

        Args:
            context, candidates, stmt, walk: as for `featurize_candidates`.
            keys: the candidates' `schedule_key`s, when the caller has them already.

        Returns:
            One ProgramFeatures per candidate holding at least the parts asked for, or None where
            featurizing failed (now or earlier).
        """
        candidates = list(candidates)
        keys = schedule_keys([c.sch.mod for c in candidates]) if keys is None else list(keys)
        with self._lock:
            known = [self._items.get(k) for k in keys]
        # Each distinct missing key once, grouped by the parts it lacks.
        todo: dict[tuple[bool, bool], dict[int, int]] = collections.defaultdict(dict)
        for i, (key, entry) in enumerate(zip(keys, known)):
            if entry is _FAILED:
                continue
            need_stmt = stmt and (entry is None or entry.stmt is None)
            need_walk = walk and (entry is None or entry.psa is None)
            if need_stmt or need_walk:
                todo[(need_stmt, need_walk)].setdefault(key, i)
        fresh: dict[int, ProgramFeatures | None] = {}
        for (need_stmt, need_walk), first in todo.items():
            computed = featurize_candidates(
                context, [candidates[i] for i in first.values()], stmt=need_stmt, walk=need_walk, pool=self.pool
            )
            fresh.update(zip(first, computed))
        with self._lock:
            self.misses += sum(1 for e in known if e is None)
            self.hits += sum(1 for e in known if e is not None)
            for key, features in fresh.items():
                old = self._items.get(key)
                self._items[key] = _FAILED if features is None else _merge(old, features)
            for key in keys:
                if key in self._items:
                    self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
            entries = [self._items.get(k, fresh.get(k)) for k in keys]
        return [None if e is _FAILED or e is None else e for e in entries]


def _merge(old: object, new: ProgramFeatures) -> ProgramFeatures:
    """`new` completed with the parts that only `old` (an earlier, partial entry) has."""
    if not isinstance(old, ProgramFeatures):
        return new
    if new.stmt is None and old.stmt is not None:
        new = dataclasses.replace(new, stmt=old.stmt)
    if new.psa is None and old.psa is not None:
        new = dataclasses.replace(
            new, access=old.access, scopes=old.scopes, gemm=old.gemm, gemm_found=old.gemm_found, psa=old.psa
        )
    return new
