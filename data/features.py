"""Per-program features of a scheduled TIR module (shared/spec/pam.md section 1, psa.md section 1).

From ONE lowering of a scheduled module (MetaSchedule's PerStoreFeature pass list) this module computes
the 23-wide per-access records and their scope-digit string, the GEMM matrix found at the needle
'20101112', and the 11-wide PSA rows; `workload_tags` gives the 10 tags of a workload. The 164-wide
statement rows come from MetaSchedule's own PerStoreFeature (C++, parallel), never re-implemented.

Why a JSON graph: walking TIR through Python reflection costs 10-30 ms a program. Here the lowered
module is serialized once in C++ (`tvm.ir.save_json`) and the parsed graph (plain lists and dicts)
is walked; expressions are compiled once into small tuples.

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

import concurrent.futures
import dataclasses
import json
import logging
import math
import re
from collections.abc import Sequence

import numpy as np

import tvm_env
from data.schema import ACCESS_DIM, GEMM_ROWS, PSA_DIM, STMT_DIM, TAG_DIM, TAG_NAMES
from tvm_env import ms, tvm

__all__ = [
    "ACCESS_COLUMNS",
    "GEMM_NEEDLE",
    "PSA_COLUMNS",
    "ProgramFeatures",
    "featurize_candidates",
    "lower_for_features",
    "per_store_rows",
    "walk_features",
    "workload_tags",
]

log = logging.getLogger(__name__)

ACCESS_COLUMNS = (
    "flops",
    "scope_global",
    "scope_shared",
    "scope_local",
    "read",
    "write",
    "read_write",
    "bytes",
    "unique_bytes",
    "lines",
    "unique_lines",
    "reuse_loop",
    "reuse_serial",
    "reuse_none",
    "reuse_dis_iter",
    "reuse_dis_bytes",
    "reuse_ct",
    "bytes_d_reuse_ct",
    "unique_bytes_d_reuse_ct",
    "lines_d_reuse_ct",
    "unique_lines_d_reuse_ct",
    "stride",
    "alloc_bytes",
)
"""Names of the 23 access-record columns (pam.md 1.3); counts are slog'ed, one-hots are 0/1."""
PSA_COLUMNS = (
    "flops_per_thread",
    "total_flops",
    "registers",
    "memory_work",
    "shared_footprint",
    "dram_traffic",
    "reuse",
    "is_gpu",
    "grid",
    "block",
    "vthread",
)
"""Names of the 11 PSA columns (psa.md 1), raw element counts (no log)."""
GEMM_NEEDLE = "20101112"
"""Scope digits of the canonical GPU GEMM: local init, A.shared <- A, B.shared <- B, update."""
CACHE_LINE_BYTES = 64
"""PerStoreFeature's default cache line."""

assert len(ACCESS_COLUMNS) == ACCESS_DIM and len(PSA_COLUMNS) == PSA_DIM and len(GEMM_NEEDLE) == GEMM_ROWS


@dataclasses.dataclass
class ProgramFeatures:
    """Features of one scheduled program. Arrays are float32; a part that was not asked for is None.

    stmt: (n_stmt, 164) PerStoreFeature rows (one per stored buffer, constant stores skipped).
    access: (n_access, 23) per-access records in program order (ACCESS_COLUMNS).
    scopes: one digit per access record, '0' global, '1' shared, '2' local.
    gemm: (8, 23) the access records at the first GEMM_NEEDLE in `scopes`, zeros when absent.
    gemm_found: whether the needle was found.
    psa: (n_psa, 11) PSA rows, one per stored buffer in order of first store (PSA_COLUMNS).
    An empty program gives (0, F) arrays.
    """

    stmt: np.ndarray | None
    access: np.ndarray | None
    scopes: str | None
    gemm: np.ndarray | None
    gemm_found: bool
    psa: np.ndarray | None


def slog(x: float) -> float:
    """sign(x) * log2(|x| + 1), the compression of every count feature."""
    return math.copysign(math.log2(abs(x) + 1.0), x)


# ---------------------------------------------------------------------------------------------------
# Lowering: the PerStoreFeature pass list (guide.md 2a), minus its internal unit-loop pass, which the
# walker emulates.

_ST, _TT = tvm.s_tir.transform, tvm.tirx.transform
_LOWER = tvm.transform.Sequential(
    [
        _ST.RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True),
        _ST.LowerCrossThreadReduction(),
        _ST.LowerInitBlock(),
        _ST.PlanAndUpdateBufferAllocationLocation(),
        _ST.ConvertBlocksToOpaque(),
        _ST.CompactBufferAllocation(),
        _TT.StmtSimplify(),
        _ST.LowerAutoCopy(),
        _ST.UnifyThreadBinding(),
        _ST.LowerMatchBuffer(),
        _TT.StmtSimplify(),
    ]
)


def lower_for_features(mod: tvm.IRModule) -> tvm.IRModule:
    """The scheduled module as PerStoreFeature sees it (init blocks lowered, allocations compacted)."""
    return _LOWER(mod)


# ---------------------------------------------------------------------------------------------------
# The JSON graph of a module and compiled expressions.
#
# A compiled expression is a tuple (kind, dtype, data, children):
#   ('c', dt, int, ())  integer constant       ('f', dt, float, ())  float constant
#   ('v', dt, var, ())  variable (node index)  ('ld', dt, buffer, indices)  buffer load
#   (op, dt, None, (a, b)) for op in _BINARY    ('cast' | 'sel' | 'call' | 'cmp' | 'any', dt, x, children)

_BINARY = {
    "prim.Add": "add",
    "prim.Sub": "sub",
    "prim.Mul": "mul",
    "prim.Div": "div",
    "prim.Mod": "mod",
    "prim.FloorDiv": "fdiv",
    "prim.FloorMod": "fmod",
    "prim.Min": "min",
    "prim.Max": "max",
}
_LOGIC = {"prim.EQ", "prim.NE", "prim.LT", "prim.LE", "prim.GT", "prim.GE", "prim.And", "prim.Or", "prim.Not"}
_FLOAT_OPS_ALL = {"add", "sub", "mul", "div", "mod", "fdiv", "fmod", "min", "max", "call"}
"""Float ops counted for access column 0: PerStoreFeature's float counters (mad is never set)."""
_FLOAT_OPS_PSA = {"add", "sub", "mul", "div", "mod", "fdiv", "fmod"}
"""Float ops counted for PSA column 0: add/sub, mul, div/mod; no comparisons, max/min or calls."""
_INF = (1 << 63) - 1
_SHARED, _LOCAL = 1, 2
_THREAD_BINDING = 4  # tirx.ForKind.THREAD_BINDING
_DTYPE = re.compile(r"([a-z]+?)(\d*)(?:_[a-z0-9]+)?(?:x(\d+))?$")


def _dtype_bytes(dtype: str) -> int:
    """DataType::StorageBytes: bytes of one element ((bits * lanes + 7) // 8; bool is 1 bit)."""
    if dtype == "bool":
        return 1
    m = _DTYPE.match(dtype)
    bits = int(m.group(2)) if m and m.group(2) else 32
    lanes = int(m.group(3)) if m and m.group(3) else 1
    return (bits * lanes + 7) // 8


def _dtype_range(dtype: str) -> tuple[int, int]:
    """const_int_bound's `Everything(dtype)`."""
    if dtype == "bool":
        return 0, 1
    m = _DTYPE.match(dtype)
    bits = int(m.group(2)) if m and m.group(2) else 64
    if dtype.startswith("int") and bits < 64:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if dtype.startswith("uint") and bits < 64:
        return 0, (1 << bits) - 1
    return -_INF, _INF


def _scope_digit(scope: str) -> int:
    if scope.startswith("shared"):
        return _SHARED
    if scope.startswith(("local", "warp", "wmma.", "m16n8k8.", "metal.simdgroup")):
        return _LOCAL
    return 0


class _Graph:
    """Parsed `tvm.ir.save_json` graph with cached decoders (node indices are object identities)."""

    def __init__(self, text: str, unit_vars: bool = True):
        graph = json.loads(text)
        self.nodes: list[dict] = graph["nodes"]
        self.root: int = graph["root_index"]
        self.unit: set[int] = set()  # variables of dropped unit loops (read as 0)
        self.var_min: dict[int, int] = {}  # loop variable -> loop min (PerStoreFeature's modular facts)
        self.fold_units = unit_vars
        self._expr: dict[int, tuple] = {}
        self._dtype: dict[int, str] = {}
        self._buffer: dict[int, tuple] = {}

    def data(self, i: int):
        return self.nodes[i]["data"]

    def type(self, i: int) -> str:
        return self.nodes[i]["type"]

    def array(self, i: int) -> list[int]:
        return self.nodes[i]["data"] if i else []

    def string(self, i: int) -> str:
        return self.nodes[i]["data"] if i else ""

    def int_value(self, i: int) -> int | None:
        """The value of an IntImm node, None for anything else."""
        node = self.nodes[i]
        if node["type"] != "ir.IntImm":
            return None
        return int(self.nodes[node["data"]["value"]]["data"])

    def dtype(self, ty: int) -> str:
        dt = self._dtype.get(ty)
        if dt is None:
            node = self.nodes[ty]
            dt = self._dtype[ty] = node["data"]["dtype"] if node["type"] == "ir.PrimType" else "handle"
        return dt

    def buffer(self, var: int) -> tuple[str, str, int, tuple[int, ...], int]:
        """(name, dtype, element bytes, static shape, scope digit) of a buffer variable."""
        info = self._buffer.get(var)
        if info is None:
            d = self.data(var)
            bt = self.data(d["ty"])
            dtype = self.dtype(bt["dtype"])
            shape = []
            for s in self.array(bt["shape"]):
                v = self.int_value(s)
                if v is None:  # symbolic extent: const_int_bound max, else 1 (GetBufferShape)
                    hi = _bound(self.expr(s), {})[1]
                    v = hi if 0 <= hi < _INF else 1
                shape.append(v)
            scope = _scope_digit(self.string(bt["storage_scope"]) or "global")
            info = self._buffer[var] = (self.string(d["name"]), dtype, _dtype_bytes(dtype), tuple(shape), scope)
        return info

    def expr(self, i: int) -> tuple:
        e = self._expr.get(i)
        if e is None:
            e = self._expr[i] = self._compile(i)
        return e

    def _compile(self, i: int) -> tuple:
        node = self.nodes[i]
        t, d = node["type"], node["data"]
        if t in _BINARY:
            e = _fold(_BINARY[t], self.dtype(d["ty"]), self.expr(d["a"]), self.expr(d["b"]))
            if e[0] in ("fmod", "mod") and e[3][1][0] == "c" and e[3][1][2] > 0:
                a = _modular(e[3][0], self.var_min)
                gcd = _gcd0(a[0], e[3][1][2])
                if gcd > 1:
                    e = (e[0], e[1], (gcd, a[1] % gcd), e[3])
            return e
        if t == "ir.Var":
            dt = self.dtype(d["ty"])
            return ("c", dt, 0, ()) if i in self.unit else ("v", dt, i, ())
        if t == "ir.IntImm":
            return ("c", self.dtype(d["ty"]), int(self.nodes[d["value"]]["data"]), ())
        if t == "ir.FloatImm":
            return ("f", self.dtype(d["ty"]), float(d["value"]), ())
        if t == "ir.TensorLoad":
            return ("ld", self.dtype(d["ty"]), d["source"], tuple(self.expr(x) for x in self.array(d["indices"])))
        if t == "prim.Cast":
            return ("cast", self.dtype(d["ty"]), None, (self.expr(d["value"]),))
        if t == "prim.Select":
            dt = self.dtype(d["ty"])
            kids = (self.expr(d["condition"]), self.expr(d["true_value"]), self.expr(d["false_value"]))
            if self.fold_units and not any(_has_load(k) for k in kids):
                return ("f", dt, 1.0, ()) if dt.startswith(("float", "bfloat")) else ("c", dt, 1, ())
            return ("sel", dt, None, kids)
        if t == "ir.Call":
            op = d["op"]
            name = self.data(op) if self.type(op) == "ir.Op" else ""
            return ("call", self.dtype(d["ty"]), name, tuple(self.expr(x) for x in self.array(d["args"])))
        if t in _LOGIC:
            kids = tuple(self.expr(d[k]) for k in ("a", "b") if k in d)
            return ("cmp", "bool", t, kids)
        ty = d.get("ty") if isinstance(d, dict) else None
        kids = tuple(self.expr(d[k]) for k in ("value", "body", "base", "stride") if isinstance(d, dict) and k in d)
        return ("any", self.dtype(ty) if ty else "int64", t, kids)


def _fold(op: str, dt: str, a: tuple, b: tuple) -> tuple:
    """Constant folding that StmtSimplify applies once unit-loop variables have become 0."""
    ca, cb = a[0] == "c", b[0] == "c"
    if ca and cb:
        x, y = a[2], b[2]
        if op == "add":
            return ("c", dt, x + y, ())
        if op == "sub":
            return ("c", dt, x - y, ())
        if op == "mul":
            return ("c", dt, x * y, ())
        if op == "fdiv" and y:
            return ("c", dt, x // y, ())
        if op == "fmod" and y:
            return ("c", dt, x % y, ())
    if op == "add":
        if ca and a[2] == 0:
            return b
        if cb and b[2] == 0:
            return a
    elif op == "sub":
        if cb and b[2] == 0:
            return a
    elif op == "mul":
        if (ca and a[2] == 0) or (cb and b[2] == 0):
            return ("c", dt, 0, ())
        if ca and a[2] == 1:
            return b
        if cb and b[2] == 1:
            return a
    elif op in ("fdiv", "div"):
        if cb and b[2] == 1:
            return a
        if ca and a[2] == 0:
            return a
    elif op in ("fmod", "mod"):
        if (cb and b[2] == 1) or (ca and a[2] == 0):
            return ("c", dt, 0, ())
    return (op, dt, None, (a, b))


def _has_load(e: tuple) -> bool:
    return e[0] == "ld" or any(_has_load(k) for k in e[3])


def _vars(e: tuple, out: set) -> set:
    if e[0] == "v":
        out.add(e[2])
    for k in e[3]:
        _vars(k, out)
    return out


def _count_ops(e: tuple, kinds: set) -> int:
    """Number of float-typed nodes of the given kinds in an expression (loads' indices included)."""
    n = 1 if e[0] in kinds and e[1].startswith("float") else 0
    for k in e[3]:
        n += _count_ops(k, kinds)
    return n


def _loads(e: tuple, out: list) -> list:
    """Loads in post-order (PostOrderVisit's order)."""
    for k in e[3]:
        _loads(k, out)
    if e[0] == "ld":
        out.append(e)
    return out


def _sat(x: int) -> int:
    """Saturate to const_int_bound's +-infinity (int64 limits)."""
    return _INF if x >= _INF else max(-_INF, x)


def _div(x: int, y: int, floor: bool) -> int:
    if x in (_INF, -_INF):
        return x if y > 0 else -x
    return (
        x // y if floor else int(x / y) if abs(x) < 1 << 52 else (abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1)
    )


def _corners(a: tuple, b: tuple, f) -> tuple[int, int]:
    p = (f(a[0], b[0]), f(a[1], b[1]), f(a[0], b[1]), f(a[1], b[0]))
    return min(p), max(p)


def _bound(e: tuple, env: dict) -> tuple[int, int]:
    """sym::ConstIntBound of an integer expression, variables bound by `env` (var -> (lo, hi)).

    Mirrors const_int_bound.cc, including the modular-set tightening of a mod by a constant, whose
    modular facts (`e[2]` of a mod node, see `_Graph._modular`) are those PerStoreFeature's analyzer
    holds: every loop variable pinned to its loop's min.
    """
    k = e[0]
    if k == "c":
        return e[2], e[2]
    if k == "v":
        b = env.get(e[2])
        return b if b is not None else _dtype_range(e[1])
    if k == "add":
        a, b = _bound(e[3][0], env), _bound(e[3][1], env)
        return _sat(a[0] + b[0]), _sat(a[1] + b[1])
    if k == "sub":
        a, b = _bound(e[3][0], env), _bound(e[3][1], env)
        return _sat(a[0] - b[1]), _sat(a[1] - b[0])
    if k == "mul":
        a, b = _bound(e[3][0], env), _bound(e[3][1], env)
        lo, hi = _corners(a, b, lambda x, y: x * y)
        return _sat(lo), _sat(hi)
    if k in ("fdiv", "div"):
        a, b = _bound(e[3][0], env), _bound(e[3][1], env)
        if b[0] == 0:
            b = (1, b[1])
        floor = k == "fdiv"

        def f(x, y):
            return _div(x, y, floor)

        if b[0] <= 0 <= b[1]:
            everything = _dtype_range(e[1])
            neg = _corners(a, (b[0], -1), f) if b[0] < 0 else everything
            pos = _corners(a, (1, b[1]), f) if b[1] > 0 else everything
            return min(neg[0], pos[0]), max(neg[1], pos[1])
        return _corners(a, b, f)
    if k in ("fmod", "mod"):
        a, b = _bound(e[3][0], env), _bound(e[3][1], env)
        if b[0] == 0:
            b = (1, b[1])
        if b[0] <= 0:
            if k == "mod":
                return _dtype_range(e[1])
            r = _dtype_range(e[1])
            return max(min(0, b[0] + 1), r[0]), min(max(0, b[1] - 1), r[1])
        cap = b[1] - 1
        if a[0] >= 0:
            out = a if a[1] < b[0] else (0, min(a[1], cap))
        elif k == "fmod":
            out = (0, cap)
        elif a[1] < 0:
            out = a if a[0] > -b[0] else (max(a[0], -cap), 0)
        else:
            out = (max(a[0], -cap), min(max(a[1], 0), cap))
        if e[2] is not None:  # modular tightening: a = base (mod gcd), gcd > 1
            gcd, base = e[2]
            modulus = b[0]
            if k == "fmod" or a[0] >= 0:
                tight = (base, modulus - gcd + base)
            else:
                neg = (gcd - base) % gcd
                lo = -(modulus - gcd + neg)
                tight = (lo, -neg) if a[1] < 0 else (lo, modulus - gcd + base)
            out = (max(out[0], tight[0]), min(out[1], tight[1]))
        return out
    if k == "min":
        a, b = _bound(e[3][0], env), _bound(e[3][1], env)
        return min(a[0], b[0]), min(a[1], b[1])
    if k == "max":
        a, b = _bound(e[3][0], env), _bound(e[3][1], env)
        return max(a[0], b[0]), max(a[1], b[1])
    if k == "cast":
        a, r = _bound(e[3][0], env), _dtype_range(e[1])
        return max(a[0], r[0]), min(a[1], r[1])
    if k == "sel":
        a, b = _bound(e[3][1], env), _bound(e[3][2], env)
        return min(a[0], b[0]), max(a[1], b[1])
    return _dtype_range(e[1])


def _gcd0(a: int, b: int) -> int:
    """ZeroAwareGCD."""
    return math.gcd(a, b)


def _mod_entry(coeff: int, base: int) -> tuple[int, int]:
    coeff = abs(coeff)
    return (coeff, base % coeff) if coeff else (0, base)


_EVERYTHING = (1, 0)


def _modular(e: tuple, var_min: dict) -> tuple[int, int]:
    """sym::ModularSet (coeff, base) of an integer expression when every loop variable is pinned
    to its min (`var_min`), as in PerStoreFeature's analyzer."""
    k = e[0]
    if k == "c":
        return (0, e[2])
    if k == "v":
        m = var_min.get(e[2])
        return (0, m) if m is not None else _EVERYTHING
    if k in ("add", "sub"):
        a, b = _modular(e[3][0], var_min), _modular(e[3][1], var_min)
        return _mod_entry(_gcd0(a[0], b[0]), a[1] + b[1] if k == "add" else a[1] - b[1])
    if k == "mul":
        a, b = _modular(e[3][0], var_min), _modular(e[3][1], var_min)
        coeff = _gcd0(a[0] * b[0], _gcd0(a[0] * b[1], a[1] * b[0]))
        return _mod_entry(coeff, a[1] * b[1])
    if k in ("fdiv", "div", "fmod", "mod"):
        b = _modular(e[3][1], var_min)
        if b[0] != 0 or b[1] == 0:
            return _EVERYTHING
        val, a = b[1], _modular(e[3][0], var_min)
        nonneg = k in ("fdiv", "fmod") or _bound(e[3][0], {v: (m, m) for v, m in var_min.items()})[0] >= 0
        if k in ("fdiv", "div"):
            if a[0] % val == 0:
                if a[1] == 0:
                    return (abs(a[0] // val), 0)
                if a[1] > 0 and val > 0 and nonneg:
                    return _mod_entry(a[0] // val, a[1] // val)
            return _EVERYTHING
        coeff = _gcd0(a[0], val)
        if a[1] % coeff == 0 or (a[1] > 0 and nonneg):
            return _mod_entry(coeff, a[1] % coeff)
        return _EVERYTHING
    if k in ("min", "max", "sel"):
        a, b = (_modular(x, var_min) for x in e[3][-2:])
        coeff = _gcd0(a[0], b[0])
        if coeff == 0:
            return a if a[1] == b[1] else _EVERYTHING
        b0, b1 = a[1] % coeff, b[1] % coeff
        return _mod_entry(coeff, b0) if b0 == b1 else _mod_entry(_gcd0(_gcd0(b0, b1), coeff), b0)
    if k == "cast":
        return _modular(e[3][0], var_min)
    return _EVERYTHING


def _coefficient(e: tuple, var: int) -> int:
    """CoefficientExtractor of per_store_feature.cc (post-order state machine, quirks kept)."""
    state = [0, False, False, False]  # stride, visited_var, visited_add, visited_mul

    def visit(x: tuple) -> None:
        k = x[0]
        for c in x[3]:
            visit(c)
        if k == "mul":
            if state[1] and not state[2]:
                a, b = x[3]
                if a[0] == "c":
                    state[3], state[0] = True, a[2]
                elif b[0] == "c":
                    state[3], state[0] = True, b[2]
        elif k == "add":
            if state[1] and not state[3]:
                state[2], state[0] = True, 1
        elif k == "v" and x[2] == var:
            state[1], state[0] = True, 2

    visit(e)
    if state[1] and not state[3] and not state[2]:
        return 1
    return state[0] if state[1] else 0


# ---------------------------------------------------------------------------------------------------
# Walking the lowered program.


@dataclasses.dataclass
class _Loop:
    node: int
    var: int
    min: int
    extent: int | None
    kind: int
    tag: str


@dataclasses.dataclass
class _Store:
    buffer: int
    value: tuple
    indices: tuple
    loops: tuple  # enclosing _Loop objects, outermost first
    constant: bool


def _collect(g: _Graph) -> tuple[list[_Store], set[int]]:
    """Stores of every PrimFunc in program order, and the variables of allocated buffers."""
    stores: list[_Store] = []
    allocated: set[int] = set()
    loops: list[_Loop] = []
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
                lo = _bound(g.expr(d["min"]), {})[0]
            g.var_min[d["loop_var"]] = lo
            loops.append(_Loop(i, d["loop_var"], lo, ext, d["kind"], tag))
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
                _Store(
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


class _Access:
    """One buffer of one store: group-2 sub-feature of per_store_feature.cc."""

    __slots__ = ("buffer", "indices", "kind", "numel", "row", "shape", "sort_key")

    def __init__(self, buffer: int, kind: int, indices: list):
        self.buffer, self.kind, self.indices = buffer, kind, indices  # kind: 0 read, 1 write, 2 rw
        self.numel: list[int] = []  # elements touched under each enclosing loop
        self.shape: list[int] = []  # touched extent per dimension under the outermost loop
        self.row: list[float] = []  # the 18 group-2 values
        self.sort_key: tuple = ()  # PerStoreFeature's slot order: lines desc, bytes desc, name


def _accesses(store: _Store) -> list[_Access]:
    """Loaded buffers in order of first load, then the stored one; rw when the stored one is read."""
    stored = _Access(store.buffer, 1, [store.indices])
    order: list[_Access] = []
    by_buffer = {store.buffer: stored}
    for ld in _loads(store.value, []):
        acc = by_buffer.get(ld[2])
        if acc is None:
            acc = by_buffer[ld[2]] = _Access(ld[2], 0, [ld[3]])
            order.append(acc)
        elif acc.kind == 1:
            acc.kind = 2
        elif acc.kind == 0:
            acc.indices.append(ld[3])
    return order + [stored]


class _Walker:
    """Group-2 features of every store of one program, with the program-wide reuse state."""

    def __init__(self, g: _Graph):
        self.g = g
        self.touched: dict[int, dict[int, list[int]]] = {}  # loop node -> buffer -> numel per store

    def store_features(self, store: _Store, accesses: list[_Access]) -> None:
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
            ext = lp.extent if lp.extent is not None else _INF - lp.min
            env[lp.var] = (lp.min, lp.min + ext - 1)
            per_loop = self.touched.setdefault(lp.node, {})
            for acc in accesses:
                shape, numel = [], 1
                for dim in range(len(acc.indices[0])):
                    lo, hi = _INF, -_INF
                    for idx in acc.indices:
                        b = _bound(idx[dim], env)
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

    def _set_row(self, acc: _Access, loops: tuple, prod: int, top_bytes: int) -> None:
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
                _vars(e, region_vars)
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
            coef = _coefficient(index[dim], var)
            if coef:
                s = abs(coef) * strides[dim]
                result = s if result is None else min(result, s)
                break
    return result or 0


def _psa_rows(g: _Graph, stores: list[_Store], accesses: list[list[_Access]], is_gpu: bool) -> np.ndarray:
    """psa.md section 1: one row per stored buffer (order of first store)."""
    rows: dict[int, list[float]] = {}
    for store, accs in zip(stores, accesses):
        inner, grid, block, vthread = 1, 1, 1, 1
        for lp in store.loops:
            ext = lp.extent or 1
            if lp.tag.startswith("blockIdx"):
                grid *= ext
            elif lp.tag.startswith("threadIdx"):
                block *= ext
            else:
                inner *= ext
                if lp.tag.startswith("vthread"):
                    vthread *= ext
        counted = [lp for lp in store.loops if lp.tag not in ("threadIdx.x", "blockIdx.x")]
        stored_vars: set = set()
        for e in store.indices:
            _vars(e, stored_vars)
        s_axes = [lp for lp in counted if lp.var in stored_vars]

        def work(acc: _Access, loop_set: list) -> int:
            used: set = set()
            for idx in acc.indices:
                for e in idx:
                    _vars(e, used)
            w = 1
            for lp in loop_set:
                if lp.var in used:
                    w *= lp.extent or 1
            return w

        flops = float(inner * _count_ops(store.value, _FLOAT_OPS_PSA))
        row = rows.setdefault(store.buffer, [0.0] * PSA_DIM)
        row[0], row[1] = flops, flops * grid * block
        if flops:
            row[2] = float(sum(work(a, s_axes) for a in accs))
            row[3] += float(sum(work(a, counted) for a in accs))
            row[4] = row[5] = 0.0
        else:
            row[2] = 0.0
            if g.buffer(store.buffer)[4] == _SHARED:
                src = next((a for a in accs[:-1] if g.buffer(a.buffer)[4] == 0), None)
                row[4] = float(work(src, s_axes) * block) if src is not None else 0.0
                row[5] = row[4] * grid
            else:
                row[4], row[5] = 0.0, float(inner * grid * block)
        row[6] = 1.0 + row[0] / row[3] if row[0] and row[3] else 1.0
        row[7:] = [float(is_gpu), float(grid), float(block), float(vthread)]
    return np.array(list(rows.values()), dtype=np.float32).reshape(-1, PSA_DIM)


@dataclasses.dataclass
class _Walked:
    access: np.ndarray
    scopes: str
    gemm: np.ndarray
    gemm_found: bool
    psa: np.ndarray
    per_store: list  # (store, accesses) for tests and cross-checks against PerStoreFeature


def _lowered_json(mod: tvm.IRModule) -> str:
    """Lower and serialize (C++ only: the FFI releases the GIL, so threads run this in parallel)."""
    return tvm.ir.save_json(lower_for_features(mod))


def _walk_lowered(lowered: tvm.IRModule | str, is_gpu: bool) -> _Walked:
    """Walk a lowered module (or its `save_json` text)."""
    g = _Graph(lowered if isinstance(lowered, str) else tvm.ir.save_json(lowered))
    stores, allocated = _collect(g)
    walker = _Walker(g)
    records: list[list[float]] = []
    digits: list[str] = []
    all_accesses = []
    for store in stores:
        accs = _accesses(store)
        walker.store_features(store, accs)
        prod = 1
        for lp in store.loops:
            prod *= lp.extent or 1
        flops = slog(prod * _count_ops(store.value, _FLOAT_OPS_ALL))
        for acc in accs:
            _, _, nbytes, shape, scope = g.buffer(acc.buffer)
            alloc = slog(math.prod(shape) * nbytes) if acc.buffer in allocated else 0.0
            one_hot = [float(scope == 0), float(scope == _SHARED), float(scope == _LOCAL)]
            records.append([flops, *one_hot, *acc.row, alloc])
            digits.append(str(scope))
        all_accesses.append(accs)
    access = np.array(records, dtype=np.float32).reshape(-1, ACCESS_DIM)
    scopes = "".join(digits)
    pos = scopes.find(GEMM_NEEDLE)
    gemm = access[pos : pos + GEMM_ROWS].copy() if pos >= 0 else np.zeros((GEMM_ROWS, ACCESS_DIM), np.float32)
    psa = _psa_rows(g, stores, all_accesses, is_gpu)
    return _Walked(access, scopes, gemm, pos >= 0, psa, list(zip(stores, all_accesses)))


def walk_features(mod: tvm.IRModule, *, is_gpu: bool, stmt: np.ndarray | None = None) -> ProgramFeatures:
    """Access records, GEMM matrix and PSA rows of a scheduled module (one lowering).

    Args:
        mod: the scheduled module (`sch.mod` of a replayed trace or a MeasureCandidate).
        is_gpu: the target is a GPU (PSA column 7).
        stmt: PerStoreFeature rows to carry along (see `per_store_rows`).

    Raises:
        tvm errors when the module does not lower.
    """
    w = _walk_lowered(_lowered_json(mod), is_gpu)
    return ProgramFeatures(stmt, w.access, w.scopes, w.gemm, w.gemm_found, w.psa)


# ---------------------------------------------------------------------------------------------------
# MetaSchedule entry points.

_PER_STORE = ms.feature_extractor.PerStoreFeature()
assert _PER_STORE.feature_vector_length == STMT_DIM


def per_store_rows(context: ms.TuneContext, candidates: Sequence[ms.MeasureCandidate]) -> list[np.ndarray | None]:
    """PerStoreFeature rows, (n_stmt, 164) float32 per candidate (C++, `context.num_threads` threads).

    A batch that fails is retried one candidate at a time; a candidate that fails alone gives None.
    """
    if not candidates:
        return []
    try:
        return [f.numpy().astype(np.float32) for f in _PER_STORE.extract_from(context, list(candidates))]
    except Exception:  # TVM raises several error types; isolate the bad candidate
        if len(candidates) == 1:
            log.debug("PerStoreFeature failed", exc_info=True)
            return [None]
    return [rows for cand in candidates for rows in per_store_rows(context, [cand])]


def featurize_candidates(
    context: ms.TuneContext, candidates: Sequence[ms.MeasureCandidate], *, stmt: bool = True, walk: bool = True
) -> list[ProgramFeatures | None]:
    """Features of MetaSchedule candidates, as the cost model and the PSA draft need them.

    Args:
        context: the task's TuneContext (its target decides is_gpu; `num_threads` threads run
            PerStoreFeature and our lowering, the Python walk runs in this thread).
        candidates: scheduled candidates (`c.sch.mod` is what the builder would compile).
        stmt: compute the PerStoreFeature rows (False for PSA-only drafting of many candidates).
        walk: compute access records, GEMM matrix and PSA rows.

    Returns:
        One ProgramFeatures per candidate (parts not asked for are None), or None where lowering or
        feature extraction failed.
    """
    is_gpu = tvm_env.is_gpu(context.target)
    rows = per_store_rows(context, candidates) if stmt else [None] * len(candidates)
    if not walk:
        return [None if stmt and r is None else ProgramFeatures(r, None, None, None, False, None) for r in rows]
    wanted = [i for i, r in enumerate(rows) if not (stmt and r is None)]
    texts = _map_threads(_lowered_json_or_error, [candidates[i].sch.mod for i in wanted], context.num_threads)
    out: list[ProgramFeatures | None] = [None] * len(candidates)
    for i, text in zip(wanted, texts):
        if isinstance(text, Exception):
            log.debug("lowering candidate %d failed: %s", i, text)
            continue
        try:
            w = _walk_lowered(text, is_gpu)
        except Exception:  # an unexpected IR shape scores as a failure, never crashes tuning
            log.debug("walking candidate %d failed", i, exc_info=True)
            continue
        out[i] = ProgramFeatures(rows[i], w.access, w.scopes, w.gemm, w.gemm_found, w.psa)
    return out


def _lowered_json_or_error(mod: tvm.IRModule) -> str | Exception:
    try:
        return _lowered_json(mod)
    except Exception as err:
        return err


def _map_threads(fn, items: list, num_threads: int) -> list:
    """`fn` over `items` on up to `num_threads` threads (order kept)."""
    if num_threads <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    with concurrent.futures.ThreadPoolExecutor(min(num_threads, len(items))) as pool:
        return list(pool.map(fn, items))


# ---------------------------------------------------------------------------------------------------
# Workload tags (pam.md 1.2): from the unscheduled workload's block names and compute patterns.

_TAG = {name: i for i, name in enumerate(TAG_NAMES)}
_NAME_TAGS = (
    ("softmax", "softmax"),
    ("winograd", "winograd"),
    ("depthwise", "depthwise"),
    ("batch_matmul", "batch_matmul"),
    ("conv2d", "conv2d"),
    ("matmul", "dense"),
    ("dense", "dense"),
    ("max", "max"),
    ("min", "min"),
    ("add", "add"),
)


def workload_tags(mod: tvm.IRModule) -> np.ndarray:
    """(10,) float32 0/1 tags (data.schema.TAG_NAMES) of a workload module.

    A tag is set by a block name (e.g. 'T_add', 'conv2d_nhwc', 'T_softmax_exp', 'depthwise_conv2d')
    or by a compute pattern of a block:
      max / min: a float max / min in a stored value (ReLU, pooling, clipping);
      add: a spatial block adding two loaded values;
      conv2d: a reduction of a product whose input index adds a spatial and a reduction variable;
      depthwise: such a convolution where every (non-unit) reduction variable of the input slides
        with a spatial one (no channel reduction; a grouped form `co // g * g + rc` is a channel
        reduction);
      dense / batch_matmul: a reduction of a product of two loads with plain indices; batched when a
        spatial variable indexes both operands and the output;
      softmax: an exp together with a max reduction and a division.
    The 10th tag (reserved) is 0.
    """
    g = _Graph(tvm.ir.save_json(mod), unit_vars=False)
    tags = np.zeros(TAG_DIM, dtype=np.float32)
    seen_exp = seen_max_reduce = seen_div = False
    for node in g.nodes:
        if node["type"] != "s_tir.SBlock":
            continue
        d = node["data"]
        name = g.string(d["name_hint"]).lower()
        for key, tag in _NAME_TAGS:
            if key in name:
                tags[_TAG[tag]] = 1
                if tag in ("softmax", "winograd", "depthwise", "batch_matmul", "conv2d"):
                    break
        reduce_vars, spatial_vars, wide_reduce = set(), set(), set()
        for iv in g.array(d["iter_vars"]):
            ivd = g.data(iv)
            (reduce_vars if ivd["iter_type"] == 2 else spatial_vars).add(ivd["var"])
            if ivd["iter_type"] == 2 and g.int_value(g.data(ivd["dom"])["extent"]) != 1:
                wide_reduce.add(ivd["var"])
        body = d["body"]
        if g.type(body) != "tirx.BufferStore":
            continue
        bd = g.data(body)
        value = g.expr(bd["value"])
        out_vars = set().union(*[_vars(g.expr(x), set()) for x in g.array(bd["indices"])] or [set()])
        ops = _kinds(value, [])
        if "max" in ops:
            tags[_TAG["max"]] = 1
            seen_max_reduce |= bool(reduce_vars)
        if "min" in ops:
            tags[_TAG["min"]] = 1
        seen_exp |= any(k == "call" and "exp" in n for k, n in _calls(value, []))
        seen_div |= "div" in ops
        loads = [e for e in _loads(value, []) if e[2] != bd["buffer"]]
        if not reduce_vars:
            if value[0] == "add" and all(_has_load(k) for k in value[3]):
                tags[_TAG["add"]] = 1
            continue
        products = [e for e in _subexprs(value, []) if e[0] == "mul" and all(_has_load(k) for k in e[3])]
        if not products or len(loads) < 2:
            continue
        mixed = [ld for ld in loads if any((v := _vars(ix, set())) & reduce_vars and v & spatial_vars for ix in ld[3])]
        if mixed:
            tags[_TAG["conv2d"]] = 1
            # depthwise: every (non-unit) reduction variable of the input slides with a spatial one
            window = all(
                _direct_vars(ix, set()) & spatial_vars or not (_vars(ix, set()) & wide_reduce) for ix in mixed[0][3]
            )
            if window:
                tags[_TAG["depthwise"]] = 1
        else:
            shared = set.intersection(*[set().union(*[_vars(ix, set()) for ix in ld[3]]) for ld in loads])
            batched = bool(shared & spatial_vars & out_vars)
            tags[_TAG["batch_matmul" if batched else "dense"]] = 1
    if seen_exp and seen_max_reduce and seen_div:
        tags[_TAG["softmax"]] = 1
    tags[_TAG["reserved"]] = 0
    return tags


def _direct_vars(e: tuple, out: set) -> set:
    """Variables of an index outside any division or modulo (the sliding part of a window)."""
    if e[0] == "v":
        out.add(e[2])
    elif e[0] not in ("fdiv", "div", "fmod", "mod"):
        for k in e[3]:
            _direct_vars(k, out)
    return out


def _subexprs(e: tuple, out: list) -> list:
    out.append(e)
    for k in e[3]:
        _subexprs(k, out)
    return out


def _kinds(e: tuple, out: list) -> set:
    return {x[0] for x in _subexprs(e, out) if x[1].startswith(("float", "bfloat"))}


def _calls(e: tuple, out: list) -> list:
    return [(x[0], str(x[2])) for x in _subexprs(e, out) if x[0] == "call"]
