"""Tune a zoo network or a single operator with MetaSchedule and one of our cost models.

    python tune.py --network resnet_50 --target nvidia/nvidia-h100 --cost-model pam-siamese-update \\
        --checkpoint runs/pam.pt --psa h100 --trials 2000 --trials-per-round 10 --work-dir runs/tune_r50
    python tune.py --workload matmul:512,512,512 --target '{"kind": "llvm", "num-cores": 2}' \\
        --cost-model xgb --trials 64 --work-dir runs/mm

`--psa DEVICE` turns on Pruner's draft-then-verify search (`bridge.search.DraftVerifySearch`: PSA
drafts, the cost model verifies); without it, MetaSchedule's evolutionary search runs with the cost
model. Everything goes to `--work-dir`: the MetaSchedule database (database_*.json), the tuning
curve (tuning_curve.csv: one row per measured batch with the per-round search statistics, and
tuning_curve.png: best estimated latency vs trials and vs search time), the cost model's state
(cost_model.<name>.bin) and MetaSchedule's logs. Running again with the same work dir resumes:
the database is reused, trials already spent count against `--trials`, measured schedules are not
measured again, the cost model and the curve continue.

At the end it prints the per-task table (trials, best latency, GFLOPS), the estimated total
latency (sum over tasks of weight x best latency) and the search time, then (networks) compiles the
network with the best schedules and reports its mean inference time (relax VM time_evaluator).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import logging
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from data.atomic import atomic_path
from tvm_env import (
    PooledLocalBuilder,
    ms,
    parse_target,
    setup,
    task_loggers,
    tvm,
)

__all__ = ["COST_MODELS", "TuneResult", "build_parser", "main", "make_cost_model", "make_strategy", "tune_tasks"]

log = logging.getLogger("tune")

COST_MODELS = ("pam", "pam-siamese-update", "pam-no-update", "mlp", "mlp-no-update", "xgb", "random")
CURVE_CSV, CURVE_PNG = "tuning_curve.csv", "tuning_curve.png"


@dataclasses.dataclass
class TaskResult:
    """One task after tuning: trials in the database and the best mean latency (inf: none valid)."""

    name: str
    weight: float
    flops: float
    trials: int
    best_s: float

    @property
    def gflops(self) -> float:
        return self.flops / self.best_s / 1e9 if math.isfinite(self.best_s) and self.best_s > 0 else 0.0


@dataclasses.dataclass
class TuneResult:
    """What a tuning run leaves: per-task results, the curve rows (earlier runs' first) and times."""

    tasks: list[TaskResult]
    rows: list[dict]
    search_s: float
    database: Any

    @property
    def estimated_s(self) -> float:
        """Sum over tasks of weight x best latency (inf while a task has no valid measurement)."""
        return float(sum(t.weight * t.best_s for t in self.tasks))


def make_cost_model(
    name: str, *, checkpoint: str | None = None, epochs: int = 50, seed: int = 0, cores: int = 1
) -> Any:
    """The cost model called `name` (one of `COST_MODELS`).

    xgb is MetaSchedule's XGBModel with no warm-up (by default it predicts at random until 100
    measurements, so a short run would never use it).

    Raises:
        ValueError: unknown name, or a checkpoint given to / missing for a mode (see PrunerCostModel).
    """
    if name not in COST_MODELS:
        raise ValueError(f"--cost-model {name!r} must be one of {COST_MODELS}")
    if name in ("xgb", "random"):
        if checkpoint is not None:
            raise ValueError(f"--cost-model {name} takes no --checkpoint (got {checkpoint!r})")
        if name == "random":
            return ms.cost_model.RandomModel(seed=seed)
        return ms.cost_model.XGBModel(num_warmup_samples=0, num_tuning_cores=cores)
    from bridge.cost_model import PrunerCostModel

    return PrunerCostModel(mode=name, artifact=checkpoint, epochs=epochs, seed=seed)


def make_strategy(
    *,
    psa: str | None,
    psa_devices: str | None = None,
    psa_formula: str = "published",
    population: int | None = None,
    potential: int = 512,
    draft_generations: int = 2,
    verify_generations: int = 1,
    redraft_every: int = 2,
    eps_greedy: float = 0.1,
    search_log: Any = None,
) -> Any:
    """DraftVerifySearch with PSA on device row `psa`, or MetaSchedule's evolutionary search (psa None).

    `population` defaults to the published 1536 for draft-then-verify and to MetaSchedule's 512 for
    the evolutionary search; the other options concern draft-then-verify only.
    """
    from bridge.search import DraftVerifySearch, ResumableEvolutionarySearch

    if psa is None:
        return ResumableEvolutionarySearch(log=search_log, population_size=population or 512)
    from bridge.psa import PSACostModel

    return DraftVerifySearch(
        draft=PSACostModel(device=psa, formula=psa_formula, devices_file=psa_devices),
        population_size=population or 1536,
        potential_size=potential,
        draft_generations=draft_generations,
        verify_generations=verify_generations,
        redraft_every=redraft_every,
        eps_greedy=eps_greedy,
        log=search_log,
    )


def _records_by_task(database: Any, tasks: Sequence[Any]) -> dict[str, tuple[int, float]]:
    """Task name -> (records in the database, best mean latency in seconds)."""
    from data.labels import mean_latency

    out = {}
    records = database.get_all_tuning_records() if len(tasks) else []
    for task in tasks:
        if not database.has_workload(task.mod):
            out[task.name] = (0, math.inf)
            continue
        workload = database.commit_workload(task.mod)
        mine = [r for r in records if r.workload.same_as(workload)]
        lat = [mean_latency(None if r.run_secs is None else [float(s) for s in r.run_secs]) for r in mine]
        out[task.name] = (len(mine), min(lat, default=math.inf))
    return out


def _runner(kind: str, tracker: str | None, key: str | None, evaluator: Any, timeout: float) -> Any:
    if kind == "local":
        return ms.runner.LocalRunner(evaluator_config=evaluator, timeout_sec=timeout)
    if not tracker or not key or ":" not in tracker:
        raise ValueError(f"--runner rpc needs --tracker HOST:PORT and --key KEY (got tracker={tracker!r}, key={key!r})")
    host, port = tracker.rsplit(":", 1)
    config = ms.runner.RPCConfig(
        tracker_host=host, tracker_port=int(port), tracker_key=key, session_timeout_sec=int(timeout)
    )
    return ms.runner.RPCRunner(rpc_config=config, evaluator_config=evaluator)


def tune_tasks(
    tasks: Sequence[Any],
    target: Any,
    work_dir: str | os.PathLike,
    *,
    cost_model: str = "xgb",
    checkpoint: str | None = None,
    psa: str | None = None,
    strategy_options: dict | None = None,
    trials: int = 64,
    trials_per_round: int = 10,
    max_trials_per_task: int | None = None,
    seed: int = 0,
    epochs: int = 50,
    runner: str = "local",
    tracker: str | None = None,
    key: str | None = None,
    evaluator: Any = None,
    builder_workers: int | None = None,
    builder: Any = None,
    timeout: float = 30.0,
    progress: bool = True,
    deadline_s: float | None = None,
) -> TuneResult:
    """Tune `tasks` (data.zoo.TaskSpec list) on `target` into `work_dir`, resuming what is there.

    Args:
        tasks: the workloads (name, mod, weight, flops).
        target: a Target, tag, dict or JSON string.
        work_dir: database, curve, cost-model state and logs (created if missing).
        cost_model, checkpoint: see `make_cost_model`.
        psa: device row for draft-then-verify; None for MetaSchedule's evolutionary search.
        strategy_options: further `make_strategy` keywords (population, potential, eps_greedy, ...;
            only population applies without `psa`).
        trials: total trial budget of the work dir, earlier runs included.
        trials_per_round: measurements per batch (published: 10).
        max_trials_per_task: per-task cap (default: no cap beyond `trials`).
        seed: seeds the task contexts, the task scheduler and the cost model.
        epochs: online-training epochs of our cost models.
        runner, tracker, key: "local", or "rpc" through a tracker HOST:PORT with a device key.
        evaluator: ms.runner.EvaluatorConfig (default: number=3, repeat=1, min_repeat_ms=100).
        builder_workers: parallel builds (default: the machine's cores).
        builder: a MetaSchedule Builder to use instead (e.g. one PooledLocalBuilder shared by several
            runs of one process, so its workers start once).
        timeout: build and run timeout in seconds.
        progress: show a progress bar of the trials.
        deadline_s: stop starting new batches after this many seconds of this run (None: no limit).

    Returns:
        The TuneResult (the database is left in `work_dir`).
    """
    from tqdm import tqdm

    from bridge.search import SearchLog, read_rounds

    if trials < 1 or trials_per_round < 1:
        raise ValueError(f"--trials ({trials!r}) and --trials-per-round ({trials_per_round!r}) must be >= 1")
    target = parse_target(target)
    setup(target)
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    cores = int(target.export().get("num-cores", os.cpu_count() or 1))
    database = ms.database.JSONDatabase(work_dir=str(work_dir), module_equality="structural")
    before = _records_by_task(database, tasks)
    previous_rows = read_rounds(work_dir / CURVE_CSV)
    spent = sum(n for n, _ in before.values())
    search_log = SearchLog(
        best={name: best for name, (_, best) in before.items() if math.isfinite(best)},
        trials_before=spent,
        seconds_before=previous_rows[-1]["elapsed_s"] if previous_rows else 0.0,
        rounds_before=collections.Counter(r["task"] for r in previous_rows),
        deadline_s=deadline_s,
    )
    model = make_cost_model(cost_model, checkpoint=checkpoint, epochs=epochs, seed=seed, cores=cores)
    state_file = work_dir / f"cost_model.{cost_model}.bin"
    if state_file.exists() and cost_model not in ("random",):
        model.load(str(state_file))
        log.info("resumed the %s cost model from %s", cost_model, state_file)
    strategy = make_strategy(psa=psa, search_log=search_log, **(strategy_options or {}))
    loggers = task_loggers(str(work_dir), [t.name for t in tasks])
    contexts = [
        ms.TuneContext(
            mod=task.mod,
            target=target,
            space_generator="post-order-apply",
            search_strategy=strategy,
            task_name=task.name,
            logger=logger,
            rand_state=rand_state,
            num_threads=cores,
        ).clone()
        for task, logger, rand_state in zip(tasks, loggers, ms.utils.fork_seed(seed, n=len(tasks)))
    ]
    remaining = trials - spent
    if remaining > 0:
        bar = tqdm(total=trials, initial=spent, unit="trial", desc="tune", dynamic_ncols=True, disable=not progress)

        def on_round(row: dict) -> None:
            bar.update(int(row["trials"]))
            bar.set_postfix_str(f"est {row['estimated_ms']:.4g} ms")

        search_log.on_round = on_round
        if builder is None:
            builder = PooledLocalBuilder(max_workers=builder_workers or cores, timeout_sec=timeout)
        evaluator = evaluator or ms.runner.EvaluatorConfig(
            number=3, repeat=1, min_repeat_ms=100, enable_cpu_cache_flush=False
        )
        try:
            ms.tune_tasks(
                tasks=contexts,
                task_weights=[float(t.weight) for t in tasks],
                work_dir=str(work_dir),
                max_trials_global=remaining,
                max_trials_per_task=max_trials_per_task or trials,
                num_trials_per_iter=trials_per_round,
                builder=search_log.builder(builder),
                runner=search_log.runner(_runner(runner, tracker, key, evaluator, timeout)),
                database=database,
                cost_model=model,
                measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), search_log.callback()],
                task_scheduler=ms.task_scheduler.GradientBased(seed=seed),
            )
        finally:
            bar.close()
            search_log.write_csv(work_dir / CURVE_CSV, previous_rows)
            if cost_model != "random":
                model.save(str(state_file))
    else:
        log.info("the work dir already holds %d trials (budget %d): nothing to tune", spent, trials)
    after = _records_by_task(database, tasks)
    rows = [*previous_rows, *search_log.rows]
    plot_curves({"tuning": rows}, work_dir / CURVE_PNG)
    return TuneResult(
        tasks=[TaskResult(t.name, float(t.weight), float(t.flops), *after[t.name]) for t in tasks],
        rows=rows,
        search_s=search_log.elapsed() if remaining > 0 else search_log.seconds_before,
        database=database,
    )


def plot_curves(curves: dict[str, Sequence[dict]], path: str | os.PathLike) -> None:
    """PNG of the best estimated latency vs trials and vs search time (finite points only), one
    line per named curve (a legend when there are several); written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, rows in curves.items():
        points = [
            (r["total_trials"], r["elapsed_s"], r["estimated_ms"]) for r in rows if math.isfinite(r["estimated_ms"])
        ]
        if points:
            trials, seconds, est = map(np.asarray, zip(*points))
            axes[0].step(trials, est, where="post", marker="o", markersize=3, label=name)
            axes[1].step(seconds, est, where="post", marker="o", markersize=3, label=name)
    axes[0].set_xlabel("trials")
    axes[1].set_xlabel("search time (s)")
    for ax in axes:
        ax.set_ylabel("estimated latency (ms)")
        ax.grid(alpha=0.3)
        if len(curves) > 1:
            ax.legend()
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)


def _print_report(result: TuneResult, console: Any) -> None:
    from rich.table import Table

    table = Table(title="tuned tasks")
    for column in ("task", "weight", "trials", "latency (us)", "GFLOPS", "weighted (us)"):
        table.add_column(column, justify="left" if column == "task" else "right")
    for t in result.tasks:
        finite = math.isfinite(t.best_s)
        table.add_row(
            t.name,
            f"{t.weight:g}",
            str(t.trials),
            f"{t.best_s * 1e6:.2f}" if finite else "n/a",
            f"{t.gflops:.1f}" if finite else "n/a",
            f"{t.weight * t.best_s * 1e6:.2f}" if finite else "n/a",
        )
    console.print(table)
    est = result.estimated_s
    console.print(
        f"estimated total latency: {est * 1e3:.4f} ms"
        if math.isfinite(est)
        else "estimated total latency: n/a (a task has no valid run)"
    )
    console.print(f"search time: {result.search_s:.1f} s over {sum(t.trials for t in result.tasks)} trials")


def _time_network(work_dir: str, network: str, size: int | None, target_json: str, number: int, repeat: int) -> float:
    """Runs in a child process (see `measure_network`): compile with the database's best schedules
    and time the relax VM."""
    from tvm import relax

    from data import zoo

    target = parse_target(target_json)
    setup(target)
    database = ms.database.JSONDatabase(work_dir=work_dir, module_equality="structural")
    mod = zoo._relax_module(network, size)  # the unfused module: compile_relax fuses like extraction did
    executable = ms.relax_integration.compile_relax(database, mod, target, params=None)
    dev = tvm.cpu() if target.kind.name == "llvm" else tvm.device(target.kind.name, 0)
    vm = relax.VirtualMachine(executable, dev)
    net = zoo.NETWORKS[network]
    example = tvm.runtime.tensor(net.example(size or net.default_size).numpy(), dev)
    return float(vm.time_evaluator("main", dev, number=number, repeat=repeat)(example).mean)


def measure_network(
    work_dir: str | os.PathLike,
    network: str,
    size: int | None,
    target: Any,
    number: int = 20,
    repeat: int = 5,
    timeout: float = 600.0,
) -> float:
    """Mean inference time (s) of the zoo network compiled with the best schedules of `work_dir`'s database.

    The network is compiled and run in a child process: a kernel that cannot run on this machine
    (a database tuned for another CPU, say, whose code traps with SIGILL) fails this call with a
    RuntimeError instead of killing the caller.
    """
    from tvm.support.popen_pool import PopenWorker

    target = parse_target(target)
    worker = PopenWorker(timeout=timeout)
    try:
        worker.send(_time_network, (str(work_dir), network, size, json.dumps(target.export()), number, repeat))
        return float(worker.recv())
    except (ChildProcessError, TimeoutError) as err:
        raise RuntimeError(
            f"timing the compiled {network} failed in its child process ({type(err).__name__}: {err})"
        ) from err
    finally:
        worker.kill()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python tune.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--network", help="a data.zoo network (resnet_50, mobilenet_v2, bert_base, ...)")
    what.add_argument("--workload", help="a single operator spec, e.g. matmul:512,512,512 (see data.zoo.OPERATORS)")
    p.add_argument(
        "--input-size", type=int, default=None, help="network input side / sequence length (default: the network's)"
    )
    p.add_argument("--max-tasks", type=int, default=None, help="tune only the heaviest N tasks of the network")
    p.add_argument(
        "--target",
        required=True,
        help='a target tag ("nvidia/nvidia-h100") or JSON dict ({"kind": "llvm", "num-cores": 2})',
    )
    p.add_argument("--cost-model", choices=COST_MODELS, default="pam")
    p.add_argument(
        "--checkpoint", default=None, help="artifact (bridge.export) or train.py .ckpt for the pretrained modes"
    )
    p.add_argument("--epochs", type=int, default=50, help="online-training epochs of our cost models")
    p.add_argument(
        "--psa",
        default=None,
        metavar="DEVICE",
        help="draft-then-verify with this PSA device row (configs/devices.yaml; 'auto': this GPU)",
    )
    p.add_argument("--psa-devices", default=None, metavar="FILE", help="YAML file with more PSA device rows")
    p.add_argument("--psa-formula", default="published", help="PSA scoring formula (bridge.psa.FORMULAS)")
    p.add_argument(
        "--population",
        type=int,
        default=None,
        help="population size (default: 1536 for the draft, 512 for MetaSchedule's evolution)",
    )
    p.add_argument("--potential", type=int, default=512, help="potential-space size kept by the draft")
    p.add_argument("--draft-generations", type=int, default=2)
    p.add_argument("--verify-generations", type=int, default=1)
    p.add_argument("--redraft-every", type=int, default=2)
    p.add_argument("--eps-greedy", type=float, default=0.1)
    p.add_argument("--trials", type=int, default=200, help="total trial budget of the work dir (earlier runs included)")
    p.add_argument("--trials-per-round", type=int, default=10)
    p.add_argument("--max-trials-per-task", type=int, default=None)
    p.add_argument("--work-dir", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--runner", choices=("local", "rpc"), default="local")
    p.add_argument("--tracker", default=None, metavar="HOST:PORT")
    p.add_argument("--key", default=None, help="RPC device key")
    p.add_argument("--timeout", type=float, default=30.0, help="build / run timeout (s)")
    p.add_argument("--number", type=int, default=3, help="runs per measurement")
    p.add_argument("--repeat", type=int, default=1, help="measurements per candidate")
    p.add_argument("--min-repeat-ms", type=int, default=100)
    p.add_argument("--no-compile", action="store_true", help="skip compiling and timing the whole network")
    p.add_argument("--deadline", type=float, default=None, help="stop starting new batches after this many seconds")
    return p


def main(argv: Sequence[str] | None = None) -> TuneResult:
    from rich.console import Console

    from data import zoo

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    console = Console()
    target = parse_target(args.target)
    setup(target)
    if args.network:
        tasks = zoo.select_tasks(
            zoo.extract_network_tasks(args.network, target, args.input_size), max_tasks=args.max_tasks
        )
    else:
        tasks = [zoo.operator_task(args.workload)]
    if not tasks:
        raise SystemExit(f"error: no tunable tasks in {args.network or args.workload}")
    search = f", draft-then-verify with PSA({args.psa})" if args.psa else ""
    console.print(f"{len(tasks)} task(s), target {target.export().get('kind')}, cost model {args.cost_model}{search}")
    options = dict(
        psa_devices=args.psa_devices,
        psa_formula=args.psa_formula,
        population=args.population,
        potential=args.potential,
        draft_generations=args.draft_generations,
        verify_generations=args.verify_generations,
        redraft_every=args.redraft_every,
        eps_greedy=args.eps_greedy,
    )
    result = tune_tasks(
        tasks,
        target,
        args.work_dir,
        cost_model=args.cost_model,
        checkpoint=args.checkpoint,
        psa=args.psa,
        strategy_options=options if args.psa else {"population": args.population},
        trials=args.trials,
        trials_per_round=args.trials_per_round,
        max_trials_per_task=args.max_trials_per_task,
        seed=args.seed,
        epochs=args.epochs,
        runner=args.runner,
        tracker=args.tracker,
        key=args.key,
        evaluator=ms.runner.EvaluatorConfig(
            number=args.number, repeat=args.repeat, min_repeat_ms=args.min_repeat_ms, enable_cpu_cache_flush=False
        ),
        timeout=args.timeout,
        deadline_s=args.deadline,
    )
    _print_report(result, console)
    console.print(f"database, tuning curve ({CURVE_CSV}, {CURVE_PNG}) and logs in {args.work_dir}")
    if args.network and not args.no_compile:
        if args.runner != "local":
            console.print("end-to-end timing needs the device locally; skipped with --runner rpc")
        else:
            seconds = measure_network(args.work_dir, args.network, args.input_size, target)
            console.print(f"end-to-end mean inference time: {seconds * 1e3:.4f} ms (relax VM, best schedules)")
    return result


if __name__ == "__main__":
    try:
        main()
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
