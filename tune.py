"""Tune a zoo network or a single operator with MetaSchedule and one of our cost models.

    python tune.py --network resnet_50 --target nvidia/nvidia-h100 --cost-model pam-siamese-update \\
        --checkpoint runs/pam.pt --psa h100 --trials 2000 --trials-per-round 10 --out runs/tune_r50
    python tune.py --workload matmul:512,512,512 --target '{"kind": "llvm", "num-cores": 2}' \\
        --cost-model xgb --trials 64 --out runs/mm
    python tune.py --config my_tune.yaml            # any flag, from a YAML file (--print_config writes one)

`--psa DEVICE` turns on Pruner's draft-then-verify search (PSA drafts, the cost model verifies);
without it, MetaSchedule's evolutionary search runs with the cost model. Everything goes to `--out`
(old name: --work-dir): the database, the tuning curve (CSV, rewritten after every measured batch,
and PNG), the cost model's state, summary.json and MetaSchedule's logs. Running again on the same
dir resumes (see bridge.tuning). The flags are the fields of bridge.config's dataclasses plus the
workload's; `--wandb` logs the run to Weights & Biases (offline when no key is configured).

At the end it prints the per-task table, the estimated total latency (with how many of the
network's tasks it covers) and the search time; for networks it then times the network compiled
with the best schedules, untuned (an empty database) and in torch eager mode, on the same device.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, Literal

from bridge.cli import add_dataclass_arguments, build
from bridge.config import CostModelConfig, MeasureConfig, SearchConfig, TuneConfig
from bridge.factory import COST_MODELS, first_drafts_at_once, resolve_first_draft_threads, resolve_verify_gate

__all__ = ["build_parser", "main"]

log = logging.getLogger("tune")


def build_parser() -> Any:
    """The jsonargparse parser: workload flags, then every field of the four config dataclasses."""
    from jsonargparse import ActionConfigFile, ActionYesNo, ArgumentParser, DefaultHelpFormatter

    p = ArgumentParser(
        prog="python tune.py", description=__doc__.split("\n\n")[0], formatter_class=DefaultHelpFormatter
    )
    p.add_argument("--config", action=ActionConfigFile, help="a YAML file with any of these options")
    p.add_argument(
        "--network",
        type=str | None,
        default=None,
        help="a data.zoo network (resnet_50, bert_base, ...) or your own model: path.py:factory, model.onnx, relax.json",
    )
    p.add_argument("--workload", type=str | None, default=None, help="one operator spec, e.g. matmul:512,512,512")
    p.add_argument(
        "--input-size", type=int | None, default=None, help="network input side / sequence length (unset: its own)"
    )
    p.add_argument("--max-tasks", type=int | None, default=None, help="tune only the heaviest N tasks of the network")
    p.add_argument(
        "--target", type=str, required=True, help='a target tag ("nvidia/nvidia-h100") or JSON dict ({"kind": "llvm"})'
    )
    for cls in (TuneConfig, CostModelConfig, SearchConfig, MeasureConfig):
        add_dataclass_arguments(p, cls, types={"cost-model": Literal[COST_MODELS]})
    p.add_argument(
        "--compile",
        action=ActionYesNo(no_prefix="no-"),
        default=True,
        help="networks: time the compiled network, untuned and torch eager at the end (--no-compile skips)",
    )
    p.add_argument("--wandb", action=ActionYesNo(no_prefix="no-"), default=False, help="log the run to W&B")
    p.add_argument("--wandb-project", type=str, default="pruner-lightning-tune", help="W&B project of --wandb")
    p.add_argument("--progress", action=ActionYesNo(no_prefix="no-"), default=True, help="show a progress bar")
    return p


def _parse(argv: Sequence[str] | None) -> tuple[Any, dict]:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.network is None) == (args.workload is None):
        parser.error("give exactly one of --network and --workload")
    configs = {
        "config": build(TuneConfig, args),
        "cost_model": build(CostModelConfig, args, seed=args.seed),
        "search": build(SearchConfig, args),
        "measure": build(MeasureConfig, args),
    }
    return args, configs


def _network_times(args: Any, out: str, target: Any, console: Any) -> dict[str, Any]:
    """Tuned, untuned and torch eager times (ms) of the network, and how many of the compiled
    network's kernels took a tuned schedule; a failure leaves its entry None."""
    from bridge.network_timing import time_network

    times = time_network(
        [out], args.network, args.input_size, target, say=lambda line: console.print(line, soft_wrap=True, markup=False)
    )
    tuned = times["tuned"][str(out)] or {}
    return {
        "end_to_end_ms": tuned.get("ms"),
        "tuned_kernels": tuned.get("tuned_kernels"),
        "kernels": tuned.get("kernels"),
        "untuned_ms": times["untuned_ms"],
        "torch_eager_ms": times["torch_eager_ms"],
    }


def main(argv: Sequence[str] | None = None) -> Any:
    """Run tune.py; returns the `bridge.tuning.TuneResult`. Bad arguments raise ValueError (the
    script's entry point turns it into an `error:` line and exit status 2)."""
    from rich.console import Console

    from bridge.report import launch_floor_note, print_report, summary, write_summary
    from bridge.tuning import CURVE_CSV, CURVE_PNG, target_label, target_spec, tune_tasks
    from bridge.workers import start_workers, walks_tir
    from data import zoo
    from tvm_env import parse_target, setup, usable_cores

    args, configs = _parse(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # a log file or pipe gets 160 columns, not rich's 80, so the task table's names stay on one line
    # (COLUMNS, where set, still decides)
    console = Console(width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 160)
    target = parse_target(args.target)
    setup(target)
    # the build and walk pools' processes import TVM while the tasks are extracted, not in the first round
    builder, walk_pool = start_workers(
        target, configs["measure"], walk=walks_tir(configs["search"], configs["cost_model"])
    )
    total_tasks = None
    if args.network:
        every = zoo.extract_network_tasks(args.network, target, args.input_size)
        tasks, total_tasks = zoo.select_tasks(every, max_tasks=args.max_tasks), len(every)
    else:
        tasks = [zoo.operator_task(args.workload)]
    if not tasks:
        raise ValueError(f"no tunable tasks in {args.network or args.workload}")
    configs["search"] = resolve_first_draft_threads(
        resolve_verify_gate(configs["search"], configs["cost_model"].name, configs["cost_model"].adapt_every),
        int(target.export().get("num-cores", usable_cores())),
        len(tasks),
    )  # said and recorded
    search, cost_model, out = configs["search"], configs["cost_model"], configs["config"].out
    workload = args.network or args.workload
    options = (", verify gate on" if search.verify_gate else "") + (
        f", PSA blend {search.psa_weight:g}" if search.psa_weight else ""
    )
    at_once = first_drafts_at_once(search, len(tasks))
    if at_once > 1:
        threads = search.first_draft_threads
        options += f", first drafts {at_once} at once on {threads} thread{'s' if threads != 1 else ''} each"
    draft = f", draft-then-verify with PSA({search.psa}, {search.psa_formula}){options}" if search.psa else ""
    # soft_wrap: plain lines are left to the terminal (rich would break them at 80 columns in a pipe)
    console.print(
        f"{len(tasks)} task(s), target {target_label(target)}, cost model {cost_model.name}{draft}", soft_wrap=True
    )
    run_config = {"workload": workload, "target": target_spec(target), "network": args.network}
    for config in configs.values():
        run_config.update({f"{type(config).__name__}.{k}": v for k, v in dataclasses.asdict(config).items()})
    tracker = None
    if args.wandb:
        from bridge.tracking import WandbRun

        tracker = WandbRun(out, args.wandb_project, run_config, name=f"{workload}-{cost_model.name}")
    result = tune_tasks(
        tasks,
        target,
        progress=args.progress,
        on_round=None if tracker is None else tracker.log_round,
        label=workload,
        builder=builder,
        walk_pool=walk_pool,
        **configs,
    )
    print_report(result, console, total_tasks=total_tasks)
    floor = launch_floor_note(result, target.kind.name, configs["measure"].timer)
    if floor is not None:
        console.print(f"note: {floor}", soft_wrap=True, markup=False)
    times: dict[str, Any] = {}
    if args.network and args.compile:
        if configs["measure"].runner != "local":
            console.print("end-to-end timing needs the device locally; skipped with --runner rpc")
        else:
            times = _network_times(args, out, target, console)
    data = summary(
        result,
        total_tasks=total_tasks,
        workload=workload,
        target=target_label(target),
        target_spec=target_spec(target),
        cost_model=cost_model.name,
        search="draft-then-verify" if search.psa else "evolutionary",
        psa=search.psa,
        psa_formula=search.psa_formula if search.psa else None,
        verify_gate=search.verify_gate,
        psa_weight=search.psa_weight if search.psa else None,
        first_drafts_ahead=search.first_drafts_ahead if search.psa else None,
        first_drafts_at_once=at_once if search.psa else None,  # what took effect: at most the tasks, 1 in turn
        first_draft_threads=search.first_draft_threads if search.psa else None,
        timer=configs["measure"].timer,
        launch_floor_note=floor,
        **times,
    )
    write_summary(f"{out}/summary.json", data)
    console.print(f"summary.json, database, tuning curve ({CURVE_CSV}, {CURVE_PNG}) and logs in {out}", soft_wrap=True)
    if tracker is not None:
        tracker.finish(data, plot=f"{out}/{CURVE_PNG}")
    return result


def cli(argv: Sequence[str] | None = None) -> int:
    """Entry point: an `error:` line and exit status 2 for a bad argument or unusable input file."""
    try:
        main(argv)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli())
