"""benchmarks/psa_quality.py --pool-workloads on real shards of two work dirs of one workload."""

import csv
import json
import shutil

import numpy as np
from benchmark_files import REPO, load_benchmark

from data.featurize import main as featurize_main
from data.shards import read_shards

psa_quality = load_benchmark("psa_quality")
TASK = REPO / "tests" / "fixtures" / "tiny_records" / "llvm-sapphirerapids-2c" / "matmul_e87e4aed"


def two_runs_of_one_workload(tmp_path):
    """Work dirs `fast` and `slow` holding the same 24 schedules, `fast` measured at half the latency."""
    for name, scale in (("slow", 1.0), ("fast", 0.5)):
        folder = tmp_path / name
        folder.mkdir()
        shutil.copy(TASK / "database_workload.json", folder)
        lines = []
        for line in (TASK / "database_tuning_record.json").read_text().splitlines():
            row = json.loads(line)
            row[1][1] = [t * scale for t in row[1][1]]
            lines.append(json.dumps(row))
        (folder / "database_tuning_record.json").write_text("\n".join(lines) + "\n")
    featurize_main(
        [str(tmp_path / "slow"), str(tmp_path / "fast"), "--out", str(tmp_path / "shards"), "--workers", "1"]
    )
    return read_shards(tmp_path / "shards")


def test_pooled_labels_are_relative_to_the_best_of_every_run(tmp_path):
    data = two_runs_of_one_workload(tmp_path)
    assert data.num_tasks == 2
    group, label = psa_quality.pooled_groups(data)
    assert set(group.tolist()) == {0}  # one workload hash: one group
    fast = np.array(["fast" in str(data.task_key[t]) for t in data.record_task])
    ok = np.isfinite(data.latency)
    assert label[fast & ok].max() == 1.0
    # the slow run's records: at most half the pooled best (its own labels, per task, reach 1)
    assert label[~fast & ok].max() == np.float64(0.5) and data.label[~fast & ok].max() == 1.0
    assert np.all(label[~ok] == 0.0)

    out = tmp_path / "psa.csv"
    psa_quality.main(
        [str(tmp_path / "shards"), "--device", "h100", "--pool-workloads", "--random-seeds", "2", "--out", str(out)]
    )
    rows = {r["ranking"]: r for r in csv.DictReader(out.open())}
    assert {"PSA published", "PSA traffic", "PSA traffic-occupancy", "random"} <= set(rows)
    assert all(0.0 <= float(r["pairwise"]) <= 1.0 for r in rows.values())


def test_a_learned_model_is_ranked_beside_psa_as_the_evaluate_cli_scores_it(tmp_path):
    from bridge.evaluate import evaluate

    two_runs_of_one_workload(tmp_path)
    artifact = REPO / "bridge" / "weights" / "pam-cuda-sm_90a.pt"
    out = tmp_path / "ranked.csv"
    psa_quality.main(
        [
            str(tmp_path / "shards"),
            "--random-seeds",
            "2",
            "--artifacts",
            str(artifact),
            "--blend",
            "0",
            "100",
            "--out",
            str(out),
        ]
    )
    rows = {r["ranking"]: r for r in csv.DictReader(out.open())}
    model = rows["model pam-cuda-sm_90a"]
    # the blend rows: weight 0 ranks as the model (a heavy weight on CUDA records: the next test; on
    # these llvm records PSA ties a lot, one "thread" a program, so its row is only checked present)
    for metric in ("pairwise", "peak@1", "peak@5"):
        assert np.isclose(float(rows["model pam-cuda-sm_90a + 0 PSA"][metric]), float(model[metric]))
    assert 0.0 <= float(rows["model pam-cuda-sm_90a + 100 PSA"]["pairwise"]) <= 1.0
    # per task (not pooled), the benchmark's ranking of the model is the one `python -m bridge.evaluate` reports
    metrics = evaluate(artifact, str(tmp_path / "shards"))["metrics"]
    assert np.isclose(float(model["pairwise"]), metrics["pairwise_acc"])
    assert np.isclose(float(model["peak@1"]), metrics["peak@1"]) and np.isclose(
        float(model["peak@5"]), metrics["peak@5"]
    )


def test_per_workload_table_pools_each_workload(tmp_path):
    data = two_runs_of_one_workload(tmp_path)
    keep = np.isfinite(data.latency)
    device = psa_quality.get_device("h100")
    scores = psa_quality.scorings(data, device)
    table = psa_quality.per_workload(data, scores, keep)
    assert list(table) == [tmp_path.name]  # the folder above the work dirs names the workload
    row = table[tmp_path.name]
    assert row["records"] == int(keep.sum())
    # one workload: its table row is the pooled ranking over everything
    pooled = psa_quality.rankings(data, scores, 1, keep, pool=True)
    for name in ("PSA traffic-occupancy", "naive: grid x block"):
        assert np.isclose(row[name]["pairwise"], pooled[name][0]["pairwise"])


def test_the_blend_moves_from_the_model_to_psa_on_real_h100_records(tmp_path):
    """One shipped H100 task (43 valid records): weight 0 is the model's ranking, a huge weight is
    PSA's default formula (PAM only breaks PSA's ties), so the rows would differ if the blend ignored
    PSA or flipped its sign (log PSA ranks latency the other way round)."""
    task = REPO / "data" / "h100" / "cuda-sm_90a" / "fused_conv2d6_subtract4_divide5_multiply5_add10_relu3_b0dbc701"
    shutil.copytree(task, tmp_path / "w" / "run")
    featurize_main([str(tmp_path / "w" / "run"), "--out", str(tmp_path / "shards"), "--workers", "1"])
    out = tmp_path / "ranked.csv"
    artifact = REPO / "bridge" / "weights" / "pam-cuda-sm_90a.pt"
    psa_quality.main(
        [str(tmp_path / "shards"), "--device", "h100", "--random-seeds", "2", "--artifacts", str(artifact)]
        + ["--blend", "0", "1000", "--stage-latencies", "0", "1", "--out", str(out)]
    )
    rows = {r["ranking"]: {k: float(v) for k, v in r.items() if k != "ranking"} for r in csv.DictReader(out.open())}
    model, psa = rows["model pam-cuda-sm_90a"], rows["PSA traffic-occupancy"]
    assert abs(model["pairwise"] - psa["pairwise"]) > 0.02  # the two rankings differ here
    assert rows["model pam-cuda-sm_90a + 0 PSA"] == model
    heavy = rows["model pam-cuda-sm_90a + 1000 PSA"]
    assert abs(heavy["pairwise"] - psa["pairwise"]) < 0.005
    assert heavy["peak@1"] == psa["peak@1"] and heavy["peak@5"] == psa["peak@5"]
    # traffic-stages with no wait a stage is traffic-occupancy; with a wait that swamps the rest it ranks
    # by stages x waves alone, another ranking
    assert rows["PSA traffic-stages 0"] == psa
    assert rows["PSA traffic-stages 1"]["pairwise"] != psa["pairwise"]
    # --records: the same folder featurized here for PSA alone ranks every formula as its shards do
    psa_quality.main(
        [str(tmp_path / "w" / "run"), "--records", "--device", "h100", "--random-seeds", "2"]
        + ["--stage-latencies", "1", "--out", str(tmp_path / "records.csv")]
    )
    direct = {r["ranking"]: r for r in csv.DictReader((tmp_path / "records.csv").open())}
    for name in ("PSA published", "PSA traffic-occupancy", "PSA traffic-stages", "PSA traffic-stages 1"):
        assert {k: float(v) for k, v in direct[name].items() if k != "ranking"} == rows[name], name


def test_the_stage_wait_is_chosen_without_the_workload_it_is_scored_on():
    def metrics(x):
        return {"pairwise": x, "peak@1": x, "peak@5": x}

    # b and c prefer 7e-5 and a prefers 1e-4 strongly: left out, a gets the others' 7e-5; b and c
    # each get 1e-4, since a outweighs the one left beside it
    table = {
        "a": {"PSA traffic-stages 7e-05": metrics(0.5), "PSA traffic-stages 0.0001": metrics(0.9)},
        "b": {"PSA traffic-stages 7e-05": metrics(0.8), "PSA traffic-stages 0.0001": metrics(0.6)},
        "c": {"PSA traffic-stages 7e-05": metrics(0.7), "PSA traffic-stages 0.0001": metrics(0.6)},
    }
    for row in table.values():
        row["PSA traffic-occupancy"] = metrics(0.4)
    choice = psa_quality.choose_stage_latency(table, [7e-5, 1e-4])
    assert {w: c["chosen"] for w, c in choice.items()} == {"a": 7e-5, "b": 1e-4, "c": 1e-4}
    assert choice["a"]["held_out"] == metrics(0.5) and choice["b"]["held_out"] == metrics(0.6)
    assert choice["b"]["base"] == metrics(0.4)
