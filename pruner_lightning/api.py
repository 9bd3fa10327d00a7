"""The Python API: our cost models and Pruner's search inside a TVM user's own tuning script.

A MetaSchedule script needs four things from this project, and each is one call here:

    import pruner_lightning as pl
    from tvm.s_tir import meta_schedule as ms

    target = pl.setup({"kind": "llvm", "mcpu": "native", "num-cores": 2})
    database = ms.tune_tir(
        mod, target, "work", max_trials_global=64, num_trials_per_iter=16,
        builder=pl.builder(),                                        # builds that do not time out
        cost_model=pl.cost_model("pam-siamese-update", "pam.pt"),    # PAM / MoA / TenSet MLP
        strategy=pl.draft_verify("h100"),                            # PSA drafts, the cost model verifies
    )

Why `setup` and `builder` matter: MetaSchedule's stock `LocalBuilder` starts fresh worker
processes for every batch and each one imports all tensor intrinsics (about 20 s) before building,
so on a small machine every build hits the 30 s timeout and nothing is measured.
`setup(target)` registers only the intrinsics the target needs in this process (and sets
`TVM_NUM_THREADS` from the target's cores before the runner starts); `builder()` is
`tvm_env.PooledLocalBuilder`: LocalBuilder's own build and export, with a builder function that
skips that import and workers that live across batches.

Everything works the same in `ms.relax_integration.tune_relax` and `ms.tune_tasks`; docs/api.md has
the complete examples. TVM and torch are imported when a function is called, not when this package
is imported.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from bridge.config import DEFAULT_MAX_SOURCE_KB, DEFAULT_PSA_FORMULA

if TYPE_CHECKING:
    import tvm

    from bridge.export import Artifact
    from bridge.psa import Device

__all__ = ["builder", "cost_model", "draft_verify", "evolutionary", "load_model", "setup"]

_FEATURES: Any = None


def _features() -> Any:
    """The process's `data.features.FeatureCache`, shared by `cost_model` and `draft_verify`, so a
    schedule PSA drafted is not lowered and walked again when the cost model scores it."""
    global _FEATURES
    if _FEATURES is None:
        from data.features import FeatureCache, WalkPool, default_walk_workers

        _FEATURES = FeatureCache(pool=WalkPool(default_walk_workers()))
    return _FEATURES


def setup(target: str | dict | tvm.target.Target) -> tvm.target.Target:
    """Parse `target` and prepare this process to tune for it; call it before creating tuning objects.

    Args:
        target: a tag ("nvidia/nvidia-h100"), a dict or JSON string ({"kind": "llvm", "mcpu":
            "native", "num-cores": 2}; "native" becomes this CPU, a missing num-cores this
            machine's), or a `tvm.target.Target`.

    Returns:
        The `tvm.target.Target` to pass to `ms.tune_tir` / `tune_relax` / `compile_relax`.

    Raises:
        ValueError: the old CLI form ("llvm -mcpu=...") that apache-tvm 0.27 no longer parses.
    """
    import tvm_env

    parsed = tvm_env.parse_target(target)
    tvm_env.setup(parsed)
    return parsed


def builder(
    *,
    max_workers: int | None = None,
    timeout_sec: float = 30.0,
    reuse_batches: int = 32,
    max_source_kb: float | None = DEFAULT_MAX_SOURCE_KB,
    artifact: str = "tar",
    nice: int = 0,
    compile_cache: bool = False,
) -> Any:
    """A MetaSchedule builder whose builds do not time out: pass it as `builder=` to any tune call.

    Args:
        max_workers: parallel builds (None: one per core).
        timeout_sec: per-build timeout (raise it for large GPU kernels).
        reuse_batches: batches a worker process serves before the pool restarts.
        max_source_kb: CUDA kernels with more source than this many KB fail at once instead of
            compiling (None: no limit; default 512, `bridge.config.DEFAULT_MAX_SOURCE_KB`); a batch
            of builds waits for its slowest, and NVRTC's time grows with the source that explicit
            unrolling makes.

        artifact: "tar", MetaSchedule's artifact (the runner links it before loading); "so", linked
            in the build workers (`tvm_env.builder.export_so`; a local runner only).
        nice: 0-19, the build workers' CPU priority below yours (`tune.py --build-nice`), so that a
            local runner's launches and timings do not queue behind compilers on a busy host.
        compile_cache: the workers share a folder of compiled CUDA kernels keyed by source, so a
            kernel that another schedule generated already is not compiled again (`tvm_env.compile_cache`;
            `tune.py --reuse-kernels` turns it on with `tvm_env.ReusingRunner`, which measures such a
            kernel once: wrap your runner in it, `ReusingRunner(runner=r)`).

    Returns:
        a `tvm_env.PooledLocalBuilder` (an `ms.builder.LocalBuilder`); its `.shutdown()` ends the worker
        processes when you are done with it (otherwise they end when it is garbage collected).
    """
    from tvm_env import PooledLocalBuilder

    return PooledLocalBuilder(
        max_workers=max_workers,
        timeout_sec=timeout_sec,
        reuse_batches=reuse_batches,
        max_source_kb=max_source_kb,
        artifact=artifact,
        nice=nice,
        compile_cache=compile_cache,
    )


def load_model(path: str | os.PathLike, device: str = "cpu") -> Artifact:
    """Load a trained cost model: an artifact of `python -m bridge.export`, or a train.py `.ckpt`.

    Only tensors are read (`torch.load(weights_only=True)`): a model file cannot run code.

    Args:
        path: the artifact (.pt) or checkpoint (.ckpt).
        device: torch device to put the network on.

    Returns:
        a `bridge.export.Artifact`: `.net` (PAMNet, MoANet or MLPNet, eval mode), `.net_class`,
        `.source_device` (where its training data was measured), `.schema_version`, `.path`.

    Raises:
        bridge.export.ArtifactError (a ValueError): missing or unreadable file, not a model, or a
            model of another feature-schema version; the message names the file.
    """
    from bridge.export import load_model as _load

    return _load(path, map_location=device)


def cost_model(mode: str = "pam", model: str | os.PathLike | Artifact | None = None, **options: Any) -> Any:
    """One of our cost models as a MetaSchedule cost model: pass it as `cost_model=` to a tune call.

    Args:
        mode: "pam" (PAM trained online from scratch), "pam-siamese-update" (MoA: a pretrained PAM
            adapted online with a momentum copy), "pam-no-update" (a pretrained PAM, frozen),
            "mlp" / "mlp-no-update" (the TenSet MLP, online / frozen). docs/pruner.md section 2.
        model: the pretrained model of the `*-update` / `*-no-update` modes: a path (artifact or
            .ckpt) or a `load_model` result; None for "pam" and "mlp".
        **options: further `bridge.cost_model.PrunerCostModel` options (epochs, lr, adapt_every,
            momentum, device, seed, background, ...).

    Returns:
        a `bridge.cost_model.PrunerCostModel` (an `ms.cost_model.PyCostModel`).

    Raises:
        ValueError: an unknown mode, a model missing for a pretrained mode or given to a
            from-scratch one, or a model of the wrong kind for the mode.
    """
    from bridge.cost_model import PrunerCostModel

    options.setdefault("features", _features())
    return PrunerCostModel(mode=mode, artifact=model, **options)


def draft_verify(
    device: str | Device,
    *,
    devices_file: str | os.PathLike | None = None,
    formula: str = DEFAULT_PSA_FORMULA,
    **search: Any,
) -> Any:
    """Pruner's draft-then-verify search: pass it as `strategy=` to a tune call.

    PSA (the analytic draft model) evolves a large population and keeps a potential space; the
    tune call's cost model verifies only that space and picks what is measured
    (docs/pruner.md section 5). Defaults: population 512 and potential space 256 (published: 1536 and
    512), 2 draft generations, 1 verify generation, a new draft when a task's best has not improved in
    3 measured rounds, epsilon-greedy 0.1; a CPU or a quick run wants
    smaller ones, e.g. `population_size=128, potential_size=32`.

    Args:
        device: the PSA device row: a name of the device table ("h100", "a100", ...; docs/pruner.md
            section 4.3), "auto" for the running GPU, or a `bridge.psa.Device`.
        devices_file: a YAML file with more device rows.
        formula: one of `bridge.psa.FORMULAS` (default `bridge.psa.DEFAULT_FORMULA`; "published" is
            the paper's).
        **search: `bridge.draft_verify.DraftVerifySearch` options (population_size, potential_size,
            draft_generations, verify_generations, redraft_every, redraft_stall, eps_greedy, ...). `pipeline`
            defaults to a `bridge.pipeline.Pipeline()`: each task's next batch is searched while the
            current one builds and runs (`pipeline=None`: rounds in turn).

    Returns:
        a `bridge.draft_verify.DraftVerifySearch` (an `ms.search_strategy.PySearchStrategy`).

    Raises:
        ValueError: an unknown device or formula, or an option out of range.
    """
    from bridge.draft_verify import DraftVerifySearch
    from bridge.pipeline import Pipeline
    from bridge.psa import PSACostModel

    devices = None if devices_file is None else os.fspath(devices_file)
    search.setdefault("pipeline", Pipeline())
    draft = PSACostModel(device=device, formula=formula, devices_file=devices, features=_features())
    return DraftVerifySearch(draft=draft, **search)


def evolutionary(**search: Any) -> Any:
    """MetaSchedule's own evolutionary search, made resumable: pass it as `strategy=`.

    The same `ms.search_strategy.EvolutionarySearch` (options such as population_size pass
    through), plus what the project's tuning runs rely on: trials already in the database count
    against the budget, and a schedule measured in an earlier run is not measured again.

    Returns:
        a `bridge.search.ResumableEvolutionarySearch`.
    """
    from bridge.search import ResumableEvolutionarySearch

    return ResumableEvolutionarySearch(**search)
