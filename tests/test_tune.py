"""tune.py on llvm: every cost-model mode runs a short real tune; resume; a network end to end; CLI errors."""

import json
import math

import pytest

import tune
from bridge.config import CostModelConfig, MeasureConfig, SearchConfig, TuneConfig
from bridge.tuning import CURVE_CSV, CURVE_PNG, tune_tasks
from data import zoo
from tvm_env import ms, tvm_ffi, usable_cores

TARGET = '{"kind": "llvm", "mcpu": "native", "num-cores": 2}'
WORKLOAD = "matmul:64,64,64"
QUICK = ["--number", "2", "--min-repeat-ms", "5", "--population", "32"]


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """PAM and MLP artifacts: train.py fit (one epoch on synthetic shards), then `python -m bridge.export`."""
    import train
    from bridge import export
    from data.synthetic import write_synthetic_shards

    root = tmp_path_factory.mktemp("models")
    write_synthetic_shards(root / "shards", num_shards=1, num_tasks=4, records_per_task=32)
    out = {}
    for name in ("PAMModule", "MLPModule"):
        # fmt: off
        train.main([
            "fit", "--model", f"pruner_models.module.{name}", "--data.shards", str(root / "shards"), "--data.batch_size", "64",
            "--trainer.max_epochs", "1", "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
            "--trainer.enable_model_summary", "false", "--checkpoint.dirpath", str(root / name), "--seed_everything", "0",
            "--trainer.default_root_dir", str(root / name),
        ])
        # fmt: on
        out[name] = str(root / f"{name}.pt")
        assert (
            export.main([str(next((root / name).glob("best-*.ckpt"))), "--out", out[name], "--device", "synthetic"])
            == 0
        )
    return out


MODES = {
    # mode: (artifact, draft-then-verify with PSA)
    "pam": (None, True),
    "pam-siamese-update": ("PAMModule", True),
    "pam-no-update": ("PAMModule", True),
    "mlp": (None, False),
    "mlp-no-update": ("MLPModule", False),
    "xgb": (None, False),
    "random": (None, False),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_each_cost_model_mode_runs_a_short_tune(mode, artifacts, builder, runner, tmp_path):
    artifact, draft_verify = MODES[mode]
    result = tune_tasks(
        [zoo.operator_task(WORKLOAD)],
        json.loads(TARGET),
        TuneConfig(out=str(tmp_path), trials=6, trials_per_round=3),
        cost_model=CostModelConfig(name=mode, checkpoint=artifacts[artifact] if artifact else None, epochs=3),
        search=SearchConfig(psa="a100", population=32, potential=8) if draft_verify else SearchConfig(population=32),
        measure=MeasureConfig(number=2, min_repeat_ms=5),
        builder=builder,
        runner=runner,
        progress=False,
    )
    (task,) = result.tasks
    assert task.trials == 6 and math.isfinite(task.best_s) and task.gflops > 0
    assert result.estimated_s == task.best_s
    assert [r["total_trials"] for r in result.rows] == [3, 6]
    assert all(r["verify_scored"] > 0 for r in result.rows)
    assert all((r["draft_scored"] > 0) == (draft_verify and bool(r["drafted"])) for r in result.rows)
    # the verify gate is on for a pretrained verifier under draft-then-verify (too few pairs to switch
    # yet), but for MoA, which adapts every round by default
    gated = draft_verify and artifact is not None and mode != "pam-siamese-update"
    assert all((r["gated"] == 0) if gated else math.isnan(r["gated"]) for r in result.rows), result.rows
    assert (tmp_path / CURVE_CSV).exists() and (tmp_path / CURVE_PNG).stat().st_size > 1000
    assert (tmp_path / "database_tuning_record.json").exists()
    assert (tmp_path / f"cost_model.{mode}.bin").exists() == (mode != "random")


MOA = ["--cost-model", "pam-siamese-update"]  # adapts every round by default: ungated unless it adapts less
GATE_CASES = (  # extra flags over a pretrained PAM with PSA: the verify gate, the PSA blend weight
    ([], True, 0.0),
    (["--verify-gate", "false", "--psa-weight", "1"], False, 1.0),
    (MOA, False, 0.0),
    ([*MOA, "--adapt-every", "4"], True, 0.0),
    ([*MOA, "--adapt-every", "4", "--psa-weight", "1"], True, 1.0),
)


def _gate_args(artifacts, extra, out_dir):
    args = ["--workload", WORKLOAD, "--target", TARGET, "--cost-model", "pam-no-update", "--psa", "a100"]
    args += ["--checkpoint", str(artifacts["PAMModule"]), "--trials", "3", "--trials-per-round", "3", *QUICK]
    return [*args, *extra, "--work-dir", str(out_dir), "--potential", "8"]


@pytest.mark.parametrize("extra, on, weight", GATE_CASES)
def test_cli_flags_resolve_the_verify_gate_and_the_psa_blend(artifacts, tmp_path, extra, on, weight):
    """What tune.main decides from the flags (it calls `resolve_verify_gate` with the parsed configs),
    for every case; two real runs below say and record it."""
    from bridge.factory import resolve_verify_gate

    _, configs = tune._parse(_gate_args(artifacts, extra, tmp_path))
    search = resolve_verify_gate(configs["search"], configs["cost_model"].name, configs["cost_model"].adapt_every)
    assert search.verify_gate is on and search.psa_weight == weight


def test_first_drafts_share_the_hosts_cores_unless_set():
    """`resolve_first_draft_threads`: an unset `first_draft_threads` is the cores over the first drafts
    at once (at most the tasks), at least one; one task, or drafts in turn, keep every core; a set one
    and MetaSchedule's evolution are left as they are."""
    from bridge.config import SearchConfig
    from bridge.factory import first_drafts_at_once, resolve_first_draft_threads

    def threads(cores, tasks, **options):
        return resolve_first_draft_threads(SearchConfig(psa="a100", **options), cores, tasks).first_draft_threads

    assert SearchConfig().first_drafts_ahead == 4
    assert threads(16, 19) == 4 and threads(16, 19, first_drafts_ahead=2) == 8 and threads(16, 3) == 5
    assert threads(16, 1) == 16 and threads(16, 19, first_drafts_ahead=0) == 16 and threads(2, 19) == 1
    assert threads(16, 19, first_draft_threads=16) == 16
    assert resolve_first_draft_threads(SearchConfig(), 16, 19).first_draft_threads is None
    # without a pipeline the first drafts run in turn, each in its task's first round: every core
    assert threads(16, 19, pipeline=False) == 16 and threads(16, 0) == 16
    assert [first_drafts_at_once(SearchConfig(psa="a100", **o), n) for o, n in AT_ONCE] == [4, 3, 1, 1, 1]
    assert first_drafts_at_once(SearchConfig(), 19) == 0  # MetaSchedule's evolution: no drafts


AT_ONCE = [({}, 19), ({}, 3), ({}, 1), ({"pipeline": False}, 19), ({"first_drafts_ahead": 0}, 19)]


@pytest.mark.parametrize("case", [2, 4], ids=["moa-ungated-no-blend", "moa-every-4-gated-blend-1"])
def test_cli_says_and_records_the_verify_gate_and_the_psa_blend(artifacts, tmp_path, capsys, case):
    """Real runs, one with the gate on and the blend (MoA adapting every 4th round: `--adapt-every`
    reaches the decision) and one with neither (MoA by default): both printed branches, summary.json."""
    extra, on, weight = GATE_CASES[case]
    tune.main(_gate_args(artifacts, extra, tmp_path))
    printed = capsys.readouterr().out
    assert ("verify gate on" in printed) is on and ("PSA blend 1" in printed) is (weight > 0)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["verify_gate"] is on and summary["psa_weight"] == weight
    # one task: its first draft keeps the target's two cores, the only one at once
    assert summary["first_drafts_ahead"] == 4 and summary["first_draft_threads"] == 2
    assert summary["first_drafts_at_once"] == 1


def test_cli_resumes_from_the_work_dir(tmp_path, capsys):
    args = [
        "--workload",
        WORKLOAD,
        "--target",
        TARGET,
        "--cost-model",
        "xgb",
        "--trials-per-round",
        "3",
        "--work-dir",
        str(tmp_path),
        *QUICK,
    ]
    first = tune.main([*args, "--trials", "3"])
    assert first.tasks[0].trials == 3
    out = capsys.readouterr().out
    assert "estimated total latency" in out and "search time" in out and "matmul_64_64_64" in out
    idle = json.loads((tmp_path / "summary.json").read_text())["device_idle"]  # printed and in summary.json
    assert set(idle) == {"idle", "before_first", "drafts", "other"} and idle["drafts"] == 0.0  # evolution
    assert 0 < idle["idle"] < 1 and idle["idle"] == pytest.approx(idle["before_first"] + idle["other"])
    assert f"device idle: {100 * idle['idle']:.0f}% of the run" in out
    builds = json.loads((tmp_path / "summary.json").read_text())["builds"]  # the build workers' use
    assert 0 < builds["busy"] <= 1 and builds["deferred"] == 0  # evolution builds every batch in the loop
    assert builds["refused"] == 0 and "picks refused" not in out  # the source guard bounds CUDA kernels only
    assert f"builds: workers busy {100 * builds['busy']:.0f}% of a batch's build time" in out
    busy = json.loads((tmp_path / "summary.json").read_text())["host_cpu_busy"]  # the host's cores, all processes
    row = first.rows[0]
    assert 0 < row["run_start_s"] and row["run_start_s"] + row["run_s"] <= row["elapsed_s"]  # the run placed
    assert row["host_cpu_s"] > 0 and row["host_cores"] == usable_cores() and 0 < busy <= 1.05
    assert busy == pytest.approx(row["host_cpu_s"] / (row["elapsed_s"] * row["host_cores"]))
    assert f"host CPU: {100 * busy:.0f}% of the cores busy" in out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["timer"] == "evaluator" and summary["launch_floor_note"] is None  # an llvm run: no note
    assert "near the host's launch rate" not in out
    second = tune.main([*args, "--trials", "6"])
    assert second.tasks[0].trials == 6
    assert [r["total_trials"] for r in second.rows] == [3, 6]  # the curve continues
    assert [r["round"] for r in second.rows] == [1, 2]
    assert all(r["host_cpu_s"] > 0 for r in second.rows)  # the earlier run's row read back, this run's new
    assert second.rows[-1]["elapsed_s"] > first.rows[-1]["elapsed_s"]
    last = second.rows[-1]  # on the resumed run's clock
    assert first.rows[-1]["elapsed_s"] < last["run_start_s"] <= last["elapsed_s"] - last["run_s"]
    assert second.tasks[0].best_s <= first.tasks[0].best_s
    database = ms.database.JSONDatabase(work_dir=str(tmp_path))
    schedules = [tvm_ffi.structural_hash(r.as_measure_candidate().sch.mod) for r in database.get_all_tuning_records()]
    assert len(schedules) == 6 and len(set(schedules)) == 6  # nothing measured twice
    third = tune.main([*args, "--trials", "6"])  # budget spent: nothing new
    assert third.tasks[0].trials == 6 and len(third.rows) == 2


def test_a_run_with_so_artifacts_measures_every_trial(tmp_path, monkeypatch):
    """`--artifact so`: the run's build workers link each candidate (every artifact a `.so`), the local
    runner only opens it, and the run measures every trial; a passed runner is refused with it."""
    from tvm_env import PooledLocalBuilder

    paths = []
    finish = PooledLocalBuilder._cls.finish  # the class `derived_object` wraps

    def recorded(self, *args, **kwargs):
        results = finish(self, *args, **kwargs)
        paths.extend(str(r.artifact_path) for r in results if r.error_msg is None)
        return results

    monkeypatch.setattr(PooledLocalBuilder._cls, "finish", recorded)
    result = tune.main(
        ["--workload", WORKLOAD, "--target", TARGET, "--cost-model", "xgb", "--trials-per-round", "3",
         "--trials", "3", "--artifact", "so", "--work-dir", str(tmp_path), *QUICK]
    )  # fmt: skip
    assert result.tasks[0].trials == 3 and math.isfinite(result.tasks[0].best_s)
    assert result.rows[0]["valid"] == 3
    assert len(paths) == 3 and all(p.endswith("tvm_tmp_mod.so") for p in paths)
    with pytest.raises(ValueError, match="a builder of .so artifacts"):
        tune_tasks(
            [zoo.operator_task("matmul:16,16,16")],
            json.loads(TARGET),
            TuneConfig(out=str(tmp_path / "passed"), trials=3, trials_per_round=3),
            builder=PooledLocalBuilder(max_workers=1, artifact="so"),
            runner=object(),
        )


def test_a_run_that_reuses_kernels_counts_the_reused_and_gives_each_kernel_one_measurement(tmp_path):
    """`--reuse-kernels true`: the run's runner is a `ReusingRunner`, so each row counts the trials that
    took an earlier measurement (NaN without it), and every kernel of the database (its records
    rebuilt and keyed by their generated code) has one measurement, however many records it has."""
    import collections

    from tvm_env import kernel_key, parse_target, tvm

    result = tune.main(
        ["--workload", "dense:1,2,2", "--target", TARGET, "--cost-model", "random", "--trials-per-round", "8",
         "--trials", "32", "--reuse-kernels", "true", "--work-dir", str(tmp_path), *QUICK]
    )  # fmt: skip
    # this tiny dense's random schedules repeat a kernel: 13-19 of 32 trials in 6 runs by hand (dense:1,8,8's
    # 0-6 failed the suite once; dense:1,4,4's 4-12)
    assert sum(r["valid"] for r in result.rows) == 32 and sum(r["reused"] for r in result.rows) >= 1
    target = parse_target(json.loads(TARGET))
    kernels = collections.defaultdict(set)
    for record in ms.database.JSONDatabase(work_dir=str(tmp_path)).get_all_tuning_records():
        sch = tvm.s_tir.Schedule(record.workload.mod)
        record.trace.apply_to_schedule(sch, remove_postproc=False)
        kernels[kernel_key(tvm.tirx.build(sch.mod, target))].add(tuple(float(s) for s in record.run_secs))
    assert sum(len(k) for k in kernels.values()) == len(kernels)  # one measurement a kernel
    assert len(kernels) == 32 - sum(r["reused"] for r in result.rows)  # each reused trial, a kernel's twin
    off = tune.main(
        ["--workload", WORKLOAD, "--target", TARGET, "--cost-model", "random", "--trials-per-round", "3",
         "--trials", "3", "--work-dir", str(tmp_path / "off"), *QUICK]
    )  # fmt: skip
    assert math.isnan(off.rows[0]["reused"])


def test_network_is_tuned_compiled_and_timed(tmp_path, capsys):
    result = tune.main(
        [
            "--network",
            "bert_tiny",
            "--input-size",
            "8",
            "--max-tasks",
            "1",
            "--target",
            TARGET,
            "--cost-model",
            "random",
            "--trials",
            "3",
            "--trials-per-round",
            "3",
            "--reread-top",
            "1",
            "--work-dir",
            str(tmp_path),
            *QUICK,
        ]
    )
    assert len(result.tasks) == 1 and result.tasks[0].trials == 3
    assert (
        list(result.reread) == [result.tasks[0].name] and (tmp_path / "reread").is_dir()
    )  # re-read before the compile
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "end-to-end mean inference time" in x)
    assert float(line.split(":")[1].split("ms")[0]) > 0
    assert int(line.split("tuned schedules for ")[1].split()[0]) >= 1  # the tuned task's kernel, after the re-read


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--cost-model", "pam", "--checkpoint", "model.pt"], "trains from scratch"),
        (["--cost-model", "pam-no-update", "--checkpoint", "nowhere.pt"], "nowhere.pt' does not exist"),
        (["--cost-model", "xgb", "--runner", "rpc"], "--runner rpc needs --tracker"),
        (["--cost-model", "xgb", "--psa", "v100"], "'v100' is not in the device table"),
        (["--psa", "h100", "--psa-formula", "traffic-stage"], "--psa-formula 'traffic-stage' must be one of"),
        (["--model-device", "gpu"], "--model-device 'gpu': give cpu, cuda or cuda:N"),
        (["--reread-top", "-1"], "--reread-top -1 must be >= 0"),
    ],
)
def test_cli_errors_are_clear(tmp_path, extra, message):
    with pytest.raises(ValueError, match=message):
        tune.main(["--workload", WORKLOAD, "--target", TARGET, "--trials", "3", "--work-dir", str(tmp_path), *extra])


def test_the_compile_size_guard_is_on_by_default_and_null_turns_it_off():
    """A CUDA kernel over 512 KB of source fails at once (bridge.config.DEFAULT_MAX_SOURCE_KB): the
    CLI, the config and the API's builder agree, and `null` lifts the limit."""
    import pruner_lightning as pl

    parser = tune.build_parser()

    def parsed(*extra):
        return parser.parse_args(["--target", TARGET, "--workload", WORKLOAD, "--out", "x", *extra]).max_source_kb

    assert parsed() == MeasureConfig().max_source_kb == 512
    assert parsed("--max-source-kb", "null") is None and parsed("--max-source-kb", "256") == 256
    assert pl.builder(max_workers=1).max_source_kb == 512 and pl.builder(max_source_kb=None).max_source_kb is None


def test_the_drafting_share_is_on_by_default_and_null_turns_it_off():
    """Stall re-drafts wait while they would take drafting over 15% of the run: the CLI, the config
    and the API agree on the default, and `--redraft-share null` lifts the limit (the strategy's
    default and `null` through `from_config`: tests/bridge/test_search.py)."""
    import pruner_lightning as pl

    parser = tune.build_parser()

    def parsed(*extra):
        return parser.parse_args(["--target", TARGET, "--workload", WORKLOAD, "--out", "x", *extra]).redraft_share

    assert parsed() == SearchConfig().redraft_share == 0.15
    assert parsed("--redraft-share", "null") is None and parsed("--redraft-share", "0.3") == 0.3
    assert pl.draft_verify("a100").redraft_share == 0.15


def test_the_model_device_places_our_cost_models_and_unset_keeps_the_default():
    """`--model-device` (CostModelConfig.model_device) is the torch device our cost models score and
    train on: the CLI parses it, and the factory builds a PAM there (unset: cuda when available)."""
    import torch

    from bridge.factory import make_cost_model

    parser = tune.build_parser()
    args = parser.parse_args(["--target", TARGET, "--workload", WORKLOAD, "--out", "x", "--model-device", "cpu"])
    assert args.model_device == "cpu" and CostModelConfig().model_device is None
    assert make_cost_model(CostModelConfig(name="pam", model_device="cpu", epochs=1)).device == torch.device("cpu")
    # built, not used: a device this host may lack shows that the setting, not the default, placed it
    assert make_cost_model(CostModelConfig(name="pam", model_device="cuda:1", epochs=1)).device == torch.device(
        "cuda:1"
    )
    default = make_cost_model(CostModelConfig(name="pam", epochs=1))
    assert default.device.type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_cuda_tasks_near_the_launch_floor_get_a_note():
    """`bridge.report.launch_floor_note`: a CUDA run timed by the evaluator whose tasks ended under
    5 us is told their readings are mostly launches; over it, with the graph timer, on another device
    or with no valid trial, nothing is said."""
    from bridge.report import launch_floor_note
    from bridge.tuning import TaskResult, TuneResult

    def result(*best_us):
        tasks = [TaskResult(f"t{i}", 1.0, 1e6, 16, us * 1e-6) for i, us in enumerate(best_us)]
        return TuneResult(tasks=tasks, rows=[], search_s=1.0, database=None)

    note = launch_floor_note(result(3.6, 12.0, 4.9), "cuda", "evaluator")
    assert (
        note.startswith("2 of 3 task(s) ended under 5 us (t0, t2), near the host's launch rate")
        and "--timer graph" in note
    )
    assert launch_floor_note(result(3.6, 12.0, 4.9), "cuda", "graph") is None  # timed as graphs already
    assert launch_floor_note(result(3.6), "llvm", "evaluator") is None
    assert launch_floor_note(result(5.0, math.inf), "cuda", "evaluator") is None  # at 5 us, or nothing valid
    many = launch_floor_note(result(1, 2, 3, 4), "cuda", "evaluator")
    assert "(t0, t1, t2, ...)" in many
