"""bridge.curve: where a run's device idle time fell, and how busy its batches kept the build workers, on
curve rows as a run writes them."""

import math

import pytest

from bridge.curve import (
    build_bound_idle,
    build_busy,
    column_total,
    deferred_picks,
    device_idle_parts,
    device_idle_share,
    drafting_share,
    drafting_wall_share,
    host_cpu_busy,
    idle_between_batches,
    refused_picks,
)
from bridge.search_log import SearchLog
from bridge.span_union import SpanUnion


def rows(*rounds):
    """Curve rows from (elapsed_s, run_s, drafted, prebuild_s) tuples; the other columns NaN."""
    out = []
    for elapsed, run, drafted, prebuild in rounds:
        row = dict.fromkeys(SearchLog.FIELDS, math.nan)
        row.update(task="t", elapsed_s=elapsed, run_s=run, drafted=drafted, prebuild_s=prebuild)
        out.append(row)
    return out


def test_a_pipelined_run_charges_a_draft_to_the_round_that_waited_for_it():
    # round 1: 10 s before its 2 s run; round 2 waited 3 s; round 3 waited 7 s on the draft that
    # round 4 was picked from (pipelined: round 4's search ran during round 3); round 4 waited 1 s
    run = rows((12, 2, 1, math.nan), (17, 2, 0, 4.0), (26, 2, 0, 4.0), (29, 2, 1, 4.0))
    parts = device_idle_parts(run)
    assert parts == pytest.approx({"before_first": 10 / 29, "drafts": 7 / 29, "other": 4 / 29})
    assert sum(parts.values()) == pytest.approx(device_idle_share(run))


def test_a_networks_runs_are_placed_by_their_starts_not_by_when_their_results_were_taken_up():
    # three tasks: MetaSchedule hands each a batch in turn (runs at 10-14, 20-23 and 30-34 s) and takes
    # the results up only at 40 s, so the rows come at 40-41 s; then task 1's second batch (44-46 s)
    run = rows((40.0, 4, 1, math.nan), (40.5, 3, 1, math.nan), (41.0, 4, 1, math.nan), (47.0, 2, 0, 9.0))
    for row, start in zip(run, (10.0, 20.0, 30.0, 44.0)):
        row["run_start_s"] = start
    parts = device_idle_parts(run)
    # before the first run 10 s; gaps of 6 and 7 s before the batches of tasks 2 and 3, which waited on
    # their first drafts, and of 10 s before task 1's second (picked beside the runs); 1 s after the last
    assert parts == pytest.approx({"before_first": 10 / 47, "drafts": 13 / 47, "other": 11 / 47})
    assert sum(parts.values()) == pytest.approx(device_idle_share(run))
    assert idle_between_batches(run) == pytest.approx(1 - 13 / 37)  # from the first run's start
    failed = rows((41.5, 0, 0, math.nan))[0]  # a batch whose picks all failed to build: never ran, no start
    assert device_idle_parts([*run[:3], failed, run[3]]) == pytest.approx(parts)
    unlogged = rows((41.5, math.nan, 0, math.nan))[0]  # no run logged (NaN): the same
    assert device_idle_parts([*run[:3], unlogged, run[3]]) == pytest.approx(parts)
    del run[2]["run_start_s"]  # a curve without the column: the rows' own order, as before
    assert device_idle_parts(run)["before_first"] == pytest.approx(36 / 47)


def test_a_draft_is_charged_by_the_order_of_the_runs_not_of_the_rows():
    # pipelined rows written out of run order: the run at 20-24 s waited on the draft of the batch run
    # after it (30-32 s), though the row written after it is the run at 10-14 s
    run = rows((40, 4, 0, 5.0), (41, 4, 0, 5.0), (50, 2, 1, 5.0))
    for row, start in zip(run, (20.0, 10.0, 30.0)):
        row["run_start_s"] = start
    assert device_idle_parts(run) == pytest.approx({"before_first": 10 / 50, "drafts": 6 / 50, "other": 24 / 50})


def test_idle_between_batches_counts_from_the_first_batchs_start():
    # the first batch starts at 12 - 2 = 10 s; from then to 29 s the device ran 4 x 2 s
    run = rows((12, 2, 1, math.nan), (17, 2, 0, 4.0), (26, 2, 0, 4.0), (29, 2, 1, 4.0))
    assert idle_between_batches(run) == pytest.approx(1 - 8 / 19)
    parts = device_idle_parts(run)  # the same idle time, less the first round's, over the shorter span
    assert idle_between_batches(run) == pytest.approx((parts["drafts"] + parts["other"]) * 29 / 19)
    assert idle_between_batches(rows((5, 5, 1, math.nan), (9, 4, 0, math.nan))) == 0.0
    assert math.isnan(idle_between_batches([]))


def test_a_run_searched_in_turn_charges_a_draft_to_its_own_round():
    run = rows((12, 2, 1, math.nan), (17, 2, 0, math.nan), (26, 2, 1, math.nan), (29, 2, 0, math.nan))
    assert device_idle_parts(run) == pytest.approx({"before_first": 10 / 29, "drafts": 7 / 29, "other": 4 / 29})


def test_evolution_has_no_drafts_and_no_rows_give_nan():
    run = rows((5, 1, math.nan, math.nan), (9, 2, math.nan, math.nan))  # MetaSchedule's search: no drafts
    assert device_idle_parts(run) == pytest.approx({"before_first": 4 / 9, "drafts": 0.0, "other": 2 / 9})
    assert all(math.isnan(v) for v in device_idle_parts([]).values())


def test_a_span_union_counts_overlaps_once_whatever_the_order_spans_come_in():
    """Four drafts: two at once (10-30 s and 20-40 s), one inside another (25-28 s), one apart (50-60
    s), added out of order as a network's rows take them up; an empty or reversed span adds nothing."""
    union = SpanUnion()
    for start, end in [(50, 60), (20, 40), (25, 28), (10, 30), (5, 5), (70, 65)]:
        union.add(start, end)
    assert union.seconds == pytest.approx(30 + 10)  # 10-40 s and 50-60 s
    union.add(40, 50)  # touching both: one span, 10-60 s
    assert union.seconds == pytest.approx(50)


def test_the_wall_share_is_the_last_rows_union_and_the_draft_seconds_count_each_draft():
    run = rows(*((e, 1, 1, math.nan) for e in (31, 41, 42, 61)), (100, 1, 0, math.nan))
    for row, seconds, wall in zip(run, [20, 20, 3, 10, 0.5], [20, 30, 30, 40, 40]):
        row.update(draft_s=seconds, draft_wall_s=wall)  # the last row drafted nothing: a little draft_s of its search
    assert drafting_share(run) == pytest.approx(53.5 / 100)  # every draft second, the last row's too
    assert drafting_wall_share(run) == pytest.approx(40 / 100)
    run[-1]["draft_wall_s"] = math.nan  # a curve from before the column, or a resumed one whose first part was
    assert math.isnan(drafting_wall_share(run)) and math.isnan(drafting_wall_share([]))
    evolution = rows((5, 1, math.nan, math.nan))  # MetaSchedule's search: no drafts, whatever the column says
    evolution[0]["draft_wall_s"] = 0.0
    assert math.isnan(drafting_wall_share(evolution))


def test_build_busy_is_the_median_share_of_the_workers_time_a_batch_kept_busy():
    run = rows((12, 2, 1, math.nan), (17, 2, 0, 4.0), (26, 2, 0, 5.0), (29, 2, 0, 2.0))
    run[0].update(build_s=1.0, build_work_s=1.5)  # built in the loop: 1.5 of 2 x 1.0 s
    for row, work in zip(run[1:], (2.0, 9.0, 3.2)):  # built ahead: of 2 x 4, 2 x 5 and 2 x 2 s
        row["build_work_s"] = work
    # shares 0.75, 0.25, 0.9, 0.8: median 0.775
    assert build_busy(run, workers=2) == pytest.approx(0.775)
    assert math.isnan(build_busy(run, workers=0)) and math.isnan(build_busy(rows((5, 1, 0, 2.0)), workers=2))


def test_deferred_picks_sum_over_the_batches_built_ahead():
    run = rows((12, 2, 1, math.nan), (17, 2, 0, 4.0), (26, 2, 0, 5.0))  # round 1 built in the loop: NaN
    run[1]["deferred"], run[2]["deferred"] = 2.0, 1.0
    assert deferred_picks(run) == 3 and deferred_picks(run[:1]) == 0
    del run[2]["deferred"]  # a curve written before the column: counts as none
    assert deferred_picks(run) == 2


def test_refused_picks_sum_over_every_batch():
    run = rows((12, 2, 1, math.nan), (17, 2, 0, 4.0), (26, 2, 0, 5.0))
    for row, refused in zip(run, (3.0, 0.0, 2.0)):
        row["refused"] = refused
    assert refused_picks(run) == 5 and refused_picks(run[1:2]) == 0
    del run[0]["refused"]  # a curve written before the column: counts as none
    assert refused_picks(run) == 2


def test_the_builds_bound_the_idle_share_of_the_rounds_after_the_first():
    # built ahead: round 2 ran 2 s and took 4 s to build (at least 4 s), round 3 ran 2 s and built in 1
    # (at least 2 s); built in the loop, round 4's 1 s build and 2 s run (at least 3 s); round 1 left out
    run = rows((12, 2, 1, math.nan), (17, 2, 0, 4.0), (26, 2, 0, 1.0), (29, 2, 0, math.nan))
    run[3]["build_s"] = 1.0
    assert build_bound_idle(run) == pytest.approx(1 - 6 / 9)
    assert build_bound_idle(run[:3]) == pytest.approx(1 - 4 / 6)
    assert build_bound_idle(rows((5, 2, 0, 1.0), (9, 3, 0, 1.5))) == 0.0  # every build shorter than its run
    assert math.isnan(build_bound_idle(run[:1])) and math.isnan(build_bound_idle([]))


def test_column_total_sums_the_rows_that_logged_it_and_is_nan_when_none_did():
    curve = [{"learn_s": 1.5}, {"learn_s": math.nan}, {}, {"learn_s": 0.25}]
    assert column_total(curve, "learn_s") == 1.75
    assert math.isnan(column_total(curve, "learn_wait_s")) and math.isnan(column_total([], "learn_s"))


def test_host_cpu_busy_weighs_each_row_by_its_own_wall_time_and_skips_rows_without_it():
    """A resumed run's curve: an older run's rows without the columns (read back as NaN) move the
    clock on but count neither way; a row's wall time is its `elapsed_s` less the row's before."""
    old = rows((10.0, 1.0, 0, math.nan))  # an earlier run, before host_cpu_s was logged
    new = rows((15.0, 1.0, 0, math.nan), (20.0, 1.0, 0, math.nan), (26.0, 1.0, 0, math.nan))
    for row, cpu, cores in zip(new, (5.0, 10.0, math.nan), (2.0, 2.0, 2.0)):
        row.update(host_cpu_s=cpu, host_cores=cores)
    assert host_cpu_busy(old + new) == pytest.approx((5.0 + 10.0) / ((5.0 + 5.0) * 2.0))  # the NaN row left out
    new[1]["host_cores"] = 0.0  # no cores known: the row is left out
    assert host_cpu_busy(old + new) == pytest.approx(5.0 / (5.0 * 2.0))
    assert math.isnan(host_cpu_busy(old)) and math.isnan(host_cpu_busy([]))
