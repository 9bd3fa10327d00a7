"""Single operators named by a spec string, e.g. ``"matmul:512,512,512"``, as MetaSchedule tasks.

Specs are checked up front (kinds, counts, integer ranges, tensor sizes) so that a typo such as
``matmul:3000000000,1,1`` fails at once with a message naming it, not minutes into tuning.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from data.zoo.tasks import TaskSpec
from tvm_env import tvm

__all__ = ["MAX_DIM", "MAX_ELEMENTS", "OPERATORS", "operator_task"]

MAX_DIM = 1 << 16
"""Largest value of any spec parameter (65536)."""
MAX_ELEMENTS = (1 << 31) - 1
"""Largest number of elements of any input or output tensor: TIR indexes buffers with int32."""


def _dense(m: int, n: int, k: int):
    """Y[m, n] = X[m, k] . W[n, k]^T (the layout of torch.nn.Linear)."""
    from tvm import te

    x = te.placeholder((m, k), name="X")
    w = te.placeholder((n, k), name="W")
    r = te.reduce_axis((0, k), name="k")
    return x, w, te.compute((m, n), lambda i, j: te.sum(x[i, r] * w[j, r], axis=r), name="T_dense")


def _te(fname: str) -> Callable:
    def make(*args: int):
        from tvm.s_tir.meta_schedule.testing import te_workload

        return getattr(te_workload, fname)(*args)

    return make


OPERATORS: dict[str, tuple[Callable, tuple[str, ...], tuple[int, ...]]] = {
    "matmul": (lambda m, n, k: _te("matmul")(m, n, k), ("M", "N", "K"), ()),
    "dense": (_dense, ("M", "N", "K"), ()),
    "batch_matmul": (lambda b, m, n, k: _te("batch_matmul_nkkm")(b, m, n, k), ("B", "M", "N", "K"), ()),
    "conv2d": (_te("conv2d_nhwc"), ("N", "H", "W", "CI", "CO", "KERNEL", "STRIDE", "PAD"), (1, 0)),
    "depthwise_conv2d": (_te("depthwise_conv2d_nhwc"), ("N", "H", "W", "C", "KERNEL", "STRIDE", "PAD"), (1, 0)),
    "softmax": (_te("softmax_mn"), ("M", "N"), ()),
}
"""Operator kind -> (TE factory, parameter names, defaults of the trailing parameters).

matmul: C[M, N] = A[M, K] B[K, N]; dense: like nn.Linear (weight N x K); batch_matmul: B batches of
(M x K)(K x N); conv2d / depthwise_conv2d: NHWC, square kernels, `STRIDE` and `PAD` optional.
"""


def _parse(spec: str) -> tuple[str, list[int], str]:
    """(kind, all parameter values with defaults filled in, usage string), or ValueError naming `spec`."""
    kind, sep, rest = spec.partition(":")
    if kind not in OPERATORS:
        raise ValueError(f"operator spec {spec!r}: unknown kind {kind!r}; known: {sorted(OPERATORS)}")
    _, names, defaults = OPERATORS[kind]
    usage = f"{kind}:{','.join(names)}" + (f" (last {len(defaults)} optional)" if defaults else "")
    fields = [f.strip() for f in rest.split(",")] if sep and rest.strip() else []
    if not len(names) - len(defaults) <= len(fields) <= len(names):
        raise ValueError(f"operator spec {spec!r}: expected {usage}, got {len(fields)} parameters")
    try:
        values = [int(f) for f in fields]
    except ValueError:
        raise ValueError(f"operator spec {spec!r}: parameters must be integers ({usage})") from None
    values += defaults[len(defaults) - (len(names) - len(values)) :]
    for pname, value in zip(names, values):
        if value < 0 or (value == 0 and pname != "PAD"):
            raise ValueError(f"operator spec {spec!r}: {pname}={value} must be positive ({usage})")
        if value > MAX_DIM:
            raise ValueError(f"operator spec {spec!r}: {pname}={value} is larger than {MAX_DIM} ({usage})")
    return kind, values, usage


def check_operator_spec(spec: str) -> None:
    """Validate `spec` for argument checking (builds its TE function: milliseconds).

    Raises:
        ValueError: see `operator_task`.
    """
    operator_task(spec)


def operator_task(spec: str) -> TaskSpec:
    """A task for a single operator named by `"kind:p1,p2,..."`, e.g. `"conv2d:1,56,56,64,64,3,1,1"`.

    Raises:
        ValueError: unknown kind, wrong number of parameters, a parameter that is not an integer in
            [1, MAX_DIM] (zero is allowed for PAD only), an empty output (a kernel larger than the
            padded input) or a tensor of more than MAX_ELEMENTS elements; the message names the spec.
    """
    from tvm import te

    kind, values, usage = _parse(spec)
    tensors = OPERATORS[kind][0](*values)
    for tensor in tensors:
        shape = [int(d) for d in tensor.shape]
        if min(shape) <= 0:
            raise ValueError(f"operator spec {spec!r}: tensor shape {shape} is empty ({usage})")
        if math.prod(shape) > MAX_ELEMENTS:
            raise ValueError(
                f"operator spec {spec!r}: a tensor of shape {shape} has more than {MAX_ELEMENTS} elements ({usage})"
            )
    mod = tvm.IRModule({"main": te.create_prim_func(tensors)})
    return TaskSpec.from_mod(f"{kind}_{'_'.join(map(str, values))}", mod)
