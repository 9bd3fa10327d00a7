"""Where one draft-then-verify round's search time goes, on the host for a CUDA target: PAM is trained
on the best records of a tuning database, one round drafts, and the next round (verify only) runs
under cProfile. Prints both rounds' statistics and the profile's top entries by cumulative time, and
what PerStoreFeature's own lowering costs of its time: the potential space's statement rows computed
from the candidates as scheduled and from modules already lowered as our walk lowers them (the rows
must be identical; the difference is what sharing one lowering between the walk and PAM would save).

    python benchmarks/verify_profile.py --workload conv2d:1,35,35,64,96,3,1,1 \
        --database benchmarks/results/suite_databases/ablations/ab8_fill64/conv2d_1x35x35x64x96x3x1x1/pruner-s0
"""

from __future__ import annotations

import cProfile
import io
import lzma
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

from jsonargparse import ArgumentParser

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _database(folder: Path, into: Path):
    """A JSONDatabase of a copy, in `into`, of `folder`'s database files (plain or `.xz`), so that
    the profile's search cannot write to them."""
    from data.record_tree import DB_FILES, XZ, database_file
    from tvm_env import ms

    for name in DB_FILES:
        found = database_file(folder, name)
        if found is None:
            raise ValueError(f"{folder}: no {name} or {name}{XZ}")
        with (lzma.open if found.name.endswith(XZ) else open)(found, "rb") as src, open(into / name, "wb") as dst:
            shutil.copyfileobj(src, dst)
    workload, record = (str(into / name) for name in DB_FILES)
    return ms.database.JSONDatabase(path_workload=workload, path_tuning_record=record)


def profile_round(
    workload: str,
    database: str,
    target: str = "nvidia/nvidia-h100",
    records: int = 400,
    batch: int = 64,
    population: int = 512,
    potential: int = 512,
    draft_generations: int = 2,
    threads: int = 2,
    top: int = 30,
) -> dict:
    """Run the two rounds; returns {"draft_round": stats, "verify_round": stats, "lowering": stats,
    "profile": text}."""
    from bridge.cost_model import PrunerCostModel
    from bridge.draft_verify import DraftVerifySearch
    from bridge.psa import PSACostModel
    from data import zoo
    from data.features import FeatureCache, WalkPool
    from tvm_env import ms, parse_target, setup, task_context

    parsed = parse_target(target)
    setup(parsed)
    task = zoo.operator_task(workload)
    with tempfile.TemporaryDirectory() as tmp:
        db = _database(Path(database), Path(tmp))
        if not db.has_workload(task.mod):
            raise ValueError(f"{database}: holds no records of {workload}")
        features = FeatureCache(pool=WalkPool(0))
        pam = PrunerCostModel(mode="pam", device="cpu", epochs=5, seed=0, features=features, background=False)
        search = DraftVerifySearch(
            draft=PSACostModel(device="h100", features=features),
            population_size=population,
            potential_size=potential,
            draft_generations=draft_generations,
            redraft_below=0.0,  # the profiled round verifies the draft's space, however small the sampling left it
        )
        context = task_context(task.mod, parsed, search, task.name, threads=threads)
        search.pre_tuning(1 << 20, batch, context.generate_design_space(), db, pam)
        best = db.get_top_k(db.commit_workload(task.mod), records)
        candidates = [r.as_measure_candidate() for r in best]
        pam.update(context, candidates, [ms.runner.RunnerResult([float(s) for s in r.run_secs], None) for r in best])
        start = time.perf_counter()
        _, drafted = search._search(batch)
        drafted["wall_s"] = time.perf_counter() - start
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.enable()
        # at most what the space holds: a smaller space would make the round draft again, not verify (a
        # CUDA draft of 64 kept 24-50 valid samples from run to run on the host)
        _, verified = search._search(max(1, min(batch, len(search.potential))))
        profiler.disable()
        verified["wall_s"] = time.perf_counter() - start
        lowering = _lowering_share(context, search.potential)
        search.post_tuning()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(top)
    return {"draft_round": drafted, "verify_round": verified, "lowering": lowering, "profile": text.getvalue()}


def _lowering_share(context, schedules: list) -> dict:
    """PerStoreFeature on `schedules` as scheduled (its own lowering inside) and on the same modules
    lowered first by `data.features.lower_for_features` (the walk's lowering), which it lowers again
    with little left to do: seconds of each, of our lowering, and how many candidates' rows agree."""
    import numpy as np

    from bridge.search import candidate
    from data.features.lowering import lower_for_features, per_store_rows
    from tvm_env import ms, tvm

    candidates = [candidate(s) for s in schedules]
    start = time.perf_counter()
    rows = per_store_rows(context, candidates)
    psf_s = time.perf_counter() - start
    start = time.perf_counter()
    lowered = [lower_for_features(c.sch.mod) for c in candidates]
    lower_s = time.perf_counter() - start
    start = time.perf_counter()
    again = per_store_rows(
        context, [ms.MeasureCandidate(tvm.s_tir.Schedule(m), c.args_info) for m, c in zip(lowered, candidates)]
    )
    identical = sum(
        isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape and bool(np.array_equal(a, b))
        for a, b in zip(rows, again)
    )
    return {
        "candidates": float(len(candidates)),
        "per_store_feature_s": psf_s,
        "on_lowered_s": time.perf_counter() - start,
        "our_lowering_s": lower_s,
        "identical": float(identical),
    }


def main(argv: list[str] | None = None) -> dict:
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", required=True, help="an operator spec (data.zoo.operator_task)")
    p.add_argument("--database", required=True, help="a tuning run's folder with database_*.json[.xz]")
    p.add_argument("--target", default="nvidia/nvidia-h100")
    p.add_argument("--records", type=int, default=400, help="PAM trains on the database's best this-many")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--population", type=int, default=512)
    p.add_argument("--potential", type=int, default=512)
    p.add_argument("--draft-generations", type=int, default=2, help="the first round's draft (not profiled)")
    p.add_argument("--threads", type=int, default=2, help="the search's threads (TuneContext.num_threads)")
    p.add_argument("--top", type=int, default=30, help="profile entries to print")
    args = p.parse_args(argv)
    out = profile_round(**{k: v for k, v in vars(args).items() if k != "config"})
    for name in ("draft_round", "verify_round", "lowering"):
        stats = {k: round(v, 3) for k, v in out[name].items() if isinstance(v, float)}
        print(f"{name}: {stats}")
    print(out["profile"])
    return out


if __name__ == "__main__":
    main()
