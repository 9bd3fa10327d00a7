"""The host's CPU seconds (`bridge.host_cpu`): this process and its children, live and ended, from /proc."""

import subprocess
import sys
import time

import pytest

from bridge.host_cpu import children, cpu_seconds, host_seconds

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="read from /proc")

BURN = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass\n"


def test_a_childs_cpu_counts_while_it_runs_and_after_it_ended():
    before = host_seconds()
    child = subprocess.Popen([sys.executable, "-c", BURN.format(s=0.8) + "time.sleep(30)"])
    try:
        deadline = time.monotonic() + 30
        while cpu_seconds(child.pid) < 0.8 and time.monotonic() < deadline:  # burning, then asleep
            time.sleep(0.05)
        assert child.pid in children()
        assert cpu_seconds(child.pid) >= 0.75
        alive = host_seconds()
        assert alive - before >= 0.75  # a live child's seconds, read from its own stat
    finally:
        child.kill()
        child.wait()  # reaped: its seconds move into this process's cutime/cstime
    assert child.pid not in children() and cpu_seconds(child.pid) == 0.0
    assert host_seconds() >= alive - 0.02  # not lost when it ended


def test_this_processs_own_threads_count():
    before = host_seconds()
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
    assert host_seconds() - before >= 0.25


def test_a_grandchild_that_a_live_worker_reaped_counts():
    """A worker's own subprocesses (the runner's link step, the builder's `tar`), once the worker has
    waited for them, count while the worker still runs."""
    before = host_seconds()
    code = (
        "import subprocess, sys, time\n"
        f"subprocess.run([sys.executable, '-c', {BURN.format(s=0.6)!r}], check=True)\n"
        "print('reaped', flush=True)\n"
        "time.sleep(30)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "reaped"
        assert host_seconds() - before >= 0.55  # the grandchild's seconds, through the live child's cutime
    finally:
        child.kill()
        child.wait()
