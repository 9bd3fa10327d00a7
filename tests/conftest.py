"""Suite-wide set-up."""

import concurrent.futures
import weakref
from pathlib import Path

import pytest
import torch

from bridge import background

_JOBS: weakref.WeakSet = weakref.WeakSet()  # every BackgroundJobs a test made, while it lives
_made = background.BackgroundJobs.__init__


def _record(self, name: str) -> None:
    _made(self, name)
    _JOBS.add(self)


background.BackgroundJobs.__init__ = _record


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """One intra-op thread: the tests' tensors are small, and on the shared 2-core box torch's
    OpenMP threads fight TVM's and the other test processes (steps get several times slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def background_jobs_end_with_their_test():
    """A cost model's training left running on its thread when a test ends (`background=True`, no
    `predict` or `save` after the last `update`) would run beside the next test of the process; torch's
    dynamo-disabled calls in it (the optimizer's step) and a `torch.export` there share torch.fx's
    unguarded annotation dict, and the export failed with KeyError 'custom' (2026-11-30). So each
    test's jobs end with it (at most a minute: a test may leave a job waiting on an event)."""
    yield
    pending = [job for jobs in list(_JOBS) for job in jobs.pending()]
    if pending:
        concurrent.futures.wait(pending, timeout=60)


@pytest.fixture
def make_builder():
    """`tvm_env.PooledLocalBuilder(**kwargs)`s whose worker processes end with the test
    (`PooledLocalBuilder.shutdown`), not whenever the garbage collector reaches them."""
    from tvm_env import PooledLocalBuilder

    made = []

    def make(**kwargs):
        made.append(PooledLocalBuilder(**kwargs))
        return made[-1]

    yield make
    for builder in made:
        builder.shutdown()


@pytest.fixture(scope="module")
def builder():
    """One `PooledLocalBuilder` (2 workers) for every tuning run of a module, so its worker processes
    start once; they end with the module."""
    from tvm_env import PooledLocalBuilder

    builder = PooledLocalBuilder(max_workers=2)
    yield builder
    builder.shutdown()


@pytest.fixture(scope="module")
def runner():
    """One local llvm runner for every tuning run of a module that passes it (`tune_tasks(runner=...)`),
    measuring as the tests' runs do (number=2, min_repeat_ms=5): its worker process imports TVM once,
    not once a run. It ends with the module. (A run's own runner, `bridge.workers.make_runner`, is
    what the CLI tests start.)"""
    from bridge.config import MeasureConfig
    from bridge.workers import make_runner
    from tvm_env import parse_target

    runner = make_runner(MeasureConfig(number=2, min_repeat_ms=5), parse_target({"kind": "llvm", "num-cores": 2}))
    yield runner
    runner.shutdown()


BACKSTOP_S = 120
"""`setup.cfg`'s pytest-timeout raises in the main thread (`timeout_method = signal`), which reports
every thread's stack, but only once the main thread runs Python again. A test stuck inside a C call
is ended this much later by faulthandler, which writes every thread's stack to `HANGS/<worker>.txt`
(`make test` prints it) and exits the process: the run reports the worker as crashed while running
that test, instead of hanging until CI's own limit."""
HANGS = Path(__file__).resolve().parents[1] / "runs" / "test-hangs"


@pytest.fixture(scope="session")
def _hang_file(worker_id):
    HANGS.mkdir(parents=True, exist_ok=True)
    with open(HANGS / f"{worker_id}.txt", "w") as f:
        yield f


@pytest.fixture(autouse=True)
def hang_backstop(request, _hang_file):
    import faulthandler

    timeout = request.config.getoption("timeout", None) or request.config.getini("timeout")
    if not timeout or float(timeout) <= 0:
        yield
        return
    _hang_file.write(f"{request.node.nodeid}: no answer {float(timeout) + BACKSTOP_S:.0f} s after it started\n")
    _hang_file.flush()
    faulthandler.dump_traceback_later(float(timeout) + BACKSTOP_S, exit=True, file=_hang_file)
    yield
    faulthandler.cancel_dump_traceback_later()
    _hang_file.seek(0)
    _hang_file.truncate()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that the timeout ended: its report, with every thread's stack, goes to
    `HANGS/<worker>-timeouts.txt`, which `make test` prints whether the run passed or not (`make test`
    runs such a test once more: a rare race should not fail CI, and should not go unseen either)."""
    import os

    outcome = yield
    report = outcome.get_result()
    if call.excinfo is not None and "from pytest-timeout" in str(call.excinfo.value):
        HANGS.mkdir(parents=True, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "master")
        with open(HANGS / f"{worker}-timeouts.txt", "a") as f:
            f.write(f"==== {report.nodeid} ({report.when})\n{report.longreprtext}\n{report.capstdout}\n")
