"""benchmarks/redraft_replay.py: a re-draft rule replayed on a tuning curve's best latencies."""

import csv

from benchmark_files import load_benchmark

from bridge.search_log import SearchLog

redraft_replay = load_benchmark("redraft_replay")


def test_backoff_drafts_less_on_a_settled_task():
    bests = [5.0, 4.0] + [4.0] * 14  # a new best in round 2, then 14 rounds without one
    # stall 3: the first draft, then after rounds 5, 8, 11, 14 -> 5; with backoff after 5, 11 -> 3
    assert redraft_replay.replay(bests, 3, backoff=False) == 5
    assert redraft_replay.replay(bests, 3, backoff=True) == 3
    assert redraft_replay.replay(bests, 0, backoff=False) == 1  # stall 0: only the first draft


def test_a_curve_file_is_counted_and_evolution_curves_are_left_out(tmp_path, capsys):
    def write(name, rows):
        with open(tmp_path / name, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=SearchLog.FIELDS)
            w.writeheader()
            for r in rows:
                w.writerow({k: r.get(k, "nan") for k in SearchLog.FIELDS})

    pruner = [
        {"best_us": b, "drafted": int(i in (0, 4)), "draft_scored": 512 if i in (0, 4) else 0}
        for i, b in enumerate([5.0, 4.0, 4.0, 4.0, 4.0, 3.0])
    ]
    write("pruner-s0.csv", pruner)
    write("xgb-s0.csv", [{"best_us": 5.0, "drafted": "nan"}] * 4)
    rows = redraft_replay.main(["--curves", f"[{tmp_path}/*.csv]", "--stall", "3"])
    assert [(r["curve"].split("/")[-1], r["rounds"], r["drafts"], r["stall"]) for r in rows] == [
        ("pruner-s0.csv", 6, 2, 2)
    ]
    assert "pruner-s0.csv | 6 | 2 | 2 |" in capsys.readouterr().out
