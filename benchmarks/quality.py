"""Ranking quality of the cost models on one shard folder and one split, in one run, one table.
(Over 400 lines on purpose: every row's scorer sits beside the loop that gives all rows one split.)

    python benchmarks/quality.py --shards DIR --split hold-out --test-networks mobilenet_v2 --out runs/quality
    python benchmarks/quality.py --shards DIR --seed 0 1 2 --models xgb pam -- --trainer.precision bf16-mixed

Rows (all scored on exactly the same test records, with `pruner_models.metrics.ranking_metrics`:
per task, weighted by the task's test records):

* `pam`, `mlp`: `train.py fit --config configs/<model>.yaml` (best epoch on validation), then
  `train.py test` on the best checkpoint. Extra train.py flags go after `--`.
* `xgb`: MetaSchedule's own `XGBModel` (pack-sum XGBoost on PerStoreFeature rows) fitted on the
  same training records: the shards' `stmt` rows ARE PerStoreFeature output. Its internals do the
  work: `FeatureGroup` per task (labels min_cost / cost over the task's training records, as
  `XGBModel.update` builds them), `_train` (pack-sum square-error objective weighted by the label,
  early stopping on training p-rmse, as in a tuning run), `_predict` (sum of per-row scores).
  Not `update`/`predict` themselves: they take a TuneContext and replay candidates, and `predict`
  returns random scores below `num_warmup_samples` (set to 0 here anyway).
* `psa`: Pruner's analytic draft model (`bridge.psa.psa_scores` on the shards' PSA rows) with the
  `--psa-device` row; n/a on CPU (llvm) records. Never trains.
* `pam+psa`: the `pam` row's best checkpoint blended with PSA within each task
  (`pruner_models.blend`: standardized scores, PSA's weighted by `--psa-weight`). No fit of its own.
* `pam+xgb`: the `pam` row's best checkpoint and the `xgb` row's model, each one's test scores
  standardized within each task, summed (two learned models that err on different programs). No
  fit of its own; it needs both rows before it in `--models`.
* `pam+xgb+psa`: that pair blended with PSA as `pam+psa` blends the checkpoint alone.
* `pam-ens`: an ensemble of the `pam` row's checkpoints of every `--seed` (at least two): each
  one's test scores standardized within each task (`pruner_models.blend.standardize`), then
  averaged. One row for the whole run, without a spread over seeds; it needs a split whose test
  records are the same for every seed (hold-out: the held-out networks), else it is n/a.
* `random`: uniform random scores, mean over `--random-seeds` seeds.

The splits come from the `ShardDataModule` that train.py builds from the same config and flags, and
every network's fit is checked to have used exactly those train / val / test records. A missing
optional dependency (xgboost or TVM for `xgb`, TVM for `psa`) gives an n/a row, not a crash.
`--seed 0 1 2` repeats everything per seed (split, initialization, batch order, XGBoost seed) and
prints mean ± std. `--out DIR` gets results.json (means, stds, every seed's rows) and results.csv.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import logging
import re
import sys
import time
from collections.abc import Callable
from itertools import chain
from pathlib import Path

import numpy as np
import torch
from jsonargparse import Namespace
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cli import doc_parser, split_passthrough
from data.atomic import atomic_write_text
from data.datamodule import ShardDataModule
from data.shards import ShardData, read_shards
from pruner_models.metrics import ranking_metrics
from train import main as train_main

REPO = Path(__file__).resolve().parents[1]
MODELS = ("random", "psa", "xgb", "mlp", "pam", "pam+psa", "pam+xgb", "pam+xgb+psa", "pam-ens")
NETWORKS = ("mlp", "pam")
METRICS = ("pairwise_acc", "peak@1", "peak@5", "top5_recall", "kendall_tau")
COLUMNS = ("pairwise", "peak@1", "peak@5", "top5 recall", "kendall")
XGB_FAILED_COST = 1e10
"""The cost XGBModel.update gives a failed measurement (its `_mean_cost` of empty run_secs)."""


class Unavailable(Exception):
    """A row that cannot be computed here (missing package, wrong kind of data): reported as n/a."""


def missing_modules(*names: str) -> list[str]:
    """The top-level modules of `names` that are not installed (checked without importing them)."""
    missing = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a broken install counts as missing
            found = False
        if not found:
            missing.append(name)
    return missing


def reference_datamodule(config: Path, data_args: list[str], extra: list[str]) -> ShardDataModule:
    """The DataModule that `train.py --config config data_args extra` builds, set up (splits made).

    train.py with `run=False` only parses and instantiates, so the data options (config file, CLI
    flags after `--`) are resolved exactly as in the real fits.
    """
    cli = train_main(["--config", str(config), *data_args, *extra, "--trainer.logger", "false"], run=False)
    dm = cli.datamodule
    dm.setup("test")
    return dm


def test_metrics(scores: np.ndarray | torch.Tensor, dm: ShardDataModule) -> dict[str, float]:
    """Ranking metrics of `scores` (one per test record, in `dm.splits['test']` order), float64.

    Args:
        scores: (n_test,) higher = predicted faster.
        dm: the set-up reference DataModule (labels and task ids of its test records).
    """
    test = torch.from_numpy(dm.splits["test"])
    metrics = ranking_metrics("test_").set_dtype(torch.float64)
    metrics.update(torch.as_tensor(scores, dtype=torch.float64), dm.store.label[test], dm.store.record_task[test])
    return {key: float(value) for key, value in metrics.compute().items()}


def evaluate_random(dm: ShardDataModule, seed: int, seeds: int) -> dict[str, float]:
    """Mean test metrics of `seeds` uniformly random rankings (seeds seed, seed + 1, ...)."""
    n = len(dm.splits["test"])
    runs = [test_metrics(np.random.default_rng(seed + i).random(n), dm) for i in range(seeds)]
    return {key: float(np.mean([run[key] for run in runs])) for key in runs[0]}


def psa_test_scores(dm: ShardDataModule, data: ShardData, device_name: str | None) -> np.ndarray:
    """PSA scores (n_test,) of the test records from their stored PSA rows.

    Raises:
        Unavailable: CPU (llvm) records, no `--psa-device`, or TVM missing (bridge.psa imports it).
    """
    test = dm.splits["test"]
    kinds = {json.loads(t).get("kind", "?") for t in data.task_target[np.unique(data.record_task[test])]}
    if kinds <= {"llvm", "c"}:
        raise Unavailable(f"n/a on {'/'.join(sorted(kinds))} records: PSA models GPU kernels")
    if device_name is None:
        raise Unavailable("n/a: pass --psa-device (a row of configs/devices.yaml, e.g. h100)")
    if missing_modules("tvm"):
        raise Unavailable("n/a: tvm not installed (bridge.psa needs it)")
    from bridge.psa import get_device, psa_scores

    return psa_scores(data.psa_programs(test), get_device(device_name))


def blend_test_scores(dm: ShardDataModule, data: ShardData, args: Namespace, scores: np.ndarray) -> np.ndarray:
    """A row's test scores (`pam_test_scores`, `pair_test_scores`) blended with PSA's within each task.

    Raises:
        Unavailable: no PSA scores (`psa_test_scores`).
    """
    psa = psa_test_scores(dm, data, args.psa_device)
    from pruner_models.blend import blend_with_psa

    return blend_with_psa(scores, psa, _test_tasks(dm), args.psa_weight)


def pam_test_scores(dm: ShardDataModule, ckpt: str | None) -> np.ndarray:
    """The test scores of checkpoint `ckpt`, the pam row's best.

    Raises:
        Unavailable: no pam row before this one in the run.
    """
    if ckpt is None:
        raise Unavailable("n/a: needs the pam row before it in --models")
    return checkpoint_test_scores(dm, ckpt)


def pair_test_scores(dm: ShardDataModule, ckpt: str | None, xgb: np.ndarray | None) -> np.ndarray:
    """z(pam) + z(xgb) within each task: checkpoint `ckpt`'s test scores and the xgb row's.

    Raises:
        Unavailable: no pam or no xgb row before this one in the run.
    """
    if ckpt is None or xgb is None:
        raise Unavailable("n/a: needs the pam and xgb rows before it in --models")
    from pruner_models.blend import standardize

    task = _test_tasks(dm)
    return standardize(checkpoint_test_scores(dm, ckpt), task) + standardize(xgb, task)


def checkpoint_test_scores(dm: ShardDataModule, ckpt: str) -> np.ndarray:
    """The test scores (n_test,) of a train.py checkpoint's network."""
    from bridge.evaluate import score_records
    from bridge.export import load_model

    return score_records(load_model(ckpt, map_location="cpu").net, dm.store, indices=dm.splits["test"])


def _test_tasks(dm: ShardDataModule) -> np.ndarray:
    """The task id of each test record."""
    return dm.store.record_task[torch.from_numpy(dm.splits["test"])].numpy()


def ensemble_row(dm: ShardDataModule, tests: dict[int, np.ndarray], checkpoints: dict[int, str]) -> dict:
    """The `pam-ens` row: the seeds' `pam` checkpoints ensembled on `dm`'s test records.

    Args:
        dm: a set-up reference DataModule of the run (its store and test split are used).
        tests: each seed's test record indices; they must all be `dm`'s.
        checkpoints: each seed's pam checkpoint (seeds whose pam row was n/a are absent).

    Raises:
        Unavailable: fewer than two checkpoints, or seeds with different test records.
    """
    if len(checkpoints) < 2:
        raise Unavailable("n/a: needs the pam row's checkpoints of at least two --seed")
    test = dm.splits["test"]
    if any(not np.array_equal(t, test) for t in tests.values()):
        raise Unavailable("n/a: the seeds' test records differ (use a hold-out split)")
    from pruner_models.blend import standardize

    task = _test_tasks(dm)
    members = [standardize(checkpoint_test_scores(dm, ckpt), task) for ckpt in checkpoints.values()]
    row = test_metrics(np.mean(members, axis=0), dm)
    note = f"mean of the pam checkpoints of seeds {', '.join(map(str, checkpoints))}, standardized per task"
    return {**row, "train_s": 0.0, "note": note}


def _programs(dm: ShardDataModule) -> list[np.ndarray]:
    """Every record's PerStoreFeature rows (k_i, 164) float32, as views into the DataModule's store."""
    stmt, ptr = dm.store.stmt.numpy(), dm.store.stmt_ptr.numpy()
    return np.split(stmt, ptr[1:-1])


def xgb_test_scores(dm: ShardDataModule, data: ShardData, seed: int, threads: int) -> tuple[np.ndarray, str, float]:
    """Fit MetaSchedule's XGBModel on the training records, score the test records.

    Exactly what a tuning run's `XGBModel.update` would train on had it measured the training
    records: one `FeatureGroup` per task (cost = the record's latency, failed = 1e10; programs
    without feature rows dropped, as update does), labels min_cost / cost per group, then `_train`.
    One difference: update takes the MEDIAN of run_secs as cost, the shards store the mean
    (data.labels, the label every model here uses).

    Returns:
        (n_test,) scores (0 for a program without feature rows: the pack-sum of nothing), a note, and
        the seconds `_train` took.

    Raises:
        Unavailable: xgboost or TVM not installed.
    """
    missing = missing_modules("xgboost", "tvm")
    if missing:
        raise Unavailable(f"n/a: {' and '.join(missing)} not installed (pip install {' '.join(missing)})")
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import (
        FeatureGroup,
        XGBConfig,
        XGBModel,
    )

    import tvm_env  # noqa: F401  (the project's one TVM import point)

    programs = _programs(dm)
    sizes = np.diff(dm.store.stmt_ptr.numpy())
    train = dm.splits["train"]
    train = train[sizes[train] > 0]
    train = train[np.argsort(data.record_task[train], kind="stable")]
    cost = np.where(np.isfinite(data.latency), data.latency, XGB_FAILED_COST).astype("float32")
    cuts = np.flatnonzero(np.diff(data.record_task[train])) + 1
    groups = [
        FeatureGroup(str(data.task_key[data.record_task[idx[0]]]), [programs[i] for i in idx], cost[idx])
        for idx in np.split(train, cuts)
    ]
    # XGBModel.update, step 5 ("Re-train the model"), verbatim but for the loop over groups.
    with np.errstate(divide="ignore", invalid="ignore"):
        xs = list(chain.from_iterable(g.features for g in groups))
        ys = np.concatenate(
            [np.divide(g.min_cost, g.costs, out=np.zeros_like(g.costs), where=g.costs != 0) for g in groups]
        )
    model = XGBModel(config=XGBConfig(seed=seed), num_warmup_samples=0, num_tuning_cores=threads)
    rows = int(sizes[train].sum())
    print(f"xgb: XGBModel._train on {len(xs)} programs ({rows} rows) of {len(groups)} tasks, {threads} threads")
    xgb_log = logging.getLogger("tvm.s_tir.meta_schedule.cost_model.xgb_model")
    handler = logging.StreamHandler(sys.stdout)  # its own per-25-rounds progress lines (debug level)
    xgb_log.addHandler(handler)
    level = xgb_log.level
    xgb_log.setLevel(logging.DEBUG)
    start = time.perf_counter()
    try:
        model._train(xs=xs, ys=ys)
    finally:
        xgb_log.removeHandler(handler)
        xgb_log.setLevel(level)
    seconds = time.perf_counter() - start

    test = dm.splits["test"]
    has_rows = sizes[test] > 0
    scores = np.zeros(len(test))
    scores[has_rows] = model._predict(xs=[programs[i] for i in test[has_rows]])
    note = f"{model.booster.num_boosted_rounds()} rounds"
    if not has_rows.all():
        note += f"; {int((~has_rows).sum())} test programs without rows scored 0"
    return scores, note, seconds


def fit_network(
    model: str, data_args: list[str], root: Path, epochs: int | None, extra: list[str], dm: ShardDataModule
) -> tuple[str, str]:
    """Fit configs/<model>.yaml (at most `epochs` epochs; None: as configured); returns its best
    checkpoint's path and a note (best epoch, score).

    Raises:
        RuntimeError: the fit's DataModule made other splits than the reference one (a config
            with other data options: pass them after `--` so every row uses them).
    """
    common = ["--config", str(REPO / "configs" / f"{model}.yaml"), *data_args, "--trainer.default_root_dir", str(root)]
    limit = [] if epochs is None else ["--trainer.max_epochs", str(epochs)]
    fit = train_main(["fit", *common, *limit, "--trainer.logger.init_args.save_dir", str(root), *extra])
    for name, records in dm.splits.items():
        if not np.array_equal(fit.datamodule.splits[name], records):
            raise RuntimeError(
                f"configs/{model}.yaml made another {name} split than the other rows ({len(fit.datamodule.splits[name])} "
                f"vs {len(records)} records): pass the data options after `--`"
            )
    best = next(c for c in fit.trainer.checkpoint_callbacks if c.monitor)
    epoch = re.search(r"epoch=(\d+)", Path(best.best_model_path).name)
    note = f"best epoch {epoch.group(1) if epoch else '?'} of {fit.trainer.current_epoch}, "
    note += f"{best.monitor} {float(best.best_model_score):.3f}"
    return best.best_model_path, note


def test_checkpoint(model: str, data_args: list[str], ckpt: str, extra: list[str]) -> dict[str, float]:
    """`train.py test` of checkpoint `ckpt` with configs/<model>.yaml on `data_args`' test split."""
    config = ["--config", str(REPO / "configs" / f"{model}.yaml"), *data_args]
    test = train_main(["test", *config, "--ckpt_path", ckpt, "--trainer.logger", "false", *extra])
    return {k: float(v) for k, v in test.trainer.callback_metrics.items() if k.startswith("test_")}


def run_network(
    model: str, data_args: list[str], root: Path, epochs: int | None, extra: list[str], dm: ShardDataModule
) -> tuple[dict, str]:
    """Fit configs/<model>.yaml (`fit_network`), test its best checkpoint; the test metrics, a note
    and the checkpoint."""
    ckpt, note = fit_network(model, data_args, root, epochs, extra, dm)
    return test_checkpoint(model, [*data_args, "--trainer.default_root_dir", str(root)], ckpt, extra), note, ckpt


def timed(fn: Callable, *args) -> tuple[object, float]:
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def run_seed(args: Namespace, seed: int, extra: list[str]) -> tuple[dict[str, dict], dict[str, dict], dict]:
    """Every row of the table for one seed (split, training and XGBoost seed) but `pam-ens`.

    Returns:
        ({model: {"test_<metric>": value, ..., "train_s", "note"}}, {split name: {"records", "tasks"}},
        {"dm": the reference DataModule, "checkpoints": {model: best checkpoint}}).
    """
    data_args = [
        "--data.shards",
        args.shards,
        "--data.split",
        args.split,
        "--data.test_networks",
        json.dumps(args.test_networks or None),
        "--data.seed",
        str(seed),
        "--seed_everything",
        str(seed),
    ]
    networks = [m for m in args.models if m in NETWORKS]
    dm = reference_datamodule(REPO / "configs" / f"{(networks or ['pam'])[0]}.yaml", data_args, extra)
    data = read_shards(dm.hparams.shards, networks=dm.hparams.networks)
    if not np.array_equal(data.task_key, dm.tasks["task_key"]) or data.num_records != len(dm.store):
        raise RuntimeError(f"{args.shards}: the shards changed while reading them twice")
    sizes = {
        name: {"records": len(idx), "tasks": len(np.unique(dm.record_task[idx]))} for name, idx in dm.splits.items()
    }

    results: dict[str, dict] = {}
    checkpoints: dict[str, str] = {}
    xgb_scores: np.ndarray | None = None  # the xgb row's test scores, for pam+xgb
    for model in (m for m in args.models if m != "pam-ens"):
        print(f"--- {model}, seed {seed}")
        row: dict = {"train_s": 0.0, "note": ""}
        try:
            if model == "random":
                row.update(evaluate_random(dm, seed, args.random_seeds))
                row["note"] = f"mean of {args.random_seeds} rankings"
            elif model == "psa":
                row.update(test_metrics(psa_test_scores(dm, data, args.psa_device), dm))
                row["note"] = f"device {args.psa_device}"
            elif model == "xgb":
                xgb_scores, row["note"], row["train_s"] = xgb_test_scores(dm, data, seed, args.xgb_threads)
                row.update(test_metrics(xgb_scores, dm))
            elif model == "pam+xgb":
                row.update(test_metrics(pair_test_scores(dm, checkpoints.get("pam"), xgb_scores), dm))
                row["note"] = "pam's checkpoint + xgb's model, standardized per task"
            elif model == "pam+xgb+psa":
                paired = pair_test_scores(dm, checkpoints.get("pam"), xgb_scores)
                row.update(test_metrics(blend_test_scores(dm, data, args, paired), dm))
                row["note"] = (
                    f"pam's checkpoint + xgb's model + {args.psa_weight:g} x PSA ({args.psa_device}), per task"
                )
            elif model == "pam+psa":
                pam = pam_test_scores(dm, checkpoints.get("pam"))
                row.update(test_metrics(blend_test_scores(dm, data, args, pam), dm))
                row["note"] = f"pam's checkpoint + {args.psa_weight:g} x PSA ({args.psa_device}), standardized per task"
            else:
                fit = (model, data_args, Path(args.out), args.epochs, extra, dm)
                (metrics, row["note"], checkpoints[model]), row["train_s"] = timed(run_network, *fit)
                row.update(metrics)
        except Unavailable as reason:
            row.update(train_s=float("nan"), note=str(reason))
        results[model] = row
    return results, sizes, {"dm": dm, "checkpoints": checkpoints}


def summarize(per_seed: dict[int, dict[str, dict]]) -> dict[str, dict]:
    """Mean over seeds of every number of every row, plus "<key>_std" with more than one seed."""
    summary = {}
    for model in next(iter(per_seed.values())):
        rows = [results[model] for results in per_seed.values()]
        row = {}
        for key in (k for k in rows[0] if k != "note"):
            values = [r.get(key, float("nan")) for r in rows]
            row[key] = float(np.mean(values))
            if len(rows) > 1:
                row[f"{key}_std"] = float(np.std(values))
        row["note"] = " | ".join(dict.fromkeys(r["note"] for r in rows))
        summary[model] = row
    return summary


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark (`argv` None reads sys.argv); returns what results.json holds."""
    parser = doc_parser(__doc__)
    parser.add_argument("--shards", required=True, help="shard folder or file")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS, help="rows, in this order")
    parser.add_argument("--split", default="within-task", choices=["within-task", "hold-out"])
    parser.add_argument("--test-networks", nargs="*", default=[], help="hold-out split: held-out networks")
    parser.add_argument(
        "--epochs",
        type=int | None,
        default=None,
        help="max epochs of pam / mlp (default: each config's; early stopping as configured)",
    )
    parser.add_argument(
        "--seed", type=int, nargs="+", default=[0], help="split, training and XGBoost seed(s); several: mean +- std"
    )
    parser.add_argument("--psa-device", default=None, help="PSA device row (configs/devices.yaml), e.g. h100")
    parser.add_argument("--psa-weight", type=float, default=1.0, help="PSA's weight in the pam+psa row")
    parser.add_argument("--xgb-threads", type=int, default=torch.get_num_threads(), help="XGBModel num_tuning_cores")
    parser.add_argument("--random-seeds", type=int, default=10, help="random rankings averaged in the random row")
    parser.add_argument("--out", default="runs/quality", help="folder for results.json, results.csv and the fits' logs")
    ours, extra = split_passthrough(argv)  # train.py flags after `--`, for every fit and test
    args = parser.parse_args(ours)
    if args.split == "hold-out" and not args.test_networks:
        parser.error("--split hold-out needs --test-networks")
    per_seed, sizes, tests, pam_checkpoints, dm = {}, {}, {}, {}, None
    for seed in args.seed:
        per_seed[seed], sizes[seed], fitted = run_seed(args, seed, extra)
        dm, tests[seed] = fitted["dm"], fitted["dm"].splits["test"]
        if "pam" in fitted["checkpoints"]:
            pam_checkpoints[seed] = fitted["checkpoints"]["pam"]
    results = summarize(per_seed)
    if "pam-ens" in args.models:
        try:
            ensemble = ensemble_row(dm, tests, pam_checkpoints)
        except Unavailable as reason:
            ensemble = {"train_s": float("nan"), "note": str(reason)}
        results = {m: ensemble if m == "pam-ens" else results[m] for m in args.models}

    split = args.split + (f" (held out: {', '.join(args.test_networks)})" if args.test_networks else "")
    first = sizes[args.seed[0]]
    counts = ", ".join(f"{name} {n['records']} rec / {n['tasks']} tasks" for name, n in first.items())
    seeds = (
        f"seed {args.seed[0]}" if len(args.seed) == 1 else f"mean +- std over seeds {', '.join(map(str, args.seed))}"
    )
    table = Table(title=f"Test ranking metrics, {split}, {args.shards}, {seeds}\n{counts} (seed {args.seed[0]})")
    for column in ("model", *COLUMNS, "train s", "note"):
        table.add_column(column, justify="left" if column in ("model", "note") else "right")

    def cell(row: dict, key: str, digits: int) -> str:
        value = row.get(key, float("nan"))
        if np.isnan(value):
            return "n/a"
        return f"{value:.{digits}f}" + (f" ± {row[key + '_std']:.{digits}f}" if key + "_std" in row else "")

    for model, row in results.items():
        table.add_row(model, *(cell(row, "test_" + name, 3) for name in METRICS), cell(row, "train_s", 1), row["note"])
    Console(width=220).print(table)

    out = {
        "split": split,
        "shards": args.shards,
        "seeds": args.seed,
        "splits": sizes,
        "results": results,
        "per_seed": per_seed,
    }
    root = Path(args.out)
    root.mkdir(parents=True, exist_ok=True)
    lines = io.StringIO()
    writer = csv.writer(lines)
    keys = [f"test_{name}" for name in (*METRICS, "rmse")] + ["train_s"]
    writer.writerow(["model", "seed", *keys, "note", "split", "shards"])
    for seed, rows in [*per_seed.items(), *([("mean", results)] if len(per_seed) > 1 else [])]:
        for model, row in rows.items():
            writer.writerow([model, seed, *(row.get(k, float("nan")) for k in keys), row["note"], split, args.shards])
    for name, text in (("results.json", json.dumps(out, indent=1)), ("results.csv", lines.getvalue())):
        atomic_write_text(root / name, text)
    return out


if __name__ == "__main__":
    # Our flags are not train.py's: hide them from LightningCLI's sys.argv check (it warns otherwise).
    argv, sys.argv[1:] = sys.argv[1:], []
    main(argv)
