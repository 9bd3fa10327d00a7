"""A resumed tuning run's first step, timed: opening its database (`bridge.database.open_database`).

Copies a suite arm's database (xz) to a temporary folder and times, twice each, the line-by-line check
(`bridge.database.repair_database`, which replays every record serially), TVM's own `JSONDatabase`
load (parallel) and `open_database`, which runs the check only when TVM's load fails. Then the
task's two replays of a resume, on `--threads` threads, twice each: the cost model's catch-up
(`bridge.catch_up`, its replay alone) and the search's measured set (`bridge.search._measured_keys`),
each replaying every record, against the same two with the run's `data.replay.ReplayMemo`, where the
second takes the first's replays.

    OMP_NUM_THREADS=1 python benchmarks/resume_open.py \
        --database benchmarks/results/suite_databases/ablations/ab9_fill64/dense_128x3072x768/pruner-s0
"""

from __future__ import annotations

import lzma
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cli import doc_parser
from tvm_env import ms, parse_target, setup


def main() -> None:
    parser = doc_parser(__doc__)
    parser.add_argument("--database", required=True, help="a folder of database_*.json.xz (a suite arm's)")
    parser.add_argument("--target", default="nvidia/nvidia-h100")
    parser.add_argument("--threads", type=int, default=2, help="the task's threads (TuneContext.num_threads)")
    args = parser.parse_args()
    setup(parse_target(args.target))
    from bridge.database import open_database, repair_database

    work = Path(tempfile.mkdtemp())
    for name in ("database_workload.json", "database_tuning_record.json"):
        (work / name).write_bytes(lzma.decompress((Path(args.database) / (name + ".xz")).read_bytes()))
    print("| records | line check (s) | TVM's load (s) | open_database (s) |\n|---|---|---|---|")
    for _ in range(2):
        start = time.perf_counter()
        repair_database(work)
        check = time.perf_counter() - start
        start = time.perf_counter()
        ms.database.JSONDatabase(work_dir=str(work), module_equality="structural")
        load = time.perf_counter() - start
        start = time.perf_counter()
        database, _ = open_database(work)
        opened = time.perf_counter() - start
        print(f"| {len(database)} | {check:.2f} | {load:.2f} | {opened:.2f} |")
    from bridge.search import _measured_keys
    from data.replay import ReplayMemo, replay_records, task_records

    records = task_records(database, database.get_all_tuning_records()[0].workload.mod)
    print(
        "\n| records | threads | catch-up + measured set (s) | the same with a ReplayMemo (s) | keys |\n|---|---|---|---|---|"
    )
    for _ in range(2):
        start = time.perf_counter()
        replay_records(records, args.threads)
        keys = _measured_keys(records, args.threads)
        twice = time.perf_counter() - start
        start = time.perf_counter()
        memo = ReplayMemo()
        memo.replay(records, args.threads)
        shared = _measured_keys(records, args.threads, memo)
        once = time.perf_counter() - start
        assert shared == keys and memo.hits == len(records)
        print(f"| {len(records)} | {args.threads} | {twice:.2f} | {once:.2f} | {len(keys)} |")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
