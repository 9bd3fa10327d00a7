"""Integer interval and modular arithmetic on compiled TIR expressions, as PerStoreFeature's analyzer does it.

`bound` mirrors TVM's const_int_bound (sym::ConstIntBound), `modular` its modular-set analysis with
every loop variable pinned to its loop's min (PerStoreFeature's analyzer binds loop variables to
their min first and later widens only the integer bounds), and `coefficient` per_store_feature.cc's
CoefficientExtractor with its quirks. Expressions are the tuples of `data.features.graph`:
(kind, dtype, data, children).
"""

from __future__ import annotations

import math
import re

__all__ = ["INF", "bound", "coefficient", "dtype_bytes", "dtype_range", "modular"]

INF = (1 << 63) - 1
_DTYPE = re.compile(r"([a-z]+?)(\d*)(?:_[a-z0-9]+)?(?:x(\d+))?$")


def dtype_bytes(dtype: str) -> int:
    """DataType::StorageBytes: bytes of one element ((bits * lanes + 7) // 8; bool is 1 bit)."""
    if dtype == "bool":
        return 1
    m = _DTYPE.match(dtype)
    bits = int(m.group(2)) if m and m.group(2) else 32
    lanes = int(m.group(3)) if m and m.group(3) else 1
    return (bits * lanes + 7) // 8


def dtype_range(dtype: str) -> tuple[int, int]:
    """const_int_bound's `Everything(dtype)`."""
    if dtype == "bool":
        return 0, 1
    m = _DTYPE.match(dtype)
    bits = int(m.group(2)) if m and m.group(2) else 64
    if dtype.startswith("int") and bits < 64:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if dtype.startswith("uint") and bits < 64:
        return 0, (1 << bits) - 1
    return -INF, INF


def _sat(x: int) -> int:
    """Saturate to const_int_bound's +-infinity (int64 limits)."""
    return INF if x >= INF else max(-INF, x)


def _div(x: int, y: int, floor: bool) -> int:
    if x in (INF, -INF):
        return x if y > 0 else -x
    return (
        x // y if floor else int(x / y) if abs(x) < 1 << 52 else (abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1)
    )


def _corners(a: tuple, b: tuple, f) -> tuple[int, int]:
    p = (f(a[0], b[0]), f(a[1], b[1]), f(a[0], b[1]), f(a[1], b[0]))
    return min(p), max(p)


def bound(e: tuple, env: dict) -> tuple[int, int]:
    """sym::ConstIntBound of an integer expression, variables bound by `env` (var -> (lo, hi)).

    Mirrors const_int_bound.cc, including the modular-set tightening of a mod by a constant, whose
    modular facts (`e[2]` of a mod node, see `Graph._modular`) are those PerStoreFeature's analyzer
    holds: every loop variable pinned to its loop's min.
    """
    k = e[0]
    if k == "c":
        return e[2], e[2]
    if k == "v":
        b = env.get(e[2])
        return b if b is not None else dtype_range(e[1])
    if k == "add":
        a, b = bound(e[3][0], env), bound(e[3][1], env)
        return _sat(a[0] + b[0]), _sat(a[1] + b[1])
    if k == "sub":
        a, b = bound(e[3][0], env), bound(e[3][1], env)
        return _sat(a[0] - b[1]), _sat(a[1] - b[0])
    if k == "mul":
        a, b = bound(e[3][0], env), bound(e[3][1], env)
        lo, hi = _corners(a, b, lambda x, y: x * y)
        return _sat(lo), _sat(hi)
    if k in ("fdiv", "div"):
        a, b = bound(e[3][0], env), bound(e[3][1], env)
        if b[0] == 0:
            b = (1, b[1])
        floor = k == "fdiv"

        def f(x, y):
            return _div(x, y, floor)

        if b[0] <= 0 <= b[1]:
            everything = dtype_range(e[1])
            neg = _corners(a, (b[0], -1), f) if b[0] < 0 else everything
            pos = _corners(a, (1, b[1]), f) if b[1] > 0 else everything
            return min(neg[0], pos[0]), max(neg[1], pos[1])
        return _corners(a, b, f)
    if k in ("fmod", "mod"):
        a, b = bound(e[3][0], env), bound(e[3][1], env)
        if b[0] == 0:
            b = (1, b[1])
        if b[0] <= 0:
            if k == "mod":
                return dtype_range(e[1])
            r = dtype_range(e[1])
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
        a, b = bound(e[3][0], env), bound(e[3][1], env)
        return min(a[0], b[0]), min(a[1], b[1])
    if k == "max":
        a, b = bound(e[3][0], env), bound(e[3][1], env)
        return max(a[0], b[0]), max(a[1], b[1])
    if k == "cast":
        a, r = bound(e[3][0], env), dtype_range(e[1])
        return max(a[0], r[0]), min(a[1], r[1])
    if k == "sel":
        a, b = bound(e[3][1], env), bound(e[3][2], env)
        return min(a[0], b[0]), max(a[1], b[1])
    return dtype_range(e[1])


def _gcd0(a: int, b: int) -> int:
    """ZeroAwareGCD."""
    return math.gcd(a, b)


def _mod_entry(coeff: int, base: int) -> tuple[int, int]:
    coeff = abs(coeff)
    return (coeff, base % coeff) if coeff else (0, base)


_EVERYTHING = (1, 0)


def modular(e: tuple, var_min: dict) -> tuple[int, int]:
    """sym::ModularSet (coeff, base) of an integer expression when every loop variable is pinned
    to its min (`var_min`), as in PerStoreFeature's analyzer."""
    k = e[0]
    if k == "c":
        return (0, e[2])
    if k == "v":
        m = var_min.get(e[2])
        return (0, m) if m is not None else _EVERYTHING
    if k in ("add", "sub"):
        a, b = modular(e[3][0], var_min), modular(e[3][1], var_min)
        return _mod_entry(_gcd0(a[0], b[0]), a[1] + b[1] if k == "add" else a[1] - b[1])
    if k == "mul":
        a, b = modular(e[3][0], var_min), modular(e[3][1], var_min)
        coeff = _gcd0(a[0] * b[0], _gcd0(a[0] * b[1], a[1] * b[0]))
        return _mod_entry(coeff, a[1] * b[1])
    if k in ("fdiv", "div", "fmod", "mod"):
        b = modular(e[3][1], var_min)
        if b[0] != 0 or b[1] == 0:
            return _EVERYTHING
        val, a = b[1], modular(e[3][0], var_min)
        nonneg = k in ("fdiv", "fmod") or bound(e[3][0], {v: (m, m) for v, m in var_min.items()})[0] >= 0
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
        a, b = (modular(x, var_min) for x in e[3][-2:])
        coeff = _gcd0(a[0], b[0])
        if coeff == 0:
            return a if a[1] == b[1] else _EVERYTHING
        b0, b1 = a[1] % coeff, b[1] % coeff
        return _mod_entry(coeff, b0) if b0 == b1 else _mod_entry(_gcd0(_gcd0(b0, b1), coeff), b0)
    if k == "cast":
        return modular(e[3][0], var_min)
    return _EVERYTHING


def coefficient(e: tuple, var: int) -> int:
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
