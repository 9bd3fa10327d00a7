"""PSA rows from the walk: the 11 numbers per stored buffer that Pruner's draft model scores, and a 12th.

One row per stored buffer, in order of first store (columns `data.features.PSA_COLUMNS`, raw element
counts). Definitions (Pruner's PSA, restated for MetaSchedule TIR, where thread bindings are `For`
loops with a thread tag):
  inner = product of the enclosing loops that are not blockIdx/threadIdx bindings (work per thread);
  grid / block = product of blockIdx / threadIdx extents; S-axes = enclosing loops, except those bound
  to threadIdx.x or blockIdx.x, whose variable indexes the stored buffer; W(access, loops) = product
  of the extents of those loops whose variable indexes the access.
  0 flops per thread = inner x (float add/sub, mul, div/mod in the stored value); 1 total = [0] x grid x block;
  2 registers = sum of W(access, S-axes) (compute stores); 3 memory work = sum of W(access, all loops),
  accumulated over the stores to the buffer; 4 shared footprint = W(global source, S-axes) x block
  (non-compute store into shared memory); 5 DRAM traffic = [4] x grid there, inner x grid x block for
  other non-compute stores, 0 for compute stores; 6 reuse = 1 + [0] / [3]; 7 is_gpu; 8 grid; 9 block;
  10 vthread. Columns 2, 4, 5, 6 reset at each store to the buffer.
  11 DRAM traffic over every trip (not in the publication): [5], except that a store into shared
  memory counts W(global source, serial loops) x block x grid, every element the kernel loads into
  it. [5] counts one pass of the loops that do not index the shared buffer, i.e. one stage of a
  split reduction: a K loop split into n stages looks n times cheaper in DRAM traffic, which on
  an H100 batch_matmul tuning run put XGB's fastest schedules (K unsplit) at PSA's 19th percentile
  (docs/benchmarks.md, "PSA's DRAM traffic over every trip").
"""

from __future__ import annotations

import numpy as np

from data.features.access import Access, Store
from data.features.graph import SHARED, Graph, count_ops, free_vars
from data.schema import PSA_DIM

__all__ = ["FLOAT_OPS_PSA", "psa_rows"]

FLOAT_OPS_PSA = {"add", "sub", "mul", "div", "mod", "fdiv", "fmod"}
"""Float ops counted for PSA column 0: add/sub, mul, div/mod; no comparisons, max/min or calls."""


def psa_rows(g: Graph, stores: list[Store], accesses: list[list[Access]], is_gpu: bool) -> np.ndarray:
    """docs/pruner.md section 4.1: one row per stored buffer (order of first store)."""
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
        serial = [lp for lp in store.loops if not lp.tag.startswith(("threadIdx", "blockIdx"))]
        stored_vars: set = set()
        for e in store.indices:
            free_vars(e, stored_vars)
        s_axes = [lp for lp in counted if lp.var in stored_vars]

        def work(acc: Access, loop_set: list) -> int:
            used: set = set()
            for idx in acc.indices:
                for e in idx:
                    free_vars(e, used)
            w = 1
            for lp in loop_set:
                if lp.var in used:
                    w *= lp.extent or 1
            return w

        flops = float(inner * count_ops(store.value, FLOAT_OPS_PSA))
        row = rows.setdefault(store.buffer, [0.0] * PSA_DIM)
        row[0], row[1] = flops, flops * grid * block
        if flops:
            row[2] = float(sum(work(a, s_axes) for a in accs))
            row[3] += float(sum(work(a, counted) for a in accs))
            row[4] = row[5] = row[11] = 0.0
        else:
            row[2] = 0.0
            if g.buffer(store.buffer)[4] == SHARED:
                src = next((a for a in accs[:-1] if g.buffer(a.buffer)[4] == 0), None)
                row[4] = float(work(src, s_axes) * block) if src is not None else 0.0
                row[5] = row[4] * grid
                row[11] = float(work(src, serial) * block * grid) if src is not None else 0.0
            else:
                row[4], row[5] = 0.0, float(inner * grid * block)
                row[11] = row[5]
        row[6] = 1.0 + row[0] / row[3] if row[0] and row[3] else 1.0
        row[7:11] = [float(is_gpu), float(grid), float(block), float(vthread)]
    return np.array(list(rows.values()), dtype=np.float32).reshape(-1, PSA_DIM)
