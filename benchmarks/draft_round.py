"""Where a draft-then-verify round spends its time, without a GPU: draft a CUDA task's potential space.

Drafting needs no device: sampling the design space, MetaSchedule's evolution (mutators and
postprocessors, C++) and PSA's scoring (our lowering + the Python TIR walk) all run on the host.
The script runs one drafting round of `DraftVerifySearch` (the first round always drafts) on a
conv2d of ResNet-50's first stage for an H100 target, the verifier being MetaSchedule's
RandomModel (scoring is free, so the verify share is the evolution's own cost), and splits the
round's wall time into PSA scoring (of which lowering and the walk), the verifier's scoring and
the rest (MetaSchedule's sampling and evolution, hashing).

    python benchmarks/draft_round.py --population 512 --potential 128
    python benchmarks/draft_round.py --population 1536 --potential 512 --walk-workers 16   # published sizes
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tvm import te
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.testing import te_workload

from bridge import tvm_env
from bridge.psa import PSACostModel
from bridge.search import DraftVerifySearch
from bridge.tvm_env import ms, tvm


@derived_object
class Stopwatch(ms.cost_model.PyCostModel):
    """Delegates to `model`, adding up the seconds and candidates of its `predict` calls."""

    def __init__(self, model):
        super().__init__()
        self.model, self.seconds, self.scored = model, 0.0, 0

    def load(self, path):
        self.model.load(path)

    def save(self, path):
        self.model.save(path)

    def update(self, context, candidates, results):
        self.model.update(context, candidates, results)

    def predict(self, context, candidates):
        start = time.perf_counter()
        scores = self.model.predict(context, candidates)
        self.seconds += time.perf_counter() - start
        self.scored += len(candidates)
        return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="nvidia/nvidia-h100")
    parser.add_argument("--psa", default="h100", help="PSA device row")
    parser.add_argument("--population", type=int, default=512)
    parser.add_argument("--potential", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None, help="TuneContext threads (default: all cores)")
    parser.add_argument("--walk-workers", type=int, default=None, help="PSA walk processes (default: bridge.psa's)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    target = tvm_env.parse_target(args.target)
    tvm_env.setup(target)
    mod = tvm.IRModule({"main": te.create_prim_func(te_workload.conv2d_nhwc(1, 56, 56, 64, 64, 3, 1, 1))})
    draft = Stopwatch(PSACostModel(device=args.psa, workers=args.walk_workers))
    verify = Stopwatch(ms.cost_model.RandomModel(seed=args.seed))
    strategy = DraftVerifySearch(draft=draft, population_size=args.population, potential_size=args.potential)
    context = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", search_strategy=strategy,
                             task_name="conv2d", num_threads=args.threads or "physical", rand_state=args.seed)  # fmt: skip
    strategy.pre_tuning(64, 16, context.generate_design_space(), ms.database.MemoryDatabase(), verify)

    start = time.perf_counter()
    picked = strategy.generate_measure_candidates()
    total = time.perf_counter() - start
    rest = total - draft.seconds - verify.seconds
    print(f"target {args.target}, population {args.population}, potential {args.potential}, "
          f"{int(context.num_threads)} threads, walk workers {draft.model.walker.workers}")
    print(f"one drafting round: {total:.1f} s, {len(picked or [])} candidates picked")
    print(f"  PSA scoring:      {draft.seconds:6.1f} s  {draft.scored:5d} candidates  "
          f"{1e3 * draft.seconds / max(draft.scored, 1):.1f} ms each")
    print(f"  verifier scoring: {verify.seconds:6.1f} s  {verify.scored:5d} candidates (RandomModel)")
    print(f"  MetaSchedule sampling + evolution, hashing: {rest:.1f} s ({rest / total:.0%})")


if __name__ == "__main__":
    main()
