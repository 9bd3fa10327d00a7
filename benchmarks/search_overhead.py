"""Search overhead per measured trial, without a GPU: MetaSchedule's default against Pruner, side by side.

Sampling, evolution, featurization and the cost models' training all run on the host, so the part
of a CUDA tuning run that is search can be measured here. Building and running are replaced by a
stand-in device (`SyntheticDevice`): it takes `--build-s` and `--run-s` seconds a trial (defaults:
what an H100 tuning run spent, docs/benchmarks.md) and reports a latency that is a fixed
pseudo-random function of the schedule (its structural hash). The search is real and complete;
the latencies carry no information, so this benchmark measures cost, not tuning quality
(benchmarks/tuning.py measures that on the GPU).

Per method, on each workload, in one process, same trials, same seed:
- xgb: MetaSchedule's default (EvolutionarySearch, population 512, 4 generations) with XGBoost;
- pruner: draft-then-verify (PSA drafts, PAM trained online verifies), pipelined, with its defaults
  (a new draft when a task's best has not improved in 3 measured rounds, or the potential space
  runs low);
- pruner-serial: the same, rounds in turn (no pipelining);
- pruner-apart: pruner whose jobs wait for their builds on a thread of their own (`build_apart`): the
  next search, another task's in a network, runs meanwhile, and a task's turn waits for its own jobs only;
- pruner-local: pruner giving a quarter of each batch to local moves around the task's best measured
  schedules (`local_share` 0.25, pruner's own default since 2026-11-29, second session; here the
  stand-in latencies make them worth nothing: this measures what they cost); pruner-nolocal: without
  them (`local_share` 0, pruner before);
- pruner-sync: pruner whose cost model trains on each measured batch before the next is handed out
  (`background_update` false, the default before 2026-11-28, ninth session; pruner trains in the
  background while the next batch is searched, built and run);
- pruner-redraft2: pruner drafting again every 2nd round (the published schedule; later drafts
  evolve the last population on, with a quarter sampled afresh), pipelined;
- pruner-when-low: pruner drafting again only when the potential space runs low (the default
  before 2026-11-25, night; "pruner-stall3" in the results of that evening, when pruner was this);
- pruner-backoff: pruner whose wait for a stall re-draft doubles after each one that found nothing better;
- pruner-noshare: pruner whose stall re-drafts never wait for the run's drafting share (`redraft_share`
  null; the default before 2026-11-28, second session, now 0.15; in that day's first results pruner
  was this, and "pruner-share15" today's pruner);
- pruner-lowturn: pruner whose drafts for a potential space that ran low are made in turn and never
  held, and whose drafts alongside are taken up by the next round, done or not (`low_draft_ahead`
  false, the default before 2026-11-28, third session);
- pruner-gate: pruner with `verify_gate` (PSA ranks while it orders the measured batches better);
- pruner-gen1: pruner whose drafts evolve one generation instead of two (half the evolution);
- pruner-min50: pruner whose re-drafts sample afresh until 50 are valid, as the first draft (the
  default before 2026-11-27, third session; now 8, `redraft_min_samples`);
- pruner-first0: pruner whose tasks draft first each when its first round comes (`first_drafts_ahead`
  0, the default before 2026-11-27, fifth session; now 4);
- pruner-first2, pruner-first4: pruner whose tasks' first drafts start with the run, at most 2 (4)
  at once (`first_drafts_ahead`; 4 is now pruner, 2 was from 2026-11-27 to 2026-12-01), instead of
  each when its first round comes (with `--together`);
- pruner-fill: pruner-r16 whose batches grow (up to 64 trials) until running one lasts as long as
  the search and build of the next (`fill_device`, `bridge.fill_rule`), as `fill.json` ran it; since
  2026-11-27 pruner does so too, with `straggler_grace` 0.5 and `draft_ahead`;
- pruner-ahead1: pruner searching one round ahead (`search_ahead` 1, the default before 2026-11-27,
  tenth session): a batch is searched, then built, while the one before it runs (pruner searches
  while the batch before builds, so a round lasts the longer of search and build, not their sum);
- pruner-r16: pruner as it was before 2026-11-27: rounds of --trials-per-round, drafts in turn;
- pruner-first1: pruner whose first draft a task evolves one generation instead of two
  (`first_draft_generations`), the later drafts two;
- pruner-quick: pruner whose first batch a task is the PSA-best of the first draft's fresh samples,
  unevolved, and whose second round's draft evolves them (`quick_start`);
- moa: MoA-Pruner (`pam-siamese-update`) from the shipped model (bridge/weights/pam-cuda-sm_90a.pt);
- moa-sync: moa adapting on each measured batch before the next is handed out (`background_update` false);
- moa-draft2: moa whose first two batches a task are PSA's picks, the pretrained verifier not asked
  (`draft_rounds` 2), as a cold verifier's (Pruner's) are;
- moa-verify-in-turn: moa whose tasks' first verifies run in their first rounds, in the tuning loop
  (`first_verify_ahead` false, the default before 2026-11-29, eighth session); moa's run on the first
  draft's thread, beside the other tasks' drafts (with `--together`);
- moa-first-verify0: moa whose tasks' first verifies only rank the first draft's potential space, without
  the verifier's generation (`first_verify_generations` 0);
- pruner-published: the published schedule (a new draft every 2nd round from a fresh population,
  whole potential space evolved by the verifier, in turn) and PSA's published formula.
Reported: search overhead per trial (the loop's wall time minus the stand-in build and run time),
drafting's share of the wall time (and, of the drafting, the shares of MetaSchedule's sampling and
of PSA's featurize + score; the rest is MetaSchedule's evolution), and the share of time the
stand-in device sat idle. With `--together` the workloads are the tasks of one tuning run (as a
network's are), and each method's row also gives the seconds until every task's first batch was
measured (and its second).

    python benchmarks/search_overhead.py --trials 64 --out runs/search_overhead
    python benchmarks/search_overhead.py --together --methods pruner pruner-first2 --trials 128 --out runs/so_first
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

from jsonargparse import ArgumentParser

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tvm.ir.utils import derived_object

from bridge.config import CostModelConfig, SearchConfig, TuneConfig
from bridge.curve import device_idle_share
from bridge.tuning import tune_tasks
from data.atomic import atomic_write_text
from data.features import schedule_key
from data.zoo import operator_task
from tvm_env import ms

SHIPPED = str(Path(__file__).resolve().parents[1] / "bridge/weights/pam-cuda-sm_90a.pt")  # the shipped PAM

WORKLOADS = (
    "dense:128,3072,768",  # a BERT-base feed-forward layer, sequence 128
    "conv2d:1,28,28,128,128,3,1,1",  # a ResNet-50 stage-2 3x3 conv
    "depthwise_conv2d:1,56,56,144,3,1,1",  # a MobileNet-V2 depthwise conv
)
METHODS = {
    "xgb": (CostModelConfig(name="xgb"), SearchConfig()),
    "pruner": (CostModelConfig(name="pam"), SearchConfig(psa="h100")),
    "pruner-serial": (CostModelConfig(name="pam"), SearchConfig(psa="h100", pipeline=False)),
    "pruner-sync": (CostModelConfig(name="pam", background_update=False), SearchConfig(psa="h100")),
    "pruner-apart": (CostModelConfig(name="pam"), SearchConfig(psa="h100", build_apart=True)),
    "pruner-local": (CostModelConfig(name="pam"), SearchConfig(psa="h100", local_share=0.25)),
    "pruner-nolocal": (CostModelConfig(name="pam"), SearchConfig(psa="h100", local_share=0.0)),
    "pruner-redraft2": (CostModelConfig(name="pam"), SearchConfig(psa="h100", redraft_every=2)),
    "pruner-when-low": (CostModelConfig(name="pam"), SearchConfig(psa="h100", redraft_stall=0)),
    "pruner-backoff": (CostModelConfig(name="pam"), SearchConfig(psa="h100", redraft_backoff=True)),
    "pruner-noshare": (CostModelConfig(name="pam"), SearchConfig(psa="h100", redraft_share=None)),
    "pruner-lowturn": (CostModelConfig(name="pam"), SearchConfig(psa="h100", low_draft_ahead=False)),
    "pruner-gate": (CostModelConfig(name="pam"), SearchConfig(psa="h100", verify_gate=True)),
    "pruner-gen1": (CostModelConfig(name="pam"), SearchConfig(psa="h100", draft_generations=1)),
    "pruner-min50": (CostModelConfig(name="pam"), SearchConfig(psa="h100", redraft_min_samples=50)),
    "pruner-first0": (CostModelConfig(name="pam"), SearchConfig(psa="h100", first_drafts_ahead=0)),
    "pruner-first2": (CostModelConfig(name="pam"), SearchConfig(psa="h100", first_drafts_ahead=2)),
    "pruner-first4": (CostModelConfig(name="pam"), SearchConfig(psa="h100", first_drafts_ahead=4)),
    "pruner-blend": (CostModelConfig(name="pam"), SearchConfig(psa="h100", psa_weight=1.0)),
    "pruner-ahead1": (CostModelConfig(name="pam"), SearchConfig(psa="h100", search_ahead=1)),
    "pruner-fill": (
        CostModelConfig(name="pam"),
        SearchConfig(psa="h100", fill_device=64, straggler_grace=None, draft_ahead=False, first_drafts_ahead=0),
    ),
    "pruner-r16": (  # the default before 2026-11-27: rounds of --trials-per-round, drafts in turn
        CostModelConfig(name="pam"),
        SearchConfig(psa="h100", fill_device=0, straggler_grace=None, draft_ahead=False, first_drafts_ahead=0),
    ),
    "pruner-first1": (CostModelConfig(name="pam"), SearchConfig(psa="h100", first_draft_generations=1)),
    "pruner-quick": (CostModelConfig(name="pam"), SearchConfig(psa="h100", quick_start=True)),
    "moa": (CostModelConfig(name="pam-siamese-update", checkpoint=SHIPPED), SearchConfig(psa="h100")),
    "moa-sync": (
        CostModelConfig(name="pam-siamese-update", checkpoint=SHIPPED, background_update=False),
        SearchConfig(psa="h100"),
    ),
    "moa-draft2": (
        CostModelConfig(name="pam-siamese-update", checkpoint=SHIPPED),
        SearchConfig(psa="h100", draft_rounds=2),
    ),
    "moa-verify-in-turn": (
        CostModelConfig(name="pam-siamese-update", checkpoint=SHIPPED),
        SearchConfig(psa="h100", first_verify_ahead=False),
    ),
    "moa-first-verify0": (
        CostModelConfig(name="pam-siamese-update", checkpoint=SHIPPED),
        SearchConfig(psa="h100", first_verify_generations=0),
    ),
    "pruner-published": (
        CostModelConfig(name="pam"),
        SearchConfig(
            psa="h100",
            psa_formula="published",
            pipeline=False,
            redraft_every=2,
            resample_ratio=1.0,
            verify_pool=512,
            quick_start=False,
        ),
    ),
}


class SyntheticDevice:
    """A stand-in builder and runner: fixed seconds a trial, a latency fixed by the schedule's hash."""

    def __init__(self, build_s: float, run_s: float):
        self.build_s, self.run_s = build_s, run_s
        self.latency: dict[str, float] = {}
        self.dirs: list[str] = []

    def latency_of(self, mod) -> float:
        """1-100 us, log-uniform in the schedule's structural hash."""
        return 1e-6 * 10 ** (2 * (schedule_key(mod) % 10007) / 10007)

    def builder(self):
        device = self

        @derived_object
        class Builder(ms.builder.PyBuilder):
            def build(self, build_inputs):
                time.sleep(device.build_s * len(build_inputs))
                out = []
                for b in build_inputs:
                    folder = tempfile.mkdtemp(prefix="synthetic-")  # RemoveBuildArtifact deletes it
                    device.dirs.append(folder)
                    path = f"{folder}/artifact.tar"
                    device.latency[path] = device.latency_of(b.mod)
                    out.append(ms.builder.BuilderResult(path, None))
                return out

        return Builder()

    def runner(self):
        device = self

        @derived_object
        class Future(ms.runner.PyRunnerFuture):
            def __init__(self, latency: float, wait: float):
                super().__init__()
                self.latency, self.wait = latency, wait

            def done(self):
                return True

            def result(self):
                time.sleep(self.wait)
                return ms.runner.RunnerResult([self.latency], None)

        @derived_object
        class Runner(ms.runner.PyRunner):
            def run(self, runner_inputs):
                return [Future(device.latency[str(r.artifact_path)], device.run_s) for r in runner_inputs]

        return Runner()

    def clean(self) -> None:
        for folder in self.dirs:
            shutil.rmtree(folder, ignore_errors=True)


def _total(rows: list[dict], key: str) -> float:
    """Sum of a curve column over the rounds that have it (NaN where a round has none)."""
    return sum(r[key] for r in rows if math.isfinite(r[key]))


def measure(workload: str, method: str, args, out: Path) -> dict:
    """One method's run; `workload` may be several specs joined by "+" (the tasks of one run)."""
    cost_model, search = METHODS[method]
    device = SyntheticDevice(args.build_s, args.run_s)
    start = time.perf_counter()
    result = tune_tasks(
        [operator_task(spec) for spec in workload.split("+")],
        args.target,
        TuneConfig(out=str(out), trials=args.trials, trials_per_round=args.trials_per_round, seed=args.seed),
        search=search,
        cost_model=dataclasses.replace(cost_model, seed=args.seed),
        builder=device.builder(),
        runner=device.runner(),
        progress=False,
    )
    wall = time.perf_counter() - start
    device.clean()
    rows = result.rows
    trials = int(rows[-1]["total_trials"]) if rows else 0
    device_s = sum(r["build_s"] + r["run_s"] for r in rows)
    search_s = rows[-1]["elapsed_s"] - device_s if rows else math.nan
    draft_s, psa_s, sample_s = (_total(rows, key) for key in ("draft_s", "psa_s", "sample_s"))
    first: dict[str, float] = {}  # each task's first measured batch
    second: dict[str, float] = {}  # and its second
    for r in rows:
        if r["task"] in first:
            second.setdefault(r["task"], r["elapsed_s"])
        first.setdefault(r["task"], r["elapsed_s"])
    return {
        "workload": workload,
        "method": method,
        "trials": trials,
        "wall_s": round(wall, 2),
        "search_s_per_trial": round(search_s / max(trials, 1), 4),
        "draft_share": round(draft_s / rows[-1]["elapsed_s"], 4) if rows else math.nan,
        # of the drafting: MetaSchedule's sampling, PSA's featurize + score; the rest is its evolution
        "draft_sampling_share": round(sample_s / draft_s, 4) if draft_s else math.nan,
        "draft_psa_share": round(psa_s / draft_s, 4) if draft_s else math.nan,
        "device_idle_share": round(device_idle_share(rows), 4),
        "update_s": round(_total(rows, "update_s"), 2),
        # our cost models' training (in the background unless *-sync), and what the search waited of it
        "learn_s": round(_total(rows, "learn_s"), 2),
        "learn_wait_s": round(_total(rows, "learn_wait_s"), 2),
        "tasks": len(first),
        "first_batches_s": round(max(first.values()), 2) if first else math.nan,
        "second_batches_s": round(max(second.values()), 2) if len(second) == len(first) and second else math.nan,
    }


def main(argv: list[str] | None = None) -> list[dict]:
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="nvidia/nvidia-h100", help="the target searched for (nothing is built)")
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), help="operator specs (data.zoo.OPERATORS)")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--trials-per-round", type=int, default=16)
    p.add_argument("--build-s", type=float, default=0.2, help="stand-in build seconds a trial")
    p.add_argument("--run-s", type=float, default=0.3, help="stand-in run seconds a trial")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/search_overhead")
    p.add_argument("--together", action="store_true", help="the workloads are the tasks of one run, as a network's")
    args = p.parse_args(argv)
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    results = []
    for workload in ["+".join(args.workloads)] if args.together else args.workloads:
        for method in args.methods:
            row = measure(workload, method, args, out / f"{workload.replace(':', '_').replace(',', 'x')}-{method}")
            results.append(row)
            print(json.dumps(row), flush=True)
            atomic_write_text(out / "results.json", json.dumps(results, indent=1))
    header = f"{'workload':<38} {'method':<17} {'trials':>6} {'search s/trial':>15} {'draft %':>8}"
    print(f"\n{header} {'(sampling %':>11} {'PSA %)':>7} {'idle %':>7} {'first batches at':>17} {'second':>8}")
    for r in results:
        print(
            f"{r['workload'][:38]:<38} {r['method']:<17} {r['trials']:>6} {r['search_s_per_trial']:>15.3f} "
            f"{100 * r['draft_share']:>8.1f} {100 * r['draft_sampling_share']:>11.1f} {100 * r['draft_psa_share']:>7.1f} "
            f"{100 * r['device_idle_share']:>7.1f} {r['first_batches_s']:>15.1f} s {r['second_batches_s']:>6.1f} s"
        )
    return results


if __name__ == "__main__":
    main()
