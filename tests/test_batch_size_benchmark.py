"""benchmarks/batch_size.py: a real sweep on synthetic shards (2 batch sizes x 2 schedules, 2 s fits on
the CPU), and its summary (seed-mean curves, target, winner rule) on hand-made validation curves."""

import json

import pytest
from benchmark_files import load_benchmark, small_shards

bs = load_benchmark("batch_size")


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return small_shards(tmp_path_factory.mktemp("shards"))


def test_sweep_trains_every_config_with_monotone_clocks(shards, tmp_path, capsys):
    out_json = tmp_path / "bs.json"
    argv = ["--shards", str(shards), "--batch-sizes", "64", "128", "--lr-scaling", "none", "linear", "--seconds", "2",
            "--accelerator", "cpu", "--warmup-steps", "1", "--json", str(out_json)]  # fmt: skip
    out = bs.main(argv)
    assert json.loads(out_json.read_text())["summary"].keys() == out["summary"].keys()
    assert list(out["summary"]) == ["b64 none", "b128 none", "b64 linear", "b128 linear"]
    assert out["skipped"] == [] and len(out["runs"]) == 4
    per_step, best = {}, {}
    for run in out["runs"]:
        # the schedule scales the config's lr (7e-4 at batch 512) by batch / 512
        factor = run["batch_size"] / 512 if run["schedule"] == "linear" else 1.0
        assert run["lr"] == pytest.approx(7e-4 * factor) and not run["diverged"]
        h = run["history"]
        assert len(h) >= 3, run
        for field in ("train_s", "wall_s", "records", "step", "epoch"):
            values = [v[field] for v in h]
            assert all(a < b for a, b in zip(values, values[1:])), (field, values)
        assert all(0 < v["train_s"] < v["wall_s"] for v in h)  # validation time is left out of train_s
        assert all(0.0 <= v["pairwise"] <= 1.0 and 0.0 < v["peak1"] <= 1.0 for v in h)
        assert [v["epoch"] for v in h] == list(range(len(h)))  # validated every epoch
        # every epoch is the whole train split; the clock may stop the last one part-way
        assert [v["records"] for v in h[:-1]] == [(i + 1) * run["train_records"] for i in range(len(h) - 1)]
        assert h[-2]["records"] < h[-1]["records"] <= len(h) * run["train_records"]
        assert 2.0 <= run["train_s"] < 4.0  # stopped on the training clock, not before
        best[(run["batch_size"], run["schedule"])] = max(v["pairwise"] for v in h)
        per_step[run["batch_size"]] = h[-1]["records"] / h[-1]["step"]
    # it learns within 2 s of training (random ranking: 0.5); on these small synthetic tasks not every
    # config does yet, so this checks the best of them
    assert max(best.values()) > 0.6 and min(best.values()) > 0.5, best
    # whole tasks (~43 train records each) are packed up to the batch size
    assert per_step[64] <= 64 < per_step[128] <= 128

    rows = out["summary"]
    assert out["target_pairwise"] == pytest.approx(max(r["best_pairwise"] for r in rows.values()) - 0.005)
    reached = {k: r["train_s_to_target"] for k, r in rows.items() if r["train_s_to_target"] is not None}
    assert out["winner"] == min(reached, key=reached.get)
    for r in rows.values():
        assert r["best_pairwise"] == max(r["curve"]["pairwise"])
        assert r["train_s_to_best"] <= r["wall_s_to_best"] and r["records_per_s"] > 0
    printed = capsys.readouterr().out
    assert f"winner: {out['winner']}" in printed and "b128 linear" in printed


def _run(batch_size: int, schedule: str, seed: int, curve: list[float], diverged: bool = False) -> dict:
    """A fit record validated once a second of training (wall: +0.1 s per validation)."""
    history = [{"train_s": i + 1.0, "wall_s": 1.1 * (i + 1), "pairwise": p, "peak1": p} for i, p in enumerate(curve)]
    return {"batch_size": batch_size, "schedule": schedule, "lr": 7e-4, "seed": seed, "diverged": diverged,
            "records_per_s": 1000.0, "history": history}  # fmt: skip


def test_summary_rule_on_hand_made_curves():
    runs = [
        _run(512, "none", 0, [0.70, 0.80, 0.85, 0.86]),
        _run(512, "none", 1, [0.72, 0.82, 0.87]),  # shorter: the mean curve stops at 3 points
        _run(1024, "none", 0, [0.84, 0.858, 0.83, 0.83]),  # first within 0.005 of the best mean (0.862)
        _run(2048, "none", 0, [0.80, 0.81, 0.82, 0.83]),  # never within 0.005
        _run(4096, "none", 0, [0.90]),  # best mean (0.862) and first there, but a seed diverged: cannot win
        _run(4096, "none", 1, [0.824], diverged=True),
    ]
    rows, target, winner = bs.summarize(runs, tolerance=0.005)
    b512 = rows["b512 none"]
    assert b512["validations"] == 3 and b512["curve"]["pairwise"] == pytest.approx([0.71, 0.81, 0.86])
    assert b512["best_pairwise"] == pytest.approx(0.86) and b512["best_pairwise_seed_std"] == pytest.approx(0.005)
    assert b512["train_s_to_best"] == 3.0 and b512["wall_s_to_best"] == pytest.approx(3.3)
    assert target == pytest.approx(0.862 - 0.005)
    assert rows["b1024 none"]["train_s_to_target"] == 2.0 and b512["train_s_to_target"] == 3.0
    assert rows["b2048 none"]["train_s_to_target"] is None
    assert rows["b4096 none"]["diverged"] == 1 and rows["b4096 none"]["train_s_to_target"] == 1.0
    assert winner == "b1024 none"
    # trailing means over 2 validations: only the (diverged) one-point b4096 curve keeps a best >= 0.857
    rows, target, winner = bs.summarize(runs, tolerance=0.005, smooth=2)
    assert rows["b1024 none"]["curve"]["pairwise"] == pytest.approx([0.84, 0.849, 0.844, 0.83])
    assert rows["b512 none"]["best_pairwise"] == pytest.approx(0.835)
    assert target == pytest.approx(0.857) and winner is None
