"""How much code a CUDA candidate will generate, estimated before it builds.

NVRTC's time follows the size of the generated CUDA source, and explicit unrolling is what makes a
kernel big: TVM's `UnrollLoop` copies a loop's body once per iteration when the schedule's
`pragma_auto_unroll_max_step` allows it. The builder's source guard (`--max-source-kb`) can only
refuse a kernel after its source is generated, and the refused pick has taken a batch's slot.

`unrolled_statements` counts the statements the kernel will have after unrolling, without unrolling
it. It runs TVM's own lowering pipeline for the target up to `UnrollLoop` (the passes before it,
software pipelining and virtual threads included, are where the code's shape is decided; a pass
instrument stops the pipeline there), then replays `UnrollLoop`'s decisions (TVM's
`src/tir/transforms/unroll_loop.cc`: the step count, depth and explicit-unroll rules) over the
module's JSON graph, multiplying instead of copying. The count equals the statements the real pass
leaves (tests/bridge/test_build_size.py checks it on the suite's schedules).

`estimated_source_kb` turns the count into KB of CUDA source at `KB_PER_STATEMENT`, the median over
the H200 suite's measured schedules (docs/benchmarks.md, "Estimating a kernel's source size before
it builds"). The unrolled IR itself is never built, so an estimate costs a few to tens of
milliseconds where lowering and generating the source cost 0.1-0.4 s and NVRTC 0.5 s or more.
"""

from __future__ import annotations

import json
from typing import Any

from tvm_env import tvm

__all__ = ["KB_PER_STATEMENT", "estimated_source_kb", "unrolled_statements"]

KB_PER_STATEMENT = 0.235
"""KB of CUDA source per statement after unrolling: the median ratio over 200 measured schedules of
eight arms of the H200 suite, every workload of it (0.18 at the 10th percentile, 0.35 at the 90th;
the index arithmetic of a statement differs by workload). See the module docstring."""

_SERIAL, _UNROLLED = 0, 3  # tirx.ForKind
_MAX_DEPTH = 8  # UnrollLoop's default auto_max_depth


@tvm.ir.instrument.pass_instrument
class _StopBeforeUnroll:
    """Keeps the module as it enters `tirx.UnrollLoop`, and runs no pass from there on."""

    def __init__(self):
        self.module = None

    def should_run(self, mod, info) -> bool:
        if info.name == "tirx.UnrollLoop" and self.module is None:
            self.module = mod
        return self.module is None


def _before_unroll(mod: tvm.IRModule, target: Any) -> tvm.IRModule:
    pipeline, _, _ = tvm.tirx.get_default_tir_pipeline(target)
    stop = _StopBeforeUnroll()
    with target, tvm.transform.PassContext(opt_level=3, instruments=[stop]):
        pipeline(tvm.tirx.transform.BindTarget(target)(mod))
    if stop.module is None:
        raise RuntimeError(f"the tirx pipeline for {target} has no tirx.UnrollLoop pass")
    return stop.module


def unrolled_statements(mod: tvm.IRModule, target: Any) -> int:
    """Statements (stores and evaluations) the module's kernels have after TVM's UnrollLoop."""
    nodes = json.loads(tvm.ir.save_json(_before_unroll(mod, target)))["nodes"]

    def integer(i: int) -> int | None:
        node = nodes[i]
        if node["type"] == "ir.IntImm":
            return integer(node["data"]["value"])
        return int(node["data"]) if node["type"] == "int" else None

    def visit(i: int, max_step: int, explicit: bool) -> tuple[int, int, int, int]:
        """(statements emitted, UnrollLoop's step count, unrolled depth, normal-loop depth) of node i."""
        node = nodes[i]
        kind, d = node["type"], node["data"]
        if kind == "tirx.SeqStmt":
            size = steps = unrolled = normal = 0
            for child in nodes[d["seq"]]["data"]:
                s, n, u, m = visit(child, max_step, explicit)
                size, steps, unrolled, normal = size + s, steps + n, max(unrolled, u), max(normal, m)
            return size, steps, unrolled, normal
        if kind == "tirx.AttrStmt":
            key = nodes[d["attr_key"]]["data"]
            if key == "pragma_auto_unroll_max_step":
                return visit(d["body"], integer(d["value"]) or 0, explicit)
            if key == "pragma_unroll_explicit":
                return visit(d["body"], max_step, bool(integer(d["value"])))
            return visit(d["body"], max_step, explicit)
        if kind == "tirx.For":
            size, steps, unrolled, normal = visit(d["body"], max_step, explicit)
            extent = integer(d["extent"])
            extent = -1 if extent is None else extent
            auto = (
                d["kind"] == _SERIAL and extent >= 0 and normal == 0 and unrolled <= _MAX_DEPTH
            ) and extent * steps <= max_step
            if d["kind"] == _UNROLLED:
                auto = True
            if auto:
                steps, unrolled = steps * extent, unrolled + 1
            else:
                normal += 1
            return (extent * size if auto and explicit else size + 1), steps, unrolled, normal
        if kind in ("tirx.BufferStore", "tirx.Evaluate"):
            return 1, 1, 0, 0
        if kind == "tirx.IfThenElse":
            s, n, u, m = visit(d["then_case"], max_step, explicit)
            if d["else_case"]:
                s2, n2, u2, m2 = visit(d["else_case"], max_step, explicit)
                s, n, u, m = s + s2, n + n2, max(u, u2), max(m, m2)
            return s + 1, n, u, m
        if isinstance(d, dict) and isinstance(d.get("body"), int) and kind.startswith("tirx."):
            return visit(d["body"], max_step, explicit)  # LetStmt, AllocBuffer, DeclBuffer, While, ...
        return 0, 0, 0, 0

    # the recursion goes as deep as the statements nest (tens of levels), not as the kernel is long
    return sum(visit(n["data"]["body"], 0, True)[0] for n in nodes if n["type"] == "tirx.PrimFunc")


def estimated_source_kb(mod: tvm.IRModule, target: Any) -> float:
    """KB of CUDA source the module's kernels are estimated to generate (`KB_PER_STATEMENT`)."""
    return KB_PER_STATEMENT * unrolled_statements(mod, target)
