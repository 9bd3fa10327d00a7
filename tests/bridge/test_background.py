"""bridge.background.BackgroundJobs: jobs run in turn on their thread; `wait` waits for all and raises a failure."""

import threading
import time

import pytest

from bridge.background import BackgroundJobs


def test_jobs_run_in_the_order_submitted_and_submit_does_not_wait():
    jobs, done, gate = BackgroundJobs("test"), [], threading.Event()
    jobs.submit(lambda: (gate.wait(30), done.append(1)))
    start = time.perf_counter()
    for i in (2, 3):
        jobs.submit(lambda i=i: done.append(i))
    assert time.perf_counter() - start < 1.0 and jobs.running and done == [] and len(jobs.pending()) == 3
    gate.set()
    jobs.wait()
    assert done == [1, 2, 3] and not jobs.running and jobs.pending() == [] and jobs.waited_s >= 0.0


def test_wait_raises_the_first_failure_once_and_later_jobs_still_run():
    jobs, done = BackgroundJobs("test"), []

    def fail(message):
        raise RuntimeError(message)

    jobs.submit(lambda: fail("first"))
    jobs.submit(lambda: fail("second"))
    jobs.submit(lambda: done.append("after"))
    with pytest.raises(RuntimeError, match="first"):
        jobs.wait()
    assert done == ["after"]
    jobs.wait()  # raised once: nothing left
