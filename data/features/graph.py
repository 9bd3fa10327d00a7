"""The JSON graph of a lowered TIR module, with expressions compiled into small tuples.

Why a JSON graph: walking TIR through Python reflection costs 10-30 ms a program. Here the lowered
module is serialized once in C++ (`tvm.ir.save_json`) and the parsed graph (plain lists and dicts)
is walked; expressions are compiled once into tuples (kind, dtype, data, children):

    ('c', dt, int, ())  integer constant       ('f', dt, float, ())  float constant
    ('v', dt, var, ())  variable (node index)  ('ld', dt, buffer, indices)  buffer load
    (op, dt, None, (a, b)) for a binary op     ('cast' | 'sel' | 'call' | 'cmp' | 'any', dt, x, children)

A mod by a constant carries its modular facts in `data` ((gcd, base), see `data.features.arith`).
Variables of dropped unit loops read as 0 and load-free selects as 1, emulating PerStoreFeature's
internal SimplifyForFeatureExtraction pass, which Python cannot call.
"""

from __future__ import annotations

import json
import math

from data.features.arith import INF, bound, dtype_bytes, modular

__all__ = ["LOCAL", "SHARED", "Graph", "count_ops", "free_vars", "has_load", "expr_loads", "scope_digit", "subexprs"]

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
SHARED, LOCAL = 1, 2


def scope_digit(scope: str) -> int:
    if scope.startswith("shared"):
        return SHARED
    if scope.startswith(("local", "warp", "wmma.", "m16n8k8.", "metal.simdgroup")):
        return LOCAL
    return 0


class Graph:
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
                    hi = bound(self.expr(s), {})[1]
                    v = hi if 0 <= hi < INF else 1
                shape.append(v)
            scope = scope_digit(self.string(bt["storage_scope"]) or "global")
            info = self._buffer[var] = (self.string(d["name"]), dtype, dtype_bytes(dtype), tuple(shape), scope)
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
            e = fold(_BINARY[t], self.dtype(d["ty"]), self.expr(d["a"]), self.expr(d["b"]))
            if e[0] in ("fmod", "mod") and e[3][1][0] == "c" and e[3][1][2] > 0:
                a = modular(e[3][0], self.var_min)
                gcd = math.gcd(a[0], e[3][1][2])
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
            if self.fold_units and not any(has_load(k) for k in kids):
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


def fold(op: str, dt: str, a: tuple, b: tuple) -> tuple:
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


def has_load(e: tuple) -> bool:
    return e[0] == "ld" or any(has_load(k) for k in e[3])


def free_vars(e: tuple, out: set) -> set:
    if e[0] == "v":
        out.add(e[2])
    for k in e[3]:
        free_vars(k, out)
    return out


def count_ops(e: tuple, kinds: set) -> int:
    """Number of float-typed nodes of the given kinds in an expression (loads' indices included)."""
    n = 1 if e[0] in kinds and e[1].startswith("float") else 0
    for k in e[3]:
        n += count_ops(k, kinds)
    return n


def expr_loads(e: tuple, out: list) -> list:
    """Loads in post-order (PostOrderVisit's order)."""
    for k in e[3]:
        expr_loads(k, out)
    if e[0] == "ld":
        out.append(e)
    return out


def subexprs(e: tuple, out: list) -> list:
    out.append(e)
    for k in e[3]:
        subexprs(k, out)
    return out
