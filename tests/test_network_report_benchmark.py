"""benchmarks/network_report.py on the ResNet-18 runs that came back from the GPU: each line agrees
with its run's summary.json and curve, a retimed run takes the retime's compiled time, and bad
folders are refused by name."""

import json
import math
import shutil
from pathlib import Path

import pytest

from benchmarks import network_report
from bridge.curve import drafting_share
from bridge.search_log import read_rounds

RESNET_18 = Path(__file__).resolve().parents[1] / "benchmarks/results/network_e2e/resnet_18"


def test_each_run_gets_its_summary_and_curve_figures(tmp_path, capsys):
    lines = network_report.main([str(RESNET_18), "--against", "pruner-s0", "--json", str(tmp_path / "r.json")])
    runs = sorted(p.name for p in RESNET_18.iterdir() if (p / "summary.json").is_file())
    assert [line["run"] for line in lines] == runs and {"pruner-s0", "xgb-s0", "moa-s0"} <= set(runs)
    assert json.loads((tmp_path / "r.json").read_text())[0]["run"] == runs[0]
    retime = json.loads((RESNET_18 / "resnet_18-retime.json").read_text())["tuned"]
    retimed = {Path(k).name: v for k, v in retime.items()}
    by_run = {line["run"]: line for line in lines}
    for name, line in by_run.items():
        summary = json.loads((RESNET_18 / name / "summary.json").read_text())
        rows = read_rounds(RESNET_18 / name / "tuning_curve.csv")
        assert line["trials"] == summary["total_trials"] == rows[-1]["total_trials"]
        if name in retimed:  # compiled again after the fix: the run's own compile missed its schedules
            assert line["retimed"] and line["compiled_ms"] == retimed[name]["ms"] != summary["end_to_end_ms"]
        else:
            assert not line["retimed"] and line["compiled_ms"] == summary["end_to_end_ms"]
            assert (line["tuned_kernels"], line["kernels"]) == (summary["tuned_kernels"], summary["kernels"])
        first = [r for r in rows if r["round"] == 1]
        assert len(first) == len(summary["tasks"]) or name.startswith("xgb")  # XGB never reached five tasks
        assert line["first_rounds_s"] == max(r["elapsed_s"] for r in first) <= rows[-1]["elapsed_s"]
        assert line["against"] == pytest.approx(line["compiled_ms"] / by_run["pruner-s0"]["compiled_ms"])
        if summary["search"] == "draft-then-verify":
            assert line["drafting"] == pytest.approx(drafting_share(rows)) and line["first_drafts_s"] > 0
        else:
            assert math.isnan(line["drafting"]) and math.isnan(line["first_drafts_s"])
    assert by_run["pruner-s0"]["against"] == 1.0 and by_run["xgb-s0"]["against"] > 3  # the 3.40x of the docs
    assert by_run["xgb-s0"]["estimated_ms"] is None  # it never reached five tasks: no total
    printed = capsys.readouterr().out
    assert "0.685 retimed" in printed and "14 of 19" in printed


def test_bad_folders_and_runs_are_named(tmp_path):
    with pytest.raises(ValueError, match="no run folder"):
        network_report.report(tmp_path)
    shutil.copytree(RESNET_18 / "moa-s0", tmp_path / "moa-s0")
    with pytest.raises(ValueError, match="'pruner-s0' is not a run under"):
        network_report.report(tmp_path, against="pruner-s0")
    (tmp_path / "moa-s0" / "tuning_curve.csv").unlink()
    with pytest.raises(ValueError, match="moa-s0: no tuning_curve.csv"):
        network_report.report(tmp_path)
