"""The access and reuse walker: per_store_feature.cc's group 2 (buffer access) for every store of a program.

Fidelity: the buffer-access columns (4-21 of an access record) follow per_store_feature.cc
(group 2) line by line, including its stride heuristic, its loop-invariant / serial reuse rules and
its reuse state shared across the stores of a program, so for every non-constant store they equal
the PerStoreFeature slot of the same buffer (tests check this). PerStoreFeature's internal
SimplifyForFeatureExtraction pass is not exposed to Python; the walker emulates it (serial unit
loops without annotations are dropped and their variable reads as 0, load-free selects read as 1).
Stores of a constant (accumulator init), which PerStoreFeature skips, get access records too (the
needle starts with one) but do not feed the reuse state of later stores, so the other stores still
match PerStoreFeature.

Two PerStoreFeature behaviours are reproduced on purpose: (1) its analyzer first pins every loop
variable to the loop's min and later widens only the integer bounds, so the modular-set facts stay
pinned and `x % c` of loop variables is bounded to one value (a fused `i_j // 4`, `i_j % 4` pair
touches 1/4 of the rows it seems to); (2) its buffer slots are sorted by (lines, bytes, name).
One difference remains: PerStoreFeature removes unit loops *before* LowerCrossThreadReduction, so a
cross-thread reduction whose serial part is a unit loop has no in-thread buffer there, while our
lowering (like the real build) keeps that buffer: such programs have one stored buffer more in
`access` / `psa` than in `stmt`.

Column 0 of an access record counts what PerStoreFeature counts as float ops (add, sub, mul, div,
mod, min, max and float-valued calls) times the product of all enclosing loop extents.
"""

from __future__ import annotations

import dataclasses

from data.features.arith import INF, bound, coefficient
from data.features.graph import Graph, expr_loads, free_vars
from data.features.program import CACHE_LINE_BYTES, slog

__all__ = ["FLOAT_OPS_ALL", "Access", "AccessWalker", "Loop", "Store", "collect_stores", "store_accesses"]

FLOAT_OPS_ALL = {"add", "sub", "mul", "div", "mod", "fdiv", "fmod", "min", "max", "call"}
"""Float ops counted for access column 0: PerStoreFeature's float counters (mad is never set)."""
_THREAD_BINDING = 4  # tirx.ForKind.THREAD_BINDING


@dataclasses.dataclass
class Loop:
    node: int
    var: int
    min: int
    extent: int | None
    kind: int
    tag: str


@dataclasses.dataclass
class Store:
    buffer: int
    value: tuple
    indices: tuple
    loops: tuple  # enclosing Loop objects, outermost first
    constant: bool


def collect_stores(g: Graph) -> tuple[list[Store], set[int]]:
    """Stores of every PrimFunc in program order, and the variables of allocated buffers."""
    stores: list[Store] = []
    allocated: set[int] = set()
    loops: list[Loop] = []
    nodes = g.nodes

    def visit(i: int) -> None:
        node = nodes[i]
        t, d = node["type"], node["data"]
        if t == "tirx.SeqStmt":
            for s in g.array(d["seq"]):
                visit(s)
        elif t == "tirx.For":
            lo, ext = g.int_value(d["min"]), g.int_value(d["extent"])
            if ext == 0:
                return
            anns = nodes[d["annotations"]]["data"] if d["annotations"] else []
            if lo == 0 and ext == 1 and d["kind"] == 0 and not anns:
                g.unit.add(d["loop_var"])
                visit(d["body"])
                return
            tag = ""
            if d["kind"] == _THREAD_BINDING and d["thread_binding"]:
                tag = g.string(g.data(d["thread_binding"])["thread_tag"])
            if lo is None:
                lo = bound(g.expr(d["min"]), {})[0]
            g.var_min[d["loop_var"]] = lo
            loops.append(Loop(i, d["loop_var"], lo, ext, d["kind"], tag))
            visit(d["body"])
            loops.pop()
        elif t == "s_tir.SBlockRealize":
            visit(d["block"])
        elif t == "s_tir.SBlock":
            allocated.update(g.array(d["alloc_buffers"]))
            if d["init"]:
                visit(d["init"])
            visit(d["body"])
        elif t == "tirx.BufferStore":
            value = g.expr(d["value"])
            stores.append(
                Store(
                    d["buffer"],
                    value,
                    tuple(g.expr(x) for x in g.array(d["indices"])),
                    tuple(loops),
                    value[0] in ("c", "f"),
                )
            )
        elif t == "tirx.IfThenElse":
            visit(d["then_case"])
            if d["else_case"]:
                visit(d["else_case"])
        elif t in ("tirx.AllocBuffer", "tirx.DeclBuffer"):
            allocated.add(d["buffer"])
        elif t in ("tirx.AttrStmt", "tirx.While") or (isinstance(d, dict) and "body" in d and t.startswith("tirx.")):
            visit(d["body"])

    for node in g.nodes:
        if node["type"] == "tirx.PrimFunc":
            visit(node["data"]["body"])
    return stores, allocated


class Access:
    """One buffer of one store: group-2 sub-feature of per_store_feature.cc."""

    __slots__ = ("buffer", "indices", "kind", "numel", "row", "shape", "sort_key")

    def __init__(self, buffer: int, kind: int, indices: list):
        self.buffer, self.kind, self.indices = buffer, kind, indices  # kind: 0 read, 1 write, 2 rw
        self.numel: list[int] = []  # elements touched under each enclosing loop
        self.shape: list[int] = []  # touched extent per dimension under the outermost loop
        self.row: list[float] = []  # the 18 group-2 values
        self.sort_key: tuple = ()  # PerStoreFeature's slot order: lines desc, bytes desc, name


def store_accesses(store: Store) -> list[Access]:
    """Loaded buffers in order of first load, then the stored one; rw when the stored one is read."""
    stored = Access(store.buffer, 1, [store.indices])
    order: list[Access] = []
    by_buffer = {store.buffer: stored}
    for ld in expr_loads(store.value, []):
        acc = by_buffer.get(ld[2])
        if acc is None:
            acc = by_buffer[ld[2]] = Access(ld[2], 0, [ld[3]])
            order.append(acc)
        elif acc.kind == 1:
            acc.kind = 2
        elif acc.kind == 0:
            acc.indices.append(ld[3])
    return order + [stored]


class AccessWalker:
    """Group-2 features of every store of one program, with the program-wide reuse state."""

    def __init__(self, g: Graph):
        self.g = g
        self.touched: dict[int, dict[int, list[int]]] = {}  # loop node -> buffer -> numel per store

    def store_features(self, store: Store, accesses: list[Access]) -> None:
        """Fill `acc.row` (18 group-2 values) of each access (SetRegion/SetStride/SetReuse/SetFeature)."""
        g, loops = self.g, store.loops
        n = len(loops)
        env = {lp.var: (lp.min, lp.min) for lp in loops}
        pushed = []
        for acc in accesses:
            acc.numel = [0] * n
            acc.shape = [1] * len(g.buffer(acc.buffer)[3])
        for i in range(n - 1, -1, -1):
            lp = loops[i]
            ext = lp.extent if lp.extent is not None else INF - lp.min
            env[lp.var] = (lp.min, lp.min + ext - 1)
            per_loop = self.touched.setdefault(lp.node, {})
            for acc in accesses:
                shape, numel = [], 1
                for dim in range(len(acc.indices[0])):
                    lo, hi = INF, -INF
                    for idx in acc.indices:
                        b = bound(idx[dim], env)
                        lo, hi = min(lo, b[0]), max(hi, b[1])
                    numel *= hi - lo + 1
                    shape.append(hi - lo + 1)
                acc.shape = shape
                acc.numel[i] = max(0, numel)
                per_loop.setdefault(acc.buffer, []).append(acc.numel[i])
                pushed.append((per_loop, acc.buffer))
        top_bytes = sum(g.buffer(a.buffer)[2] for a in accesses) if n else 0
        prod = 1
        for lp in loops:
            prod *= lp.extent or 1
        for acc in accesses:
            self._set_row(acc, loops, prod, top_bytes)
        if store.constant:  # PerStoreFeature skips constant stores: keep them out of the reuse state
            for per_loop, buf in reversed(pushed):
                numels = per_loop[buf]
                numels.pop()
                if not numels:
                    del per_loop[buf]

    def _set_row(self, acc: Access, loops: tuple, prod: int, top_bytes: int) -> None:
        g, n = self.g, len(loops)
        _, _, nbytes, shape, _ = g.buffer(acc.buffer)
        ndim = len(shape)
        strides = [1] * ndim
        for i in range(ndim - 2, -1, -1):
            strides[i] = strides[i + 1] * shape[i + 1]
        continuous = 1
        for i in range(ndim - 1, -1, -1):
            if acc.shape[i] == shape[i]:
                continuous = shape[i] * nbytes
                break
        # SetStride
        stride, i = 0, n - 1
        while i >= 0:
            stride = _var_stride(acc.indices, strides, loops[i].var)
            if stride:
                break
            i -= 1
        innermost = stride if i == n - 1 else 0
        non_strided = 1
        for j in range(n - 1, i, -1):
            non_strided *= loops[j].extent or 1
        # SetReuse
        region_vars: set = set()
        for idx in acc.indices:
            for e in idx:
                free_vars(e, region_vars)
        reuse, dis_iter, dis_bytes, count = 2, 0.0, 0.0, 0
        for i in range(n - 1, -1, -1):
            lp = loops[i]
            if lp.var not in region_vars:
                reuse, count = 0, lp.extent or 1
                dis_iter = 1.0
                for j in range(n - 1, i, -1):
                    dis_iter *= loops[j].extent or 1
                if i == n - 1:
                    dis_bytes = float(top_bytes)
                else:
                    dis_bytes = float(sum(sum(v) * g.buffer(b)[2] for b, v in self.touched[loops[i + 1].node].items()))
                break
            touched = self.touched[lp.node][acc.buffer]
            if len(touched) >= 2:
                ext = lp.extent or 1
                reuse, count = 1, len(touched) - 1
                dis_iter = min(touched) / ext
                dis_bytes = sum(sum(v) * g.buffer(b)[2] for b, v in self.touched[lp.node].items()) / ext
                break
        # SetFeature
        total = float(nbytes * prod)
        if n == 0:
            unique, lines, unique_lines = 1.0, 1.0, 1.0
        else:
            unique = float(acc.numel[0] * nbytes)
            lines = max(1.0, prod / non_strided * min(1.0, stride * nbytes / CACHE_LINE_BYTES))
            unique_lines = max(1.0, unique / min(CACHE_LINE_BYTES, continuous))
        proxy = count if count > 0 else 0.5
        acc.row = [
            float(acc.kind == 0),
            float(acc.kind == 1),
            float(acc.kind == 2),
            slog(total),
            slog(unique),
            slog(lines),
            slog(unique_lines),
            float(reuse == 0),
            float(reuse == 1),
            float(reuse == 2),
            slog(dis_iter),
            slog(dis_bytes),
            slog(count),
            slog(total / proxy),
            slog(unique / proxy),
            slog(lines / proxy),
            slog(unique_lines / proxy),
            slog(innermost),
        ]
        acc.sort_key = (-lines, -total, g.buffer(acc.buffer)[0])


def _var_stride(multi_indices: list, strides: list, var: int) -> int:
    """GetVarStride: the smallest |coefficient| x buffer stride of `var` over the accesses."""
    result = None
    for index in multi_indices:
        for dim in range(len(strides) - 1, -1, -1):
            coef = coefficient(index[dim], var)
            if coef:
                s = abs(coef) * strides[dim]
                result = s if result is None else min(result, s)
                break
    return result or 0
