"""python -m bridge.evaluate on really measured llvm records (the tiny fixture, featurized) with a
model trained by train.py; TenSet's top-k score against a hand-computed case."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bridge.evaluate import evaluate, main, tenset_top_k
from bridge.export import ArtifactError, export_checkpoint
from data.batch import make_batch
from data.shards import read_shards

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="module")
def measured_shards(tmp_path_factory):
    from data.featurize import main as featurize

    out = tmp_path_factory.mktemp("tiny_shards")
    assert (
        featurize([str(FIXTURES / "tiny_records" / "llvm-sapphirerapids-2c"), "--out", str(out), "--workers", "1"]).kept
        >= 40
    )
    return out


def test_cli_scores_every_valid_record_and_writes_json(checkpoints, measured_shards, tmp_path, capsys):
    artifact = export_checkpoint(checkpoints["PAMModule"], tmp_path / "pam.pt")
    out = tmp_path / "metrics.json"
    main([str(tmp_path / "pam.pt"), "--shards", str(measured_shards), "--json", str(out), "--worst", "1"])
    result = json.loads(out.read_text())
    data = read_shards(measured_shards)
    valid = np.flatnonzero(np.isfinite(data.latency))
    assert result["records"] == len(valid) and result["tasks"] == 2 and result["net_class"] == "PAMNet"
    assert result["failed_dropped"] == data.num_records - len(valid)
    metrics = result["metrics"]
    assert set(metrics) == {
        "pairwise_acc",
        "kendall_tau",
        "peak@1",
        "peak@5",
        "top1_recall",
        "top5_recall",
        "tenset_top@1",
        "tenset_top@5",
    }
    assert "tenset_top@k" in result["definitions"] and "peak@k" in result["definitions"]
    printed = capsys.readouterr().out
    assert "pairwise_acc" in printed and "the 1 tasks ranked worst" in printed

    # the same scores through the tuning side's batch builder, record by record
    with torch.no_grad():
        scores = np.array(
            [
                float(
                    artifact.net(
                        make_batch(
                            [data.stmt[data.stmt_ptr[i] : data.stmt_ptr[i + 1]]],
                            data.task_tags[data.record_task[i]][None],
                            data.gemm[i][None],
                        )
                    )
                )
                for i in valid
            ]
        )
    # pairwise accuracy by its definition (docs/pruner.md section 6), pair by pair, record-weighted over tasks
    weighted = 0.0
    for t in np.unique(data.record_task[valid]):
        mine = data.record_task[valid] == t
        s, y = scores[mine], data.label[valid][mine]
        pairs = [(i, j) for i in range(len(s)) for j in range(i + 1, len(s))]
        weighted += len(s) * np.mean([(s[i] > s[j]) == (y[i] > y[j]) for i, j in pairs])
    assert metrics["pairwise_acc"] == pytest.approx(weighted / len(valid), abs=1e-6)
    # per task: the same definition on each task alone; their record-weighted mean is the whole
    per_task = {row["task"]: row for row in result["per_task"]}
    assert set(per_task) == {data.task_key[t] for t in np.unique(data.record_task[valid])}
    for t in np.unique(data.record_task[valid]):
        mine = data.record_task[valid] == t
        s, y = scores[mine], data.label[valid][mine]
        pairs = [(i, j) for i in range(len(s)) for j in range(i + 1, len(s))]
        row = per_task[data.task_key[t]]
        assert row["records"] == mine.sum() and row["name"] == data.task_name[t]
        assert row["pairwise_acc"] == pytest.approx(
            np.mean([(s[i] > s[j]) == (y[i] > y[j]) for i, j in pairs]), abs=1e-6
        )
        assert row["peak@1"] == pytest.approx(y[np.argmax(s)] / y.max(), abs=1e-6)
    worst = min(result["per_task"], key=lambda r: r["pairwise_acc"])["task"]
    assert worst in printed
    # TenSet's top-1 from the same scores
    expected = tenset_top_k(scores, data.latency[valid], data.record_task[valid], data.task_weight, 1)
    assert metrics["tenset_top@1"] == pytest.approx(expected)


def test_tenset_top_k_is_not_the_average_peak_score():
    scores = np.array([0.1, 0.9, 0.5, 1.0, 0.0])
    latency = np.array([1.0, 2.0, 4.0, 3.0, 6.0])
    task = np.array([0, 0, 0, 1, 1])
    weight = np.array([2.0, 1.0])
    # task 0 picks latency 2 (best 1), task 1 picks its best 3: (2*1 + 3) / (2*2 + 3)
    assert tenset_top_k(scores, latency, task, weight, 1) == pytest.approx(5 / 7)
    assert tenset_top_k(scores, latency, task, weight, 3) == pytest.approx(1.0)
    from pruner_models.metrics import PeakScore

    peak = PeakScore(k=1)
    labels = torch.tensor([1.0, 0.5, 0.25, 1.0, 0.5])
    peak.update(torch.tensor(scores), labels, torch.tensor(task))
    assert float(peak.compute()) == pytest.approx((3 * 0.5 + 2 * 1.0) / 5)  # 0.7, not 5/7


def test_checkpoints_score_too_and_bad_input_is_named(checkpoints, measured_shards, tmp_path):
    result = evaluate(checkpoints["MLPModule"], measured_shards, ks=[1])
    assert result["net_class"] == "MLPNet" and set(result["metrics"]) >= {"peak@1", "tenset_top@1"}
    with pytest.raises(ArtifactError, match="nothing.pt"):
        evaluate(tmp_path / "nothing.pt", measured_shards)
    with pytest.raises(ValueError, match="ks="):
        evaluate(checkpoints["MLPModule"], measured_shards, ks=[0])
