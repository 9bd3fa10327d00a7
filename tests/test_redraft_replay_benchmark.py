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


def test_a_drafting_share_holds_stall_drafts_and_each_task_drafts_first():
    bests = [5.0, 4.0] + [4.0] * 14
    starts = [10.0 * i for i in range(16)]  # a round every 10 s; drafts of 10 s each
    # share 0.15: the second draft waits until 2 x 10 <= 0.15 x (t + 10), t >= 123.3 s (round 13)
    held = redraft_replay.replay(bests, 3, backoff=False, starts_s=starts, draft_s=10.0, share=0.15)
    assert held == 2
    assert redraft_replay.replay(bests, 3, backoff=False, starts_s=starts, draft_s=10.0, share=1.0) == 5
    # two tasks, one rule each: both draft first, whatever the share
    tasks = ["a", "b"] * 8
    assert redraft_replay.replay(bests, 3, backoff=False, tasks=tasks, starts_s=starts, draft_s=50.0, share=0.15) == 2


def test_a_curve_file_is_counted_and_evolution_curves_are_left_out(tmp_path, capsys):
    def write(name, rows):
        with open(tmp_path / name, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=SearchLog.FIELDS)
            w.writeheader()
            for r in rows:
                w.writerow({k: r.get(k, "nan") for k in SearchLog.FIELDS})

    pruner = [
        {
            "task": "t",
            "best_us": b,
            "drafted": int(i in (0, 4)),
            "draft_scored": 512 if i in (0, 4) else 0,
            "draft_s": 5.0 if i in (0, 4) else 0.0,
            "elapsed_s": 10.0 * (i + 1),
        }
        for i, b in enumerate([5.0, 4.0, 4.0, 4.0, 4.0, 3.0])
    ]
    write("pruner-s0.csv", pruner)
    write("xgb-s0.csv", [{"task": "t", "best_us": 5.0, "drafted": "nan", "elapsed_s": 1.0}] * 4)
    rows = redraft_replay.main(["--curves", f"[{tmp_path}/*.csv]", "--stall", "3"])
    assert [(r["curve"].split("/")[-1], r["rounds"], r["drafts"], r["stall"]) for r in rows] == [
        ("pruner-s0.csv", 6, 2, 2)
    ]
    # 10 s of drafting in 60 s: 17%; the share holds the replay's second draft (5 + 5 > 0.15 x (40 + 5))
    assert rows[0]["draft_share"] == 10.0 / 60.0 and rows[0]["share"] == 1
    assert "pruner-s0.csv | 6 | 2 | 17% | 2 | 2 | 1 | 8% |" in capsys.readouterr().out
