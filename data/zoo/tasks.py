"""Task extraction: a relax module -> MetaSchedule tasks (`TaskSpec`), and choosing among them.

A network becomes tasks the way `relax_integration.tune_relax` expects (0.27 finds no tasks in an
unfused module): DecomposeOpsForInference / CanonicalizeBindings -> LegalizeOps /
AnnotateTIROpPattern / FoldConstant / FuseOps / FuseTIR -> `extract_tasks`. Identical kernels
(e.g. the repeated layers of BERT) dedupe into one task with a larger weight.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import multiprocessing
from collections.abc import Sequence

from tvm_env import ms, parse_target, setup, tvm, tvm_ffi, usable_cores

__all__ = [
    "TaskSpec",
    "extract_network_tasks",
    "extract_networks",
    "fused_module",
    "inference_module",
    "relax_tasks",
    "select_tasks",
    "workload_hash",
]


def workload_hash(mod: tvm.IRModule) -> str:
    """The structural hash that `JSONDatabase` writes as the first field of a workload line."""
    return str(tvm_ffi.structural_hash(mod))


@dataclasses.dataclass
class TaskSpec:
    """One tunable workload.

    Attributes:
        name: MetaSchedule task name (relax fused-function name, or `<op>_<params>` for operators).
        mod: unscheduled IRModule with one PrimFunc `main`.
        weight: how many times the network calls it (1 for operators).
        flops: floating-point operations of one call (`tvm.s_tir.analysis.estimate_tir_flops`).
        workload_hash: `workload_hash(mod)`.
    """

    name: str
    mod: tvm.IRModule
    weight: int
    flops: float
    workload_hash: str

    @property
    def task_dir(self) -> str:
        """Directory name in the record tree: task name + 8 hex digits of the structural hash."""
        return f"{self.name}_{int(self.workload_hash) & 0xFFFFFFFF:08x}"

    @classmethod
    def from_mod(cls, name: str, mod: tvm.IRModule, weight: int = 1) -> TaskSpec:
        return cls(name, mod, weight, float(tvm.s_tir.analysis.estimate_tir_flops(mod)), workload_hash(mod))


def inference_module(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """An unfused relax module prepared for inference, as tasks are extracted from it and as the
    tuned network must be compiled from it: training-only ops decomposed (batch_norm into the
    arithmetic that fuses into its convolution) and the bindings canonicalized. A compile from the
    module without this step fuses other kernels, which no task's records match."""
    from tvm import relax

    with target:
        return tvm.transform.Sequential(
            [relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings()]
        )(mod)


def fused_module(mod: tvm.IRModule, target: tvm.target.Target, *, dispatch: bool = False) -> tvm.IRModule:
    """`mod` legalized and fused into kernels: LegalizeOps, AnnotateTIROpPattern, FoldConstant,
    FuseOps, FuseTIR, as task extraction needs it. With `dispatch`, the target's library dispatch
    passes first, as TVM 0.27's `relax_integration.compile_relax` runs them before it looks the
    kernels up in the database (they leave convolutions, matmuls and elementwise ops as they are)."""
    from tvm import relax
    from tvm.relax import pipeline

    passes = []
    if dispatch:
        try:
            passes = list(pipeline.library_dispatch_passes(target))
        except (ValueError, AttributeError):  # a target without a registered dispatcher: none
            pass
    passes += [
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]
    # compile_relax's own context (opt_level 3) with dispatch; extraction's as it always ran without
    context = tvm.transform.PassContext(opt_level=3) if dispatch else contextlib.nullcontext()
    with target, context:
        return tvm.transform.Sequential(passes)(mod)


def relax_tasks(mod: tvm.IRModule, target: str | dict | tvm.target.Target) -> list[TaskSpec]:
    """The MetaSchedule tasks of an unfused relax module (from any frontend), in extraction order."""
    target = parse_target(target)
    setup(target)
    mod = fused_module(inference_module(mod, target), target)
    return [
        TaskSpec.from_mod(t.task_name, t.mod, int(t.weight)) for t in ms.relax_integration.extract_tasks(mod, target)
    ]


def extract_network_tasks(name: str, target: str | dict | tvm.target.Target, size: int | None = None) -> list[TaskSpec]:
    """The MetaSchedule tasks of a network, in extraction order.

    Args:
        name: a zoo network (`NETWORKS` key) or the user's own model: `path.py:factory`, an ONNX
            file or a relax IRModule saved with `tvm.ir.save_json` (see `data.zoo.sources`).
        target: where the tasks will be tuned (legalization and fusion depend on it).
        size: input image side / sequence length of a zoo network; None for its standard one
            (own models keep their own input shapes).

    Raises:
        ValueError: unknown network name, a size out of the network's range, or an own-model file
            that cannot be loaded (the message names the file).
    """
    from data.zoo.sources import load_network

    return relax_tasks(load_network(name, size).mod, target)


def _extract_as_json(name: str, target: dict, size: int | None) -> list[tuple[str, str, int]]:
    """`extract_network_tasks` in a worker process: (task name, module as TVM JSON, weight) rows."""
    return [(t.name, tvm.ir.save_json(t.mod), t.weight) for t in extract_network_tasks(name, target, size)]


def extract_networks(
    names: Sequence[str], target: str | dict | tvm.target.Target, size: int | None = None, workers: int | None = None
) -> dict[str, list[TaskSpec]]:
    """`extract_network_tasks` of several networks, one process per network at once.

    Extraction is single-threaded Python and C++ (the torch import, LegalizeOps, FoldConstant), 5-30 s
    a network, so a collection of several networks spends minutes in it on one core; here each
    network is extracted in its own (spawned) process and the modules come back as TVM JSON, which
    round-trips to the same structural hash.

    Args:
        names: networks, as `extract_network_tasks` takes them.
        target: where the tasks will be tuned.
        size: input size of every network (None: each one's standard size).
        workers: processes at once; None: one per network, up to half the CPU count (each process
            pays its own imports, about 2.5 s; on the 2-core VM, 3 networks in 3 processes took
            0.78x the speed of one process, in 2 processes 1.06x: the longest network bounds it). With 1 (or a single network)
            everything runs in this process.

    Returns:
        network name -> its tasks, in `names` order.

    Raises:
        ValueError: as `extract_network_tasks`, for the first network that fails.
    """
    target = parse_target(target)
    workers = max(1, min(len(names), usable_cores() // 2)) if workers is None else workers
    if workers < 1:
        raise ValueError(f"workers={workers!r} must be >= 1")
    if workers == 1 or len(names) <= 1:
        return {name: extract_network_tasks(name, target, size) for name in names}
    spawn = multiprocessing.get_context("spawn")  # fork is unsafe with TVM's and torch's threads
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=spawn) as pool:
        futures = {name: pool.submit(_extract_as_json, name, dict(target.export()), size) for name in names}
        return {
            name: [TaskSpec.from_mod(n, tvm.ir.load_json(js), w) for n, js, w in futures[name].result()]
            for name in names
        }


def select_tasks(
    tasks: Sequence[TaskSpec],
    max_tasks: int | None = None,
    min_flops: float = 0.0,
    max_flops: float | None = None,
) -> list[TaskSpec]:
    """Tasks within [min_flops, max_flops], then the `max_tasks` heaviest by weight x FLOPs.

    The original order is kept among the survivors, so a larger cap only adds tasks.
    """
    if max_tasks is not None and max_tasks < 0:
        raise ValueError(f"max_tasks={max_tasks!r} must be >= 0")
    kept = [t for t in tasks if t.flops >= min_flops and (max_flops is None or t.flops <= max_flops)]
    if max_tasks is not None and len(kept) > max_tasks:
        heaviest = sorted(range(len(kept)), key=lambda i: -kept[i].weight * kept[i].flops)[:max_tasks]
        kept = [kept[i] for i in sorted(heaviest)]
    return kept
