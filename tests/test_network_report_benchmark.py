"""benchmarks/network_report.py on the ResNet-18 runs that came back from the GPU: each line agrees
with its run's files (read here with the csv and json modules), a retimed run takes the retime's
times, and bad input is refused naming the file."""

import csv
import json
import math
import shutil
from pathlib import Path

import pytest

from benchmarks import network_report

RESNET_18 = Path(__file__).resolve().parents[1] / "benchmarks/results/network_e2e/resnet_18"


def _first_rounds(name: str) -> list[dict]:
    with open(RESNET_18 / name / "tuning_curve.csv", newline="") as f:
        return [row for row in csv.DictReader(f) if row["round"] == "1"]


def test_each_run_gets_its_summary_and_curve_figures(tmp_path, capsys):
    lines = network_report.main([str(RESNET_18), "--against", "pruner-s0", "--json", str(tmp_path / "r.json")])
    runs = sorted(p.name for p in RESNET_18.iterdir() if (p / "summary.json").is_file())
    assert [line["run"] for line in lines] == runs and {"pruner-s0", "xgb-s0", "moa-s0"} <= set(runs)
    assert [line["run"] for line in json.loads((tmp_path / "r.json").read_text())] == runs
    retimed, times = {}, {}  # each run's latest retime: the dated ones first, resnet_18-retime.json last
    for path in sorted(RESNET_18.glob("*-retime*.json")):
        retime = json.loads(path.read_text())
        for k, v in retime["tuned"].items():
            retimed[Path(k).name], times[Path(k).name] = v, (retime["untuned_ms"], retime["torch_eager_ms"])
    assert {"pruner-s0", "xgb-s0", "pruner-cs-s0"} <= set(retimed)
    by_run = {line["run"]: line for line in lines}
    for name, line in by_run.items():
        summary = json.loads((RESNET_18 / name / "summary.json").read_text())
        first = _first_rounds(name)
        assert line["trials"] == summary["total_trials"]
        assert line["estimated_ms"] == summary["estimated_total_ms"]
        assert line["reread_ms"] == summary["estimated_total_reread_ms"]
        assert line["idle"] == summary["device_idle"]["idle"]
        if name in retimed:  # compiled again after the fix: the run's own compile missed its schedules
            assert line["retimed"] and line["compiled_ms"] == retimed[name]["ms"] != summary["end_to_end_ms"]
            assert line["tuned_kernels"] == retimed[name]["tuned_kernels"]
            assert (line["untuned_ms"], line["torch_eager_ms"]) == times[name]
        else:
            assert not line["retimed"] and line["compiled_ms"] == summary["end_to_end_ms"]
            assert (line["tuned_kernels"], line["kernels"]) == (summary["tuned_kernels"], summary["kernels"])
            assert (line["untuned_ms"], line["torch_eager_ms"]) == (summary["untuned_ms"], summary["torch_eager_ms"])
        if len(first) == len(summary["tasks"]):
            assert line["first_rounds_s"] == pytest.approx(max(float(r["elapsed_s"]) for r in first))
        else:  # XGB never reached five tasks: their first rounds never came
            assert name.startswith("xgb") and math.isnan(line["first_rounds_s"])
    pruner, moa, xgb = by_run["pruner-s0"], by_run["moa-s0"], by_run["xgb-s0"]
    assert pruner["first_drafts_s"] == pytest.approx(sum(float(r["draft_s"]) for r in _first_rounds("pruner-s0")))
    assert pruner["first_drafts_s"] == pytest.approx(472.9, abs=0.05) and pruner["first_rounds_s"] == pytest.approx(
        248.4, abs=0.05
    )
    assert pruner["against"] == 1.0 and moa["against"] == pytest.approx(moa["compiled_ms"] / pruner["compiled_ms"])
    # XGB's latest retime (2026-12-02, beside the constrained run) against Pruner's (2026-12-01)
    assert xgb["against"] == pytest.approx(2.3022 / 0.6854, abs=1e-3)
    assert xgb["estimated_ms"] is None and math.isnan(xgb["drafting"]) and math.isnan(xgb["first_drafts_s"])
    assert 1.5 < pruner["drafting"] < 1.6  # 473 draft seconds over a 300 s run: two drafts at once
    assert math.isnan(pruner["drafting_wall"])  # a curve from before draft_wall_s: not known
    printed = capsys.readouterr().out
    assert "0.685 retimed" in printed and "14 of 19" in printed


def test_bad_input_is_refused_naming_the_file(tmp_path):
    with pytest.raises(ValueError, match="no such folder"):
        network_report.report(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="no run folder"):
        network_report.report(tmp_path)
    run = tmp_path / "moa-s0"
    shutil.copytree(RESNET_18 / "moa-s0", run)
    with pytest.raises(ValueError, match="'pruner-s0' is not a run under"):
        network_report.report(tmp_path, against="pruner-s0")
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "device_idle": None}))
    assert math.isnan(network_report.report(tmp_path)[0]["idle"])  # not logged: n/a
    (run / "summary.json").write_text(json.dumps({k: v for k, v in summary.items() if k != "cost_model"}))
    with pytest.raises(ValueError, match=r"moa-s0/summary.json: no 'cost_model'"):
        network_report.report(tmp_path)
    (run / "summary.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"moa-s0/summary.json: not a readable JSON file"):
        network_report.report(tmp_path)
    (run / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "resnet_18-retime.json").write_text(json.dumps({"tuned": {"runs/x/moa-s0": {"tuned_kernels": 19}}}))
    with pytest.raises(ValueError, match=r"resnet_18-retime.json: the entry of 'runs/x/moa-s0' has no 'ms'"):
        network_report.report(tmp_path)
    (tmp_path / "resnet_18-retime.json").write_text(json.dumps({"untuned_ms": 3.0}))
    with pytest.raises(ValueError, match=r"resnet_18-retime.json: no 'tuned'"):
        network_report.report(tmp_path)
    (tmp_path / "resnet_18-retime.json").unlink()
    (run / "tuning_curve.csv").unlink()
    with pytest.raises(ValueError, match="moa-s0: no tuning_curve.csv"):
        network_report.report(tmp_path)
