"""What a design space's trace says about the GPU resources its tile sizes ask for, before a replay.

A CUDA design space of MetaSchedule's `MultiLevelTiling` splits each loop of a block with a
`SamplePerfectTile` decision, reorders the parts, binds fused parts to `blockIdx`, `vthread` and
`threadIdx`, and copies the block's inputs into shared memory under one of the reduction loops
(`cache_read` + `compute_at`), sometimes pipelined over several stages. `VerifyGPUCode` rejects a
schedule whose threads or shared memory exceed the target's limits; both follow from the tile
decisions alone, and `SpacePlan` reads how from the trace:

- **threads:** each `Bind` to `threadIdx.x` binds a loop fused of split parts, so its extent is a
  product of decisions, and it must lie within the block's
  `meta_schedule.thread_extent_{low,high}_inclusive` annotations (MultiLevelTiling sets them right
  after binding) and the target's `max_threads_per_block`. A space that binds `threadIdx.y`/`z` or
  runs warps (`warp_execution`, the tensor-core spaces: there `VerifyGPUCode` counts `threadIdx.x` as
  a warp) is not checked this way. Vthreads are not limited: `VerifyGPUCode`'s `max_vthread` applies
  to `vthread.s` loops, which these spaces never leave (every draw with more than 8 that fit
  otherwise passed, 368 of 368 on ResNet-18's and ViT-B/16's tasks).
- **shared memory:** a block cached in shared memory under loop L holds, per thread block, the region
  of its buffer that the consumer reads in one iteration of L, with the thread-bound loops relaxed.
  Each consumer iterator then spans the product of its parts that lie inside L (after L in the
  `reorder`) or are bound to threads; a buffer dimension indexed `sum c_j v_j + c` spans
  `sum |c_j| (span_j - 1) + extent`; the bytes are the product over the dimensions times the element
  size, times the stages of a `software_pipeline_stage` annotation (each stage a copy).

The shared-memory formula is checked against the design space's own decisions and two random draws,
each replayed (`shared_bytes`); a space where it does not match exactly (a `cache_write` to shared
memory, an iterator that no tile splits, an index that is not linear) or whose trace the reading
does not follow is not checked for shared memory before its replay (`VerifyGPUCode` still checks
every replay). `bridge.sampling.ConstrainedSampler` also replays a few draws that each check turns
away, and drops a check that turned away one that passes.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from tvm import sym
from tvm.s_tir.schedule import Schedule, Trace

__all__ = ["SpacePlan", "perfect_tiles", "pipeline_stages", "shared_bytes"]

_THREAD_LOW = "meta_schedule.thread_extent_low_inclusive"
_THREAD_HIGH = "meta_schedule.thread_extent_high_inclusive"
_PIPELINE = "software_pipeline_stage"
_SHARED = ("shared", "shared.dyn")
_THREADED = ("threadIdx", "vthread")
_WARPS = "warp_execution"


def _prime_powers(n: int) -> list[tuple[int, int]]:
    """(prime, exponent) pairs of `n`."""
    out, p = [], 2
    while p * p <= n:
        k = 0
        while n % p == 0:
            n, k = n // p, k + 1
        if k:
            out.append((p, k))
        p += 1
    return out + ([(n, 1)] if n > 1 else [])


def perfect_tiles(
    rng: np.random.Generator, extent: int, n: int, count: int, max_innermost: int = -1, powers: list | None = None
) -> np.ndarray:
    """`count` rows of `n` factors whose product is `extent`, drawn as MetaSchedule's
    `SamplePerfectTile` draws them: each prime's exponent split among the `n` factors uniformly over
    the ways to split it (stars and bars), a row drawn again while its innermost factor exceeds
    `max_innermost` (where that is > 0). `powers`: `extent`'s (prime, exponent) pairs, if known."""
    powers = _prime_powers(extent) if powers is None else powers
    out = np.ones((count, n), dtype=np.int64)
    for p, k in powers:
        if n == 1:
            out[:, 0] *= p**k
            continue
        slots = k + n - 1
        bars = np.sort(np.argsort(rng.random((count, slots)), axis=1)[:, : n - 1], axis=1)
        edges = np.concatenate([np.full((count, 1), -1), bars, np.full((count, 1), slots)], axis=1)
        out *= np.power(p, np.diff(edges, axis=1) - 1)
    if max_innermost > 0 and n > 1:
        bad = np.flatnonzero(out[:, -1] > max_innermost)
        if len(bad):  # some divisor of `extent` within the bound exists (1), so this ends
            out[bad] = perfect_tiles(rng, extent, n, len(bad), max_innermost, powers)
    return out


def pipeline_stages(trace: Any) -> int:
    """Copies of each shared buffer that a `software_pipeline_stage` annotation in `trace` asks for
    (its stages' spread plus one; 1 without one)."""
    stages = 1
    for inst in trace.insts:
        if inst.kind.name == "Annotate" and str(inst.attrs[0]) == _PIPELINE:
            values = [int(v) for v in inst.inputs[1]]
            stages = max(stages, max(values) - min(values) + 1)
    return stages


def shared_bytes(sch: Any) -> int | None:
    """Bytes of shared memory that the blocks a replayed schedule's trace cached in shared memory
    hold: each such block's own loops (those not around the block it reads for or writes from),
    multiplied out, times its element size, times the pipeline's stages. None where an extent is not
    a constant."""
    total = 0
    for inst in sch.trace.insts:
        if inst.kind.name not in ("CacheRead", "CacheWrite") or str(inst.attrs[-1]) not in _SHARED:
            continue
        cache, other = inst.outputs[0], inst.inputs[0]
        theirs = {sch.get_sref(loop) for loop in sch.get_loops(other)}
        elements = 1
        for loop in sch.get_loops(cache):
            if sch.get_sref(loop) in theirs:
                continue
            extent = sch.get(loop).extent
            if not hasattr(extent, "value"):
                return None
            elements *= int(extent.value)
        total += elements * int(sch.get(cache).writes[0].source.dtype.itemsize)
    return total * pipeline_stages(sch.trace)


@dataclasses.dataclass
class _Bound:
    """One `Bind` to a thread axis: the (tile, part) pairs whose product is its extent (None where
    some part is not a tile decision), and the extent's bounds."""

    axis: str
    parts: list[tuple[int, int]] | None
    low: int
    high: int


@dataclasses.dataclass
class _Cache:
    """A buffer cached in shared memory: for each of its dimensions, the coefficients of the consumer's
    iterators in its index and its extent; for each iterator, the (tile, part) pairs that it spans in
    one iteration of the compute-at loop; the element size."""

    coefficients: list[list[int]]
    extents: list[int]
    spans: list[list[tuple[int, int]]]
    itemsize: int


class SpacePlan:
    """One design space of the task `mod` (a replayed `Schedule` with its own decisions): its tile instructions (the
    extent each splits is the product of the space's own decision), each thread `Bind`'s parts and
    bounds, and, where the formula matches the space's own replay, its shared memory by formula."""

    def __init__(self, mod: Any, space: Any, max_threads: int):
        trace = space.trace
        self.insts = list(trace.insts)
        self.tiles: list[tuple[Any, int, int, int]] = []  # (inst, extent, n, max_innermost)
        self._powers: list[list[tuple[int, int]]] = []
        self.bounds: list[_Bound] = []  # threadIdx.x binds
        self.threads_checked = True
        part_of: dict[Any, tuple[int, int]] = {}  # ExprRV -> (tile, part)
        loop_parts: dict[Any, list[tuple[int, int]] | None] = {}  # LoopRV -> its (tile, part)s
        loop_at: dict[Any, tuple[Any, int]] = {}  # LoopRV of a GetLoops -> (block, position)
        tile_of: dict[tuple[Any, int], int] = {}  # (block, loop position) -> tile
        order: list[Any] = []  # the last reorder's loops
        threaded: set[tuple[int, int]] = set()
        caches: list[tuple[Any, Any]] = []  # (cache block, consumer block), shared, read
        computed_at: dict[Any, Any] = {}  # cache block -> its compute-at loop
        self.formula_ok = True
        for inst in self.insts:
            kind = inst.kind.name
            if kind == "GetLoops":
                for position, loop in enumerate(inst.outputs):
                    loop_at.setdefault(loop, (inst.inputs[0], position))
            elif kind == "SamplePerfectTile":
                decision = [int(v) for v in trace.get_decision(inst)]
                index = len(self.tiles)
                self.tiles.append((inst, math.prod(decision), int(inst.attrs[0]), int(inst.attrs[1])))
                self._powers.append(_prime_powers(math.prod(decision)))
                if inst.inputs[0] in loop_at:
                    tile_of[loop_at[inst.inputs[0]]] = index
                for part, rv in enumerate(inst.outputs):
                    part_of[rv] = (index, part)
            elif kind == "Split":
                for loop, factor in zip(inst.outputs, inst.inputs[1:]):
                    loop_parts[loop] = [part_of[factor]] if factor in part_of else None
            elif kind == "Reorder":
                order = list(inst.inputs)
            elif kind == "Fuse":
                parts = [loop_parts.get(loop) for loop in inst.inputs]
                loop_parts[inst.outputs[0]] = None if any(p is None for p in parts) else [f for p in parts for f in p]
            elif kind == "Bind":
                axis = str(inst.attrs[0])
                parts = loop_parts.get(inst.inputs[0])
                if axis.startswith(_THREADED):
                    threaded.update(parts or [])
                if axis == "threadIdx.x":
                    self.bounds.append(_Bound(axis, parts, 1, max_threads))
                elif axis.startswith("threadIdx"):
                    self.threads_checked = False  # a block's threads are x * y * z: not read here
            elif kind == "Annotate" and str(inst.attrs[0]) == _WARPS:
                self.threads_checked = False  # VerifyGPUCode counts threadIdx.x as a warp there
            elif kind == "Annotate" and str(inst.attrs[0]) in (_THREAD_LOW, _THREAD_HIGH):
                # MultiLevelTiling annotates a block's bounds right after binding its threads
                bound = self.bounds[-1] if self.bounds else None
                if bound is not None:
                    value = int(inst.inputs[1])
                    if str(inst.attrs[0]) == _THREAD_LOW:
                        bound.low = max(bound.low, value)
                    else:
                        bound.high = min(bound.high, value)
            elif kind in ("CacheRead", "CacheWrite") and str(inst.attrs[-1]) in _SHARED:
                if kind == "CacheWrite":
                    self.formula_ok = False  # a shared write cache: checked after the replay only
                else:
                    caches.append((inst.outputs[0], inst.inputs[0]))
            elif kind == "ComputeAt":
                computed_at[inst.inputs[0]] = inst.inputs[1]
        self.stages = pipeline_stages(trace)
        self.caches: list[_Cache] = []
        if self.formula_ok:
            try:
                self.caches = [
                    self._cache(space, cache, consumer, computed_at, order, loop_parts, threaded, tile_of)
                    for cache, consumer in caches
                ]
                self.formula_ok = self._matches(mod, space)
            except Exception:  # noqa: BLE001 - _Unsupported, a symbolic extent, a replay that raises
                self.formula_ok = False

    def _matches(self, mod: Any, space: Any, checks: int = 2) -> bool:
        """Whether the formula gives the shared memory of the space's own decisions and of `checks`
        random draws whose threads fit, each replayed on the task's `mod` (`shared_bytes`)."""
        decision = [np.asarray([[int(v) for v in space.trace.get_decision(inst)]]) for inst, *_ in self.tiles]
        if int(self.shared_bytes(decision)[0]) != shared_bytes(space):
            return False
        rng = np.random.default_rng(0)
        tiles, fit = self.draw(rng, 256)
        for row in np.flatnonzero(fit)[:checks]:
            sch = Schedule(mod, seed=1)
            self.trace(tiles, int(row)).apply_to_schedule(sch, remove_postproc=True)
            if int(self.shared_bytes([t[row : row + 1] for t in tiles])[0]) != shared_bytes(sch):
                return False
        return True

    @staticmethod
    def _cache(space, cache, consumer, computed_at, order, loop_parts, threaded, tile_of) -> _Cache:
        loop = computed_at.get(cache)
        if loop is None or loop not in order:
            raise _Unsupported
        inside = set(threaded)
        for later in order[order.index(loop) + 1 :]:
            inside.update(loop_parts.get(later) or [])
        block = space.get(consumer)
        buffer = space.get(cache).writes[0].source
        region = next((r for r in block.reads if r.source.same_as(buffer)), None)
        if region is None:
            raise _Unsupported
        variables = [iv.var for iv in block.iter_vars]
        spans = []
        for position, iv in enumerate(block.iter_vars):
            tile = tile_of.get((consumer, position))
            if tile is None:
                if int(iv.dom.extent) != 1:
                    raise _Unsupported
                spans.append([])
            else:
                spans.append([(t, p) for t, p in inside if t == tile])
        analyzer = sym.Analyzer()  # within the iterators' domains (`v // 768` is 0 for v < 768)
        for iv in block.iter_vars:
            analyzer.bind(iv.var, iv.dom)
        coefficients, extents = [], []
        for dim in region.region:
            linear = sym.detect_linear_equation(analyzer.simplify(dim.min), variables)
            if len(linear) != len(variables) + 1 or not hasattr(dim.extent, "value"):
                raise _Unsupported
            coefficients.append([abs(int(c)) for c in linear[:-1]])
            extents.append(int(dim.extent.value))
        return _Cache(coefficients, extents, spans, int(buffer.dtype.itemsize))

    def draw(self, rng: np.random.Generator, count: int) -> tuple[list[np.ndarray], np.ndarray]:
        """`count` draws of every tile instruction's decision (one `(count, n)` array a tile), and
        which of them have their threads within bounds (`threads_fit`)."""
        tiles = [
            perfect_tiles(rng, extent, n, count, inner, powers)
            for (_, extent, n, inner), powers in zip(self.tiles, self._powers)
        ]
        return tiles, self.threads_fit(tiles, count)

    def threads_fit(self, tiles: list[np.ndarray], count: int) -> np.ndarray:
        """Whether the `threadIdx.x` extent that each row of `tiles` gives is within its block's
        bounds (all rows where the space is not checked, `threads_checked`)."""
        fit = np.ones(count, dtype=bool)
        if not self.threads_checked:
            return fit
        for bound in self.bounds:
            if bound.parts is not None:
                extent = _product(tiles, bound.parts, count)
                fit &= (bound.low <= extent) & (extent <= bound.high)
        return fit

    def shared_bytes(self, tiles: list[np.ndarray]) -> np.ndarray | None:
        """The shared memory that each row of `tiles` asks for, by formula (None where the formula
        does not hold for this space)."""
        if not self.formula_ok:
            return None
        count = len(tiles[0]) if tiles else 1
        total = np.zeros(count, dtype=np.int64)
        for cache in self.caches:
            spans = [_product(tiles, parts, count) for parts in cache.spans]
            elements = np.ones(count, dtype=np.int64)
            for coefficients, extent in zip(cache.coefficients, cache.extents):
                elements *= sum((c * (s - 1) for c, s in zip(coefficients, spans) if c), np.int64(extent))
            total += elements * cache.itemsize
        return total * self.stages

    def trace(self, tiles: list[np.ndarray], row: int) -> Any:
        """The design space's trace with row `row` of `tiles` decided and every other decision left to
        the replay."""
        return Trace(self.insts, {inst: [int(v) for v in tile[row]] for (inst, *_), tile in zip(self.tiles, tiles)})


def _product(tiles: list[np.ndarray], parts: list[tuple[int, int]], count: int) -> np.ndarray:
    out = np.ones(count, dtype=np.int64)
    for t, p in parts:
        out = out * tiles[t][:, p]
    return out


class _Unsupported(Exception):
    """The trace does not have the shape the shared-memory formula reads."""
