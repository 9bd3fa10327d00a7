"""A runner's arguments with integer tensors set to ones, so that a kernel indexing with them stays in range.

MetaSchedule's runners fill every argument with `tvm.contrib.random.random_fill_for_measure`. An
integer tensor then holds arbitrary bit patterns (int32 values about 1e9 on the host), and a kernel
that indexes with it (an embedding lookup, relax's `take`; a gather) reads far out of bounds: every
candidate of BERT-base's `take` failed on the H200 machine (2026-12-01), as did every candidate of
BERT-tiny's on the llvm host, so a token network's embedding was never tuned. Here an integer
tensor is all ones: an index in range for any axis longer than one, and a divisor that does not
trap (zeros made an integer division's kernel die of SIGFPE on llvm). Every other tensor is filled
at random as before.

The limits: a kernel whose work depends on its integer data is timed on data of one value. A
lookup reads one row again and again (optimistic where the reads would miss the cache), a scatter
writes one row, and a sparse kernel's index pointers describe empty rows. In the zoo's networks the
integer tensors are token ids, and only their lookups meet the first of these limits.

`alloc_local` is a `LocalRunner`'s `f_alloc_argument` (it runs in the runner's worker process),
`alloc_rpc` an `RPCRunner`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tvm
from tvm.s_tir.meta_schedule.utils import get_global_func_on_rpc_session, get_global_func_with_default_on_worker

__all__ = ["alloc_local", "alloc_rpc"]

_FILL = "tvm.contrib.random.random_fill_for_measure"


def alloc_local(device: Any, args_info: list, alloc_repeat: int) -> list[list[Any]]:
    """`alloc_repeat` sets of `args_info`'s tensors on `device` (a `LocalRunner`'s worker)."""
    return _alloc(get_global_func_with_default_on_worker(_FILL, None), device, args_info, alloc_repeat)


def alloc_rpc(session: Any, device: Any, args_info: list, alloc_repeat: int) -> list[list[Any]]:
    """`alloc_repeat` sets of `args_info`'s tensors on `device` of an RPC `session` (an `RPCRunner`)."""
    fill = get_global_func_on_rpc_session(session, _FILL, "the RPC server's TVM needs USE_RANDOM for measuring")
    return _alloc(fill, device, args_info, alloc_repeat)


def _alloc(fill: Callable, device: Any, args_info: list, alloc_repeat: int) -> list[list[Any]]:
    repeated = []
    for _ in range(alloc_repeat):
        args = []
        for info in args_info:
            if info[0] != "TENSOR":
                raise NotImplementedError(
                    f"a runner argument of kind {info[0]!r} ({info!r}): only tensors are measured"
                )
            _, dtype, shape = info
            arg = tvm.runtime.empty(shape=shape, dtype=dtype, device=device)
            try:  # indices and divisors; numpy has no bfloat16 or sub-byte integers (those keep the fill)
                ones = np.ones(shape, dtype=dtype) if str(dtype).startswith(("int", "uint")) else None
            except TypeError:
                ones = None
            if ones is None:
                fill(arg)
            else:
                arg.copyfrom(ones)
            args.append(arg)
        repeated.append(args)
    return repeated
