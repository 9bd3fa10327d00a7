"""FillRule: a pipelined task's batch grows until its run on the device covers the host's next job, and
never shrinks."""

import pytest

from bridge.fill_rule import FillRule


def test_the_batch_grows_to_cover_the_host_job_at_most_twofold_a_round():
    rule = FillRule(16, 64)
    assert rule.next(16) == 16  # nothing observed yet
    rule.observe_device(1.6, 16)  # 0.1 s a trial on the device
    assert rule.next(16) == 16  # no job timed yet
    rule.observe_job(5.0)  # the host's search and build of a batch took 5 s: 50 trials would cover it
    assert rule.next(16) == 32  # at most twice the current batch
    assert rule.next(32) == 50
    rule.observe_job(9.0)
    assert rule.next(50) == 64  # capped at the limit
    rule.observe_job(0.5)  # a cheap job does not shrink it: the loop's own time between batches stays
    assert rule.next(64) == 64
    assert rule.next(60) == 64  # nor does a batch handed out short (a straggler left building)


def test_off_when_the_limit_is_not_above_the_base():
    for limit in (0, 8, 16):
        rule = FillRule(16, limit)
        rule.observe_device(1.0, 16)
        rule.observe_job(100.0)
        assert rule.next(16) == 16


def test_a_batch_without_results_or_time_is_ignored():
    rule = FillRule(4, 32)
    rule.observe_device(0.4, 4)
    rule.observe_device(0.0, 4)
    rule.observe_device(1.0, 0)
    rule.observe_job(1.0)
    assert rule.device_rate == pytest.approx(0.1) and rule.next(4) == 8


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="fill_device=-1"):
        FillRule(16, -1)
    with pytest.raises(ValueError, match="trials per round 0"):
        FillRule(0, 64)
