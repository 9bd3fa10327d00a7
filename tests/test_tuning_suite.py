"""benchmarks/tuning.py: its report on hand-made arm curves (equal-time latency, time to XGB's final,
speedups), and its arms dealt out to one process per GPU."""

import ast
import json
import math
import os
import re
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
from benchmark_files import load_benchmark

from bridge.search_log import SearchLog

suite_report = load_benchmark("suite_report")


def write_arm(path: Path, points):
    """points: (elapsed_s, total_trials, estimated_ms[, draft_s[, prebuild_s]]) per batch; build_s 0.5 each."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [",".join(SearchLog.FIELDS)]
    for elapsed, trials, est, *extra in points:
        row = dict.fromkeys(SearchLog.FIELDS, "nan")
        row.update(task="t", elapsed_s=elapsed, total_trials=trials, estimated_ms=est, best_us=est * 1e3, run_s=1.0)
        row["build_s"] = 0.5
        for key, value in zip(("draft_s", "prebuild_s"), extra):
            row[key] = value
        lines.append(",".join(str(row[k]) for k in SearchLog.FIELDS))
    path.write_text("\n".join(lines) + "\n")


def test_report_times_speedups_and_never(tmp_path):
    write_arm(tmp_path / "op_a" / "xgb-s0.csv", [(10, 16, 0.05), (40, 32, 0.03), (90, 48, 0.02), (120, 64, 0.02)])
    write_arm(
        tmp_path / "op_a" / "pruner-s0.csv",
        [(10, 16, 0.04, 7.5), (30, 32, 0.019, 0.0, 3.0), (120, 96, 0.015, 4.5, 2.0)],
    )
    write_arm(tmp_path / "op_b" / "xgb-s0.csv", [(20, 16, 0.010), (100, 48, 0.008)])
    write_arm(tmp_path / "op_b" / "pruner-s0.csv", [(20, 16, 0.0095), (100, 64, 0.0083)])
    text = suite_report.report(tmp_path, plot=str(tmp_path / "suite.png"))
    # op_a: XGB's final 0.02 ms first reached at 90 s; pruner reached it at 30 s (32 trials): 3x
    assert "| op_a | pruner | 1 | 96 | 15.00 | 0.750 | 30 s | 32 | 3.00x |" in text
    # build a round: the median of 0.5 (built in the loop), 3.0 and 2.0 (built ahead) is 2.0 s
    lines = {
        tuple(c.strip() for c in line.split("|")[1:3]): line for line in text.splitlines() if line.startswith("| op_")
    }
    # drafting: (7.5 + 0 + 4.5) s of drafts over 120 s; XGB drafts nothing; op_b's pruner logged no drafts
    assert lines[("op_a", "pruner")].endswith("| 10% | 2.0 s |") and lines[("op_a", "xgb")].endswith("| - | 0.5 s |")
    # idle: 3 runs of 1 s in 120 s; between batches, from the first run's start at 9 s: 1 - 3/111
    assert lines[("op_a", "pruner")].endswith(
        f"| {100 * (1 - 3 / 120):.0f}% ({100 * (1 - 3 / 111):.0f}%) | 10% | 2.0 s |"
    )
    assert lines[("op_b", "pruner")].endswith("| - | 0.5 s |")
    # op_b: pruner never reaches 0.008 ms; bound 100/100 = 1x, marked "<"; 0.0083/0.008 = 1.0375 worse
    assert "| op_b | pruner | 1 | 64 | 8.30 | 1.038 | never | never | <1.00x |" in text
    assert "geometric-mean speedup over XGB (search time to XGB's final latency) 1.73x over 2 workloads" in text
    assert "pruner on op_b (1.038x XGB's latency)" in text
    assert "- single seeds behind XGB at equal time beyond 2%: pruner 1 of 2 (op_b s0 1.038x)" in text
    assert "across seeds" not in text and "| seed |" not in text  # one XGB seed a workload: no spread, no seeds
    assert f"latency at equal time {math.sqrt(0.75 * 1.0375):.3f}x XGB's (geometric mean over 2)" in text
    assert (tmp_path / "suite.png").stat().st_size > 1000


def test_report_counts_the_seeds_that_reached_xgbs_final(tmp_path):
    # seed 0: XGB ends at 0.02 (reached at 80 s), pruner ends at 0.021: never. seed 1: XGB ends at 0.04
    # (at 60 s), pruner reaches it at 20 s (16 trials): 3x. Bounds: seed 0 80/100 = 0.8x.
    write_arm(tmp_path / "op" / "xgb-s0.csv", [(20, 16, 0.05), (80, 48, 0.02), (100, 64, 0.02)])
    write_arm(tmp_path / "op" / "pruner-s0.csv", [(20, 16, 0.03), (100, 80, 0.021)])
    write_arm(tmp_path / "op" / "xgb-s1.csv", [(30, 16, 0.05), (60, 32, 0.04), (100, 48, 0.04)])
    write_arm(tmp_path / "op" / "pruner-s1.csv", [(20, 16, 0.035), (100, 64, 0.03)])
    text = suite_report.report(tmp_path)
    speedup = math.sqrt(0.8 * 3.0)
    row = f"| op | pruner | 2 | 72 | 25.50 | 0.900 | 20 s (1 of 2 seeds) | 16 (1 of 2 seeds) | <{speedup:.2f}x |"
    assert row in text, text
    assert "- xgb's final latency across seeds: op 20.00-40.00 us (2 seeds)" in text
    # by the mean over seeds (0.9) pruner is ahead; seed 0 alone (0.021 against 0.02) is 5% behind
    assert "- worse than XGB at equal time beyond 2%: none" in text
    assert "- single seeds behind XGB at equal time beyond 2%: pruner 1 of 2 (op s0 1.050x)" in text
    # each seed against its own XGB run
    assert "| op | 0 | 20.00 | 80 s | never | <0.80x |" in text and "| op | 1 | 40.00 | 60 s | 20 s | 3.00x |" in text
    write_arm(tmp_path / "op" / "pruner-s1.csv", [(20, 16, 0.045), (100, 64, 0.041)])  # now neither seed does
    assert "| never | never | <" in suite_report.report(tmp_path)


def test_report_pairs_each_method_with_pruner_seed_by_seed(tmp_path):
    # seed 0: XGB's final 0.02 at 80 s; pruner reaches it at 40 s (2x), moa at 20 s (4x).
    # seed 1: XGB's final 0.04 at 60 s; pruner at 20 s (3x), moa never (60/100 = 0.6x); seed 2 has no moa arm.
    write_arm(tmp_path / "op" / "xgb-s0.csv", [(20, 16, 0.05), (80, 48, 0.02), (100, 64, 0.02)])
    write_arm(tmp_path / "op" / "pruner-s0.csv", [(40, 16, 0.02), (100, 64, 0.018)])
    write_arm(tmp_path / "op" / "moa-s0.csv", [(20, 16, 0.02), (100, 64, 0.019)])
    write_arm(tmp_path / "op" / "xgb-s1.csv", [(30, 16, 0.05), (60, 32, 0.04), (100, 48, 0.04)])
    write_arm(tmp_path / "op" / "pruner-s1.csv", [(20, 16, 0.035), (100, 64, 0.03)])
    write_arm(tmp_path / "op" / "moa-s1.csv", [(20, 16, 0.045), (100, 64, 0.041)])
    write_arm(tmp_path / "op" / "xgb-s2.csv", [(30, 16, 0.05), (100, 48, 0.04)])
    write_arm(tmp_path / "op" / "pruner-s2.csv", [(20, 16, 0.035), (100, 64, 0.03)])
    text = suite_report.report(tmp_path)
    ratio = math.sqrt((4 / 2) * (0.6 / 3))
    latency = [math.log(0.019 / 0.018), math.log(0.041 / 0.03)]
    line = (
        "- moa against pruner, seed by seed (2 seeds where both ran): reached xgb's final sooner on 1, later on 1; "
        f"speedup {ratio:.2f}x pruner's (geometric mean, 95% interval "
    )
    assert line in text, text
    # the latency ratio's interval: Student's t with 1 degree of freedom (12.706) over the two log ratios
    half = 12.7062 * abs(latency[0] - latency[1]) / math.sqrt(2) / math.sqrt(2)
    mean = sum(latency) / 2
    assert (
        f"lower latency at equal time on 0 of 2, {math.exp(mean):.3f}x pruner's (geometric mean, 95% interval "
        f"{math.exp(mean - half):.3f}-{math.exp(mean + half):.3f}x)" in text
    ), text
    # another reference: pruner against moa is the same pairing the other way round
    text = suite_report.report(tmp_path, against=("pruner", "moa"))
    assert (
        line in text
        and "- pruner against moa, seed by seed (2 seeds where both ran): reached xgb's final "
        f"sooner on 1, later on 1; speedup {1 / ratio:.2f}x moa's"
        in text
    ), text
    assert "pruner against pruner" not in text and "xgb against" not in text
    write_arm(tmp_path / "op" / "pruner-s1.csv", [(20, 16, 0.045), (100, 64, 0.042)])  # both never on seed 1: a tie
    assert "sooner on 1, later on 0;" in suite_report.report(tmp_path)


def test_sooner_moves_every_curve_but_the_baselines_earlier(tmp_path):
    # XGB reaches its final 0.02 at 80 s; pruner at 40 s (2x). 15 s sooner: 25 s (3.2x); XGB's own stays.
    write_arm(tmp_path / "op" / "xgb-s0.csv", [(20, 16, 0.05), (80, 48, 0.02), (100, 64, 0.02)])
    write_arm(tmp_path / "op" / "pruner-s0.csv", [(20, 16, 0.03), (40, 32, 0.02), (100, 64, 0.018)])
    assert "| op | pruner | 1 | 64 | 18.00 | 0.900 | 40 s | 32 | 2.00x |" in suite_report.report(tmp_path)
    text = suite_report.report(tmp_path, sooner=15.0)
    assert "| op | pruner | 1 | 64 | 18.00 | 0.900 | 25 s | 32 | 3.20x |" in text, text
    assert "| op | xgb | 1 | 64 | 20.00 | 1.000 | 80 s | 48 | 1.00x |" in text, text
    with pytest.raises(ValueError, match="sooner"):
        suite_report.report(tmp_path, sooner=-1.0)
    with pytest.raises(ValueError, match="needs --report"):
        tuning.main(["--sooner", "5", "--results", str(tmp_path)])


def _reread(path: Path, kernels: dict) -> Path:
    """A launch_floor.py JSON: kernel name -> (reported_us, its --timer graph readings)."""
    body = {"floor (64 adds)": {"reported_us": None, "idle": {"graph_timer_us": [0.9]}}}
    for name, (reported, readings) in kernels.items():
        body[name] = {
            "reported_us": reported,
            "idle": {"graph_timer_us": readings[:1]},
            "loaded": {"graph_timer_us": readings[1:]},
        }
    path.write_text(json.dumps({"burn": 0, "kernels": body}))
    return path


def test_reread_puts_every_arm_on_its_best_kernels_rereads_scale(tmp_path, capsys):
    # as run: pruner reaches XGB's final (20 us) at 40 s (2x) and ends at 17.4 us. Re-read, pruner's
    # best (17.4 us) is 20.01 (x1.15: its whole curve 1.15x slower) and XGB's 20 us is 20.2 (x1.01):
    # pruner reaches 20.2 us (17.57 as run) only at 100 s (0.80x), and ends at 0.991x XGB's latency.
    res = tmp_path / "res"
    write_arm(res / "op" / "xgb-s0.csv", [(20, 16, 0.05), (80, 48, 0.02), (100, 64, 0.02)])
    write_arm(res / "op" / "pruner-s0.csv", [(20, 16, 0.03), (40, 32, 0.02), (100, 64, 0.0174)])
    assert "| op | pruner | 1 | 64 | 17.40 | 0.870 | 40 s | 32 | 2.00x |" in suite_report.report(res)
    one = _reread(
        tmp_path / "one.json",
        {
            "runs/lane0/op/pruner-s0 pruner-s0/1 #0": (17.4, [20.0, 20.01, 20.1]),  # median 20.01: x1.15
            "runs/lane0/op/pruner-s0 pruner-s0/1 #1": (17.9, [99.0]),  # not the arm's best: not its factor
        },
    )
    two = _reread(tmp_path / "two.json", {"benchmarks/results/x/op/xgb-s0 xgb-s0/1 #0": (20.0, [20.2])})
    text = suite_report.report(res, reread=(one, two))
    assert "| op | pruner | 1 | 64 | 20.01 | 0.991 | 100 s | 64 | 0.80x |" in text, text
    assert "| op | xgb | 1 | 64 | 20.20 | 1.000 | 80 s | 48 | 1.00x |" in text, text
    assert text.index("  op pruner s0: x1.150") < text.index("| workload |") and "  op xgb s0: x1.010" in text
    with pytest.raises(ValueError, match="no re-read of xgb seed 0 of op"):
        suite_report.report(res, reread=(one,))
    tuning.main(["--report", "--results", str(res), "--reread", str(one), str(two)])  # the CLI passes them on
    assert "| op | pruner | 1 | 64 | 20.01 | 0.991 | 100 s | 64 | 0.80x |" in capsys.readouterr().out
    with pytest.raises(ValueError, match="needs --report"):
        tuning.main(["--reread", str(one), "--results", str(res)])
    with pytest.raises(ValueError, match="--model-device 'gpu0': give cpu, cuda or cuda:N"):
        tuning.main(["--model-device", "gpu0", "--results", str(res)])


def test_a_geometric_mean_comes_with_its_t_interval():
    # logs 0.1, 0.2, 0.3: mean 0.2, sd 0.1, t(0.975, 2) = 4.303, half-width 4.303 * 0.1 / sqrt(3) = 0.2484
    assert suite_report.geomean_interval([0.1, 0.2, 0.3], 3) == "1.221x (geometric mean, 95% interval 0.953-1.566x)"
    assert suite_report.geomean_interval([0.1], 2) == "1.11x (geometric mean)"  # one pair: no interval
    assert suite_report.geomean_interval([0.1, 0.1], 2) == "1.11x (geometric mean)"  # no spread to judge


def test_time_and_trials_to_a_latency():
    rows = [
        {"elapsed_s": 5.0, "total_trials": 8.0, "estimated_ms": 2.0},
        {"elapsed_s": 9.0, "total_trials": 16.0, "estimated_ms": 1.0},
    ]
    assert suite_report.time_to(rows, 1.0) == 9.0 and suite_report.trials_to(rows, 1.5) == 16.0
    assert math.isinf(suite_report.time_to(rows, 0.5))
    with pytest.raises(FileNotFoundError, match="no such results folder"):
        suite_report.report(Path("/nonexistent-results"))


tuning = load_benchmark("tuning")


def test_pending_arms_are_dealt_out_in_turn(tmp_path):
    (tmp_path / "dense_1x8x8").mkdir()
    (tmp_path / "dense_1x8x8" / "xgb-s0.csv").write_text("done")
    arms = tuning.pending_arms(tmp_path, [0, 1], ["dense:1,8,8", "conv"], ["xgb", "pruner"])
    assert arms[0] == (0, "dense:1,8,8", "pruner", None, {}) and len(arms) == 7
    assert (0, "dense:1,8,8", "xgb", None, {}) not in arms
    shares = [tuning.share(arms, i, 2) for i in range(2)]
    assert sorted(map(str, shares[0] + shares[1])) == sorted(map(str, arms))
    assert len(shares[0]) == 4 and len(shares[1]) == 3
    with pytest.raises(ValueError, match="share 2 of 2"):
        tuning.share(arms, 2, 2)


def test_a_label_names_a_variants_arms_and_the_report_sets_it_beside_xgb(tmp_path):
    assert tuning.arm_path(tmp_path, 1, "conv:1", "pruner", "pruner-r16") == tmp_path / "conv_1" / "pruner-r16-s1.csv"
    assert tuning.arm_path(tmp_path, 1, "conv:1", "pruner") == tmp_path / "conv_1" / "pruner-s1.csv"
    write_arm(tmp_path / "conv_1" / "pruner-s0.csv", [(10, 16, 0.04)])
    assert tuning.pending_arms(tmp_path, [0], ["conv:1"], ["pruner"], "pruner-r16") == [
        (0, "conv:1", "pruner", "pruner-r16", {})
    ]
    assert tuning.pending_arms(tmp_path, [0], ["conv:1"], ["pruner"]) == []
    for bad in ("", "xgb", "a/b", "pruner-s2"):
        with pytest.raises(ValueError, match="--label"):
            tuning.arm_name("pruner", bad)
    with pytest.raises(ValueError, match="names one method's arms"):
        tuning.main(["--arms", "xgb", "pruner", "--label", "variant", "--results", str(tmp_path)])
    write_arm(tmp_path / "conv_1" / "xgb-s0.csv", [(10, 16, 0.05), (60, 32, 0.03)])
    write_arm(tmp_path / "conv_1" / "pruner-r16-s0.csv", [(10, 16, 0.03), (60, 32, 0.02)])
    text = suite_report.report(tmp_path, plot=str(tmp_path / "ab.png"))  # the variant gets a color of its own
    # XGB's final 0.03 ms came at 60 s; the variant had it at 10 s (6x), the default never (bound 10/60)
    assert "| conv_1 | pruner-r16 | 1 | 32 | 20.00 | 0.667 | 10 s | 16 | 6.00x |" in text, text
    assert "| conv_1 | pruner | 1 | 16 | 40.00 |" in text
    assert (tmp_path / "ab.png").stat().st_size > 1000


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two shards need two cores")
def test_two_shards_tune_their_arms_at_once_on_their_own_cores(tmp_path):
    """`--gpus 2` on the host: two real tuning processes (XGB, llvm), one arm each, each pinned to its own cores."""
    cmd = [sys.executable, str(Path(tuning.__file__)), "--target", '{"kind": "llvm"}', "--arms", "xgb"]
    cmd += ["--seeds", "0", "1", "--workloads", "dense:1,32,32", "--budget-s", "8", "--max-trials", "2"]
    cmd += ["--trials-per-round", "2", "--results", str(tmp_path / "r"), "--work", str(tmp_path / "w"), "--gpus", "2"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True).stdout
    cores = [ast.literal_eval(line.split(" on cores ")[1]) for line in out.splitlines() if " on cores " in line]
    assert len(cores) == 2 and not set(cores[0]) & set(cores[1]), out
    assert "[gpu 0] arm dense:1,32,32 xgb seed 0" in out and "[gpu 1] arm dense:1,32,32 xgb seed 1" in out, out
    for seed in (0, 1):
        rows = (tmp_path / "r" / "dense_1x32x32" / f"xgb-s{seed}.csv").read_text().splitlines()
        assert len(rows) >= 2 and float(rows[-1].split(",")[SearchLog.FIELDS.index("total_trials")]) >= 1
    # resuming: both arms are done, so no shard starts
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True).stdout
    assert "every arm has its results file" in again and "on cores" not in again, again


def test_the_draft_knobs_reach_the_search_config():
    values = (
        "published",
        None,
        512,
        1,
        2,
        0,
        True,
        0.2,
        16,
        True,
        1.0,
        False,
        48,
        0.25,
        False,
        False,
        3,
        False,
        7,
        1,
        True,
        256.0,
        0.3,
        0.5,
        4,
        2,
        True,
        1,
        128,
        20,
        False,
        0,
        3,
    )  # none a default
    knobs = dict(zip(tuning.SEARCH_KNOBS, values, strict=True))
    args = types.SimpleNamespace(
        psa="h100", seed_value=1, epochs=7, background_update=False, model_device="cpu", **knobs
    )
    cost_model, search = tuning.configs("pruner", args)
    assert (search.redraft_every, search.redraft_stall, search.psa_formula) == (2, 0, "published")
    assert search.redraft_backoff is True and search.redraft_min_samples == 16 and search.redraft_share == 0.2
    assert search.pipeline is False and search.verify_gate is True and search.draft_generations == 1
    assert search.psa_weight == 1.0 and search.fill_device == 48 and search.straggler_grace == 0.25
    assert search.draft_ahead is False and search.first_drafts_ahead == 3 and search.search_ahead == 1
    assert search.low_draft_ahead is False and search.size_filter_kb == 256.0 and search.eps_greedy == 0.3
    assert search.draft_rounds == 2 and search.quick_start is True and search.first_draft_generations == 1
    assert search.build_apart is True and search.first_verify_ahead is False and search.first_verify_generations == 0
    assert search.draft_nice == 7 and search.first_draft_population == 128 and search.first_draft_min_samples == 20
    assert search.first_draft_threads == 3
    assert cost_model.name == "pam" and cost_model.seed == 1 and cost_model.epochs == 7
    assert cost_model.background_update is False and cost_model.model_device == "cpu"  # defaults: True, None
    mlp = tuning.configs("mlp", args)[0]
    assert mlp.epochs == 7 and mlp.background_update is False and mlp.model_device == "cpu"
    with pytest.raises(ValueError, match="needs --checkpoint"):
        tuning.configs("moa", types.SimpleNamespace(**{**vars(args), "checkpoint": None}))


def test_lanes_sharing_a_results_folder_keep_every_eager_time(tmp_path):
    """Lanes of one device call write their eager times into one eager.json at about the same time:
    four processes, started together, each add 30 of their own one at a time; none is lost and a
    time already there is kept."""
    path = tmp_path / "eager.json"
    path.write_text('{"dense:1,8,8": 1.5}')
    start = time.time() + 3.0  # after every process has imported, all merge at once
    code = (
        "import sys, time; from pathlib import Path; from benchmarks.suite_eager import merge_eager; "
        f"time.sleep(max(0.0, {start} - time.time())); "
        "[merge_eager(Path(sys.argv[1]), {f'{sys.argv[2]}_{j}': float(j), 'dense:1,8,8': 9.0}) for j in range(30)]"
    )
    root = Path(tuning.__file__).resolve().parents[1]
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), f"w{i}"], cwd=root) for i in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 4
    expected = {"dense:1,8,8": 1.5, **{f"w{i}_{j}": float(j) for i in range(4) for j in range(30)}}
    assert json.loads(path.read_text()) == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eager.json"]  # no lock file left behind


def test_report_over_several_folders_takes_each_arm_from_one(tmp_path, capsys):
    first, second = tmp_path / "seeds", tmp_path / "convs"
    write_arm(first / "op_a" / "xgb-s0.csv", [(10, 16, 0.05), (90, 48, 0.02), (120, 64, 0.02)])
    write_arm(first / "op_a" / "pruner-s0.csv", [(30, 32, 0.019), (120, 96, 0.015)])
    write_arm(second / "op_b" / "xgb-s0.csv", [(20, 16, 0.010), (100, 48, 0.008)])
    write_arm(second / "op_b" / "pruner-s0.csv", [(25, 16, 0.008), (100, 64, 0.007)])
    (first / "eager.json").write_text(json.dumps({"op_a": 0.1}))
    (second / "eager.json").write_text(json.dumps({"op_a": 0.3, "op_b": 0.2}))
    text = suite_report.report(first, also=(second,))
    assert "| op_a | pruner | 1 | 96 | 15.00 | 0.750 | 30 s | 32 | 3.00x |" in text
    # op_b: XGB reached its final 0.008 at 100 s, pruner at 25 s: 4x; the geometric mean of 3x and 4x
    assert "| op_b | pruner | 1 | 64 | 7.00 | 0.875 | 25 s | 16 | 4.00x |" in text
    assert f"{math.sqrt(12):.2f}x over 2 workloads" in text
    assert "| op_a | torch eager (cuBLAS/cuDNN) | | | 100.00 |" in text  # the first folder's time
    assert "| op_b | torch eager (cuBLAS/cuDNN) | | | 200.00 |" in text
    assert "op_b" not in suite_report.report(first)
    write_arm(second / "op_a" / "pruner-s1.csv", [(20, 16, 0.02), (100, 64, 0.01)])  # a later seed, elsewhere
    write_arm(second / "op_a" / "xgb-s1.csv", [(10, 16, 0.05), (60, 48, 0.02), (120, 64, 0.02)])
    text = suite_report.report(first, also=(second,))  # seed 1: XGB's final 0.02 at 60 s, pruner's at 20 s
    assert "| op_a | pruner | 2 | 80 | 12.50 | 0.625 |" in text
    assert "| op_a | 1 | 20.00 | 60 s | 20 s | 3.00x |" in text
    write_arm(second / "op_a" / "pruner-s0.csv", [(20, 16, 0.02), (100, 64, 0.01)])
    with pytest.raises(
        ValueError, match=r"convs/op_a/pruner-s0.csv: arm pruner seed 0 of op_a is in .*seeds/op_a/pruner-s0.csv too"
    ):
        suite_report.report(first, also=(second,))
    for name in ("pruner-s0", "pruner-s1", "xgb-s1"):
        (second / "op_a" / f"{name}.csv").unlink()
    with pytest.raises(FileNotFoundError, match="nowhere"):
        suite_report.report(first, also=(tmp_path / "nowhere",))
    with pytest.raises(ValueError, match="it needs --report"):  # without --report it would run arms
        tuning.main(["--results", str(first), "--also", str(second)])
    tuning.main(["--report", "--results", str(first), "--also", str(second)])
    assert f"{math.sqrt(12):.2f}x over 2 workloads" in capsys.readouterr().out


def test_report_reads_only_xgb_arms_from_xgb_folders(tmp_path, capsys):
    """An A/B of two methods run without XGB (here pruner and moa, side by side in one call) is reported
    against XGB arms of other calls. Those folders may hold the same method's arms too (the suite's own
    pruner seeds): they are neither read nor refused as a second copy."""
    ab, xgb_a, xgb_b = tmp_path / "ab", tmp_path / "xgb_a", tmp_path / "xgb_b"
    write_arm(ab / "op_a" / "pruner-s0.csv", [(30, 32, 0.019), (120, 96, 0.015)])
    write_arm(ab / "op_a" / "moa-s0.csv", [(45, 32, 0.018), (120, 96, 0.016)])
    write_arm(xgb_a / "op_a" / "xgb-s0.csv", [(10, 16, 0.05), (90, 48, 0.02), (120, 64, 0.02)])
    write_arm(xgb_a / "op_a" / "pruner-s0.csv", [(110, 96, 0.04)])  # another call's pruner: not read
    write_arm(xgb_b / "op_a" / "pruner-s0.csv", [(100, 96, 0.03)])  # a copy of it in a second folder
    write_arm(xgb_b / "op_a" / "xgb-s1.csv", [(10, 16, 0.05)])  # a seed the A/B did not run: not taken
    text = suite_report.report(ab, baseline_from=(xgb_a, xgb_b), against=("pruner", "moa"))
    # XGB's final 0.02 at 90 s; pruner reached it at 30 s (3x), moa at 45 s (2x)
    assert "| op_a | pruner | 1 | 96 | 15.00 | 0.750 | 30 s | 32 | 3.00x |" in text
    assert "| op_a | moa | 1 | 96 | 16.00 | 0.800 | 45 s | 32 | 2.00x |" in text
    assert (
        "moa against pruner, seed by seed (1 seeds where both ran): reached xgb's final sooner on 0, later on 1" in text
    )
    assert "| op_a | xgb | 1 |" in text  # seed 0 only
    write_arm(xgb_b / "op_a" / "xgb-s0.csv", [(10, 16, 0.05)])  # two XGB arms of one seed: refused
    with pytest.raises(ValueError, match=r"xgb seed 0 of op_a is in .*xgb_a/op_a/xgb-s0.csv too"):
        suite_report.report(ab, baseline_from=(xgb_a, xgb_b))


def test_report_against_pruner_pairs_arms_run_without_xgb(tmp_path, capsys):
    """MoA/Pruner pairs run without XGB: `--baseline pruner` measures MoA against each seed's own
    Pruner arm (equal-time latency, time to Pruner's final), and names Pruner where XGB stood."""
    write_arm(tmp_path / "op" / "pruner-s2.csv", [(40, 32, 0.02), (90, 64, 0.012), (120, 96, 0.012)])
    write_arm(tmp_path / "op" / "moa-s2.csv", [(50, 32, 0.011), (120, 96, 0.010)])
    write_arm(tmp_path / "op" / "moa-s3.csv", [(50, 32, 0.011)])  # no pruner arm of seed 3: not paired
    assert "| op |" not in suite_report.report(tmp_path)  # no xgb arm: nothing to report against
    with pytest.raises(ValueError, match="it needs --report"):
        tuning.main(["--results", str(tmp_path), "--baseline", "pruner"])
    tuning.main(["--report", "--results", str(tmp_path), "--baseline", "pruner"])
    text = capsys.readouterr().out
    # Pruner's final 0.012 at 90 s; MoA reached it at 50 s (1.80x), 10.00 us against 12.00 at 120 s
    assert "| op | moa | 1 | 96 | 10.00 | 0.833 | 50 s | 32 | 1.80x |" in text, text
    assert "| vs pruner at equal time | reached pruner's final at (s) |" in text
    assert "- moa: geometric-mean speedup over pruner (search time to pruner's final latency) 1.80x" in text
    assert "XGB" not in text


def test_report_pairs_two_arms_at_the_earlier_of_their_ends(tmp_path, capsys):
    """An arm that reached its trial cap at 50 s is compared, seed by seed, with the other arm's best by
    50 s (0.011 against 0.02: 0.55x), not with its best at its own end (0.010: that would be 1.1x)."""
    write_arm(tmp_path / "op" / "pruner-s0.csv", [(40, 32, 0.02), (110, 64, 0.010)])
    write_arm(tmp_path / "op" / "capped-s0.csv", [(30, 16, 0.015), (50, 32, 0.011)])
    tuning.main(["--report", "--results", str(tmp_path), "--baseline", "pruner"])
    text = capsys.readouterr().out
    assert "- capped against pruner, seed by seed (1 seeds where both ran): " in text, text
    assert "lower latency at equal time on 1 of 1, 0.550x pruner's (geometric mean)" in text, text


def test_report_takes_one_labels_arms_from_a_folder_under_another_name(tmp_path, capsys):
    """An A/B's variant whose setting became the default is reported as that method, beside the later
    seeds of the default (another folder) and XGB's runs of the A/B's call (a third)."""
    ab, later, xgb = tmp_path / "ab", tmp_path / "later", tmp_path / "xgb"
    write_arm(ab / "op_a" / "pruner-local-s0.csv", [(30, 32, 0.019), (120, 96, 0.015)])
    write_arm(ab / "op_a" / "pruner-s0.csv", [(100, 96, 0.03)])  # the old default: not taken
    write_arm(xgb / "op_a" / "xgb-s0.csv", [(10, 16, 0.05), (90, 48, 0.02), (120, 64, 0.02)])
    write_arm(xgb / "op_a" / "pruner-s0.csv", [(110, 96, 0.04)])  # not taken either
    write_arm(later / "op_a" / "xgb-s1.csv", [(10, 16, 0.05), (60, 48, 0.02), (120, 64, 0.02)])
    write_arm(later / "op_a" / "pruner-s1.csv", [(20, 16, 0.02), (100, 64, 0.01)])
    text = suite_report.report(later, take=(f"{ab}:pruner-local=pruner", f"{xgb}:xgb"))
    # seed 0: XGB's final 0.02 at 90 s, the variant's 0.019 at 30 s (3x); seed 1: 60 s against 20 s (3x)
    assert "| op_a | pruner | 2 | 80 | 12.50 | 0.625 | 25 s | 24 | 3.00x |" in text
    assert "| op_a | 0 | 20.00 | 90 s | 30 s | 3.00x |" in text and "pruner-local" not in text
    assert "| op_a | pruner | 1 |" in suite_report.report(later)  # without them: seed 1 alone
    with pytest.raises(ValueError, match=r"pruner seed 1 of op_a is in the other folders too"):
        suite_report.report(later, take=(f"{ab}:pruner-local=pruner", f"{later}:pruner"))
    with pytest.raises(ValueError, match="has no arm labelled 'pruner-lokal'"):
        suite_report.report(later, take=(f"{ab}:pruner-lokal=pruner",))
    with pytest.raises(ValueError, match="give FOLDER:LABEL"):
        suite_report.report(later, take=(str(ab),))
    with pytest.raises(FileNotFoundError, match="nowhere"):
        suite_report.report(later, take=(f"{tmp_path / 'nowhere'}:xgb",))
    with pytest.raises(ValueError, match="it needs --report"):
        tuning.main(["--results", str(later), "--take", f"{xgb}:xgb"])
    tuning.main(["--report", "--results", str(later), "--take", f"{ab}:pruner-local=pruner", f"{xgb}:xgb"])
    assert "| op_a | pruner | 2 | 80 | 12.50 | 0.625 | 25 s | 24 | 3.00x |" in capsys.readouterr().out


suite_variants = load_benchmark("suite_variants")


def _variants(*specs: str, method: str = "pruner"):
    import typing

    from bridge.config import CostModelConfig, MeasureConfig, SearchConfig

    hints = {**typing.get_type_hints(SearchConfig), **typing.get_type_hints(CostModelConfig)}
    hints.update(typing.get_type_hints(MeasureConfig))
    knobs = tuning.SEARCH_KNOBS + tuning.COST_KNOBS + tuning.MEASURE_KNOBS
    return suite_variants.parse_variants(method, list(specs), knobs, hints)


def test_variants_take_typed_draft_knobs_and_name_the_bad_one():
    got = _variants("pruner-quick:quick_start=true,draft_rounds=2,redraft_share=null,psa_weight=1,epochs=20", "pruner")
    want = {"quick_start": True, "draft_rounds": 2, "redraft_share": None, "psa_weight": 1.0, "epochs": 20}
    assert got == [("pruner-quick", want), (None, {})]
    assert _variants("pruner-stages:psa_formula=traffic-stages") == [
        ("pruner-stages", {"psa_formula": "traffic-stages"})
    ]
    assert isinstance(got[0][1]["psa_weight"], float)
    assert _variants("pruner-so:artifact=so", "pruner") == [("pruner-so", {"artifact": "so"}), (None, {})]
    assert _variants("pruner-bn:build_nice=10", "pruner-g:timer=graph") == [
        ("pruner-bn", {"build_nice": 10}),
        ("pruner-g", {"timer": "graph"}),
    ]
    for spec, match in (
        ("v:quick_start=1", "quick_start: 1 is not a bool"),
        ("v:draft_rounds=true", "draft_rounds: True is not a int"),
        ("v:draft_rounds=two", "draft_rounds: 'two' is not a int"),
        ("v:fill_device=null", "fill_device: None is not a int"),
        ("v:budget_s=9", "budget_s: not a knob a variant may set"),
        ("v:quick_start", "quick_start: a setting is KNOB=VALUE"),
        ("v:artifact=zip", r"artifact: 'zip' is not one of \('tar', 'so'\)"),
        ("pruner:quick_start=true", "the method's own arm takes no settings"),
    ):
        with pytest.raises(ValueError, match=match):
            _variants(spec)
    with pytest.raises(ValueError, match="'v' is given twice"):
        _variants("v:quick_start=true", "v:draft_rounds=1")


def test_variants_are_pending_in_their_order_and_skipped_when_done(tmp_path):
    variants = _variants("pruner-quick:quick_start=true", "pruner")
    write_arm(tmp_path / "conv_1" / "pruner-s1.csv", [(10, 16, 0.04)])
    arms = tuning.pending_arms(tmp_path, [0, 1], ["conv:1"], ["pruner"], None, variants)
    assert arms == [
        (0, "conv:1", "pruner", "pruner-quick", {"quick_start": True}),
        (0, "conv:1", "pruner", None, {}),
        (1, "conv:1", "pruner", "pruner-quick", {"quick_start": True}),
    ]
    for argv, match in (
        (["--arms", "xgb", "pruner", "--variants", "a:quick_start=true"], "of one method"),
        (["--arms", "pruner", "--label", "x", "--variants", "a:quick_start=true"], "without --label"),
        (["--arms", "pruner", "--variants", "xgb"], "--label 'xgb'"),
        (["--arms", "xgb", "--variants", "xgb-f:fill_device=8"], r"\['fill_device'\], which xgb does not take"),
        (
            ["--arms", "pruner", "--variants", "p:psa_formula=traffic-stage"],
            "--variants: 'p': --psa-formula 'traffic-stage' must be one of",
        ),
        (["--arms", "xgb", "--variants", "xgb-so:artifact=so,epochs=3"], r"\['epochs'\], which xgb does not take"),
        (["--arms", "pruner", "--variants", "p:build_nice=20"], "--variants: 'p': --build-nice 20 must be in 0-19"),
        (
            ["--arms", "mlp", "--variants", "mlp-e:epochs=5,quick_start=true"],
            r"\['quick_start'\], which mlp does not take",
        ),
    ):
        with pytest.raises(ValueError, match=match):
            tuning.main([*argv, "--results", str(tmp_path)])


def test_two_variants_tune_in_one_job_each_with_its_own_settings(tmp_path):
    """A real job (llvm, Pruner) running a quick-start variant, then the default: both arms' curves are
    written, the variant's first draft scored only its fresh samples (no evolution) and the default's,
    run after it in the same process, evolved them (the variant's settings did not stay)."""
    cmd = [sys.executable, str(Path(tuning.__file__)), "--target", '{"kind": "llvm"}', "--psa", "h100"]
    cmd += ["--arms", "pruner", "--variants", "pruner-quick:quick_start=true", "pruner", "--workloads", "dense:1,32,32"]
    cmd += ["--budget-s", "8", "--max-trials", "2", "--trials-per-round", "2"]
    cmd += ["--results", str(tmp_path / "r"), "--work", str(tmp_path / "w")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True).stdout
    assert out.index("arm dense:1,32,32 pruner-quick seed 0") < out.index("arm dense:1,32,32 pruner seed 0"), out
    startup = re.search(r"start-up ([\d.]+) s: eager ([\d.]+), TVM ([\d.]+), workers ([\d.]+)", out)
    total, *parts = (float(x) for x in startup.groups())  # where the job's start-up went, once for both arms
    assert out.count("start-up ") == 1 and parts[2] > 0 and abs(total - sum(parts)) < 0.15, out
    first = {}
    for name in ("pruner-quick", "pruner"):
        lines = (tmp_path / "r" / "dense_1x32x32" / f"{name}-s0.csv").read_text().splitlines()
        first[name] = dict(zip(lines[0].split(","), lines[1].split(",")))
    assert 0 < float(first["pruner-quick"]["draft_scored"]) <= float(first["pruner-quick"]["samples"])
    assert float(first["pruner"]["draft_scored"]) > float(first["pruner"]["samples"])


def test_a_variants_artifact_and_compile_cache_hold_for_its_arm_only(tmp_path, monkeypatch):
    """`run_arm` switches the job's builder to a variant's artifact, compile cache (`reuse_kernels`)
    and build priority (`build_nice`) for that arm and back after it, also when the arm fails, so the next arm builds with the job's.
    (The tuning itself is replaced here; `tests/test_tune.py` tunes with a `.so` builder and with
    reused kernels for real, and `tests/tvm_env/test_builder.py` builds with a switched one.)"""
    from tvm_env import PooledLocalBuilder

    builder, seen = PooledLocalBuilder(max_workers=1), []

    folders = []

    def tune(workload, seed, args, builder, *rest):
        seen.append((builder.artifact, args.artifact, builder.compile_cache, args.reuse_kernels, builder.nice))
        assert builder._cache_folder is None  # a reuse arm starts without another arm's compiles
        if builder.compile_cache:  # what the arm's first batch makes (PooledLocalBuilder.submit)
            builder._cache_folder = str(tmp_path / f"compiled{len(seen)}")
            os.mkdir(builder._cache_folder)
            folders.append(builder._cache_folder)
        if len(seen) == 3:
            raise RuntimeError("the arm failed")
        return types.SimpleNamespace(rows=[{"seed": seed}])

    monkeypatch.setattr(tuning, "_tune_arm", tune)
    args = types.SimpleNamespace(work=str(tmp_path), artifact="tar", reuse_kernels=False, build_nice=0)
    variant = {"artifact": "so", "reuse_kernels": True, "build_nice": 10}
    assert tuning.run_arm("dense:1,8,8", "xgb", 3, args, builder, label="xgb-so", settings=variant) == [{"seed": 3}]
    assert builder.artifact == "tar" and builder.f_export is None and not builder.compile_cache and builder.nice == 0
    tuning.run_arm("dense:1,8,8", "xgb", 3, args, builder)
    with pytest.raises(RuntimeError, match="the arm failed"):
        tuning.run_arm("dense:1,8,8", "xgb", 4, args, builder, label="xgb-so", settings=variant)
    assert seen == [("so", "so", True, True, 10), ("tar", "tar", False, False, 0), ("so", "so", True, True, 10)]
    assert builder.artifact == "tar" and not builder.compile_cache and builder.nice == 0
    assert len(folders) == 2 and not any(os.path.exists(f) for f in folders)  # each went with its arm
    assert args.artifact == "tar" and not args.reuse_kernels and args.build_nice == 0  # the job's own settings
    job = types.SimpleNamespace(work=str(tmp_path), artifact="tar", reuse_kernels=True, build_nice=0)  # whole-job reuse
    builder.set_compile_cache(True)
    for seed in (5, 6):
        tuning.run_arm("dense:1,8,8", "xgb", seed, job, builder)
    assert len(folders) == 4 and not os.path.exists(folders[2]) and os.path.isdir(folders[3])  # the next arm's
    assert builder.compile_cache
    builder.shutdown()
    assert not os.path.exists(folders[3])


def test_an_arms_reread_goes_beside_its_csv_and_rescales_it_in_the_report(tmp_path, monkeypatch):
    """`run_arm(reread_to=...)` writes the run's re-read finals (`bridge.reread`) as JSON, which
    `suite_reread` (the report's `--reread`) reads as the arm's factor; an arm that re-read nothing
    writes none. (The tuning is replaced here; `tests/test_reread.py` re-reads a real run.)"""
    from benchmark_files import load_benchmark

    from bridge.reread import Reread

    suite_reread = load_benchmark("suite_reread")
    reread = {"dense_1x8x8": Reread(2e-6, 2.2e-6, [(2e-6, 2.3e-6), (2.1e-6, 2.2e-6)])}
    results = iter(
        [types.SimpleNamespace(rows=[{"seed": 0}], reread=reread), types.SimpleNamespace(rows=[], reread={})]
    )
    monkeypatch.setattr(tuning, "_tune_arm", lambda *a: next(results))
    args = types.SimpleNamespace(work=str(tmp_path / "work"), artifact="tar", reuse_kernels=False, build_nice=0)
    csv = tuning.arm_path(tmp_path / "res", 0, "dense:1,8,8", "xgb")
    path = tuning.reread_path(csv)
    assert path == csv.parent / "xgb-s0.reread.json"
    assert tuning.run_arm("dense:1,8,8", "xgb", 0, args, None, reread_to=path) == [{"seed": 0}]
    written = json.loads(path.read_text())["reread"]["dense_1x8x8"]
    assert written["reread_us"] == pytest.approx(2.2)
    assert sum(written["candidates_us"], []) == pytest.approx([2, 2.3, 2.1, 2.2])
    assert suite_reread.reread_factors(path)["dense_1x8x8", "xgb", 0] == pytest.approx((2.0, 1.1))
    nothing = tuning.reread_path(tuning.arm_path(tmp_path / "res", 1, "dense:1,8,8", "xgb"))
    nothing.write_text('{"reread": {}}')  # a cut-off run's, left behind
    tuning.run_arm("dense:1,8,8", "xgb", 1, args, None, reread_to=nothing)
    assert not nothing.exists()
