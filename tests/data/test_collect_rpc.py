"""data.collect --runner rpc for real: a TVM RPC tracker and two RPC servers on 127.0.0.1, the
collector's command line (run in this process: its own process would only add a TVM import), a tiny
llvm operator measured on the servers."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from data.collect import cli, count_records
from data.labels import mean_latency
from data.zoo import operator_task
from tvm_env import ms, parse_target, target_device_name, tvm_ffi

TARGET = '{"kind": "llvm", "num-cores": 2}'  # the host's own CPU: the servers run on it
SPEC = "matmul:32,32,32"
KEY = "pruner-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _servers_registered(port: int) -> int:
    """Servers registered under KEY; 0 while the tracker does not listen yet."""
    from tvm import rpc

    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return 0
    summary = rpc.connect_tracker("127.0.0.1", port).summary()
    return sum(info.get("key") == f"server:{KEY}" for info in summary["server_info"])


@pytest.fixture
def tracker():
    """A tracker and two servers registered under KEY; yields the tracker's port. (TVM's tracker
    needs tornado, in the dev extras.)"""
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port),
             "--port-end", str(port + 1), "--silent"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
    ]  # fmt: skip
    try:
        for _ in range(2):
            server_port = _free_port()
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1", "--port", str(server_port),
                     "--port-end", str(server_port + 1), "--tracker", f"127.0.0.1:{port}", "--key", KEY, "--silent"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                )
            )  # fmt: skip
        deadline = time.time() + 120  # three TVM imports at once: ~45 s on a loaded 2-core host
        while _servers_registered(port) < 2:
            assert time.time() < deadline, "the RPC servers did not register at the tracker"
            assert all(p.poll() is None for p in procs), "an RPC process exited"
            time.sleep(0.3)
        yield port
    finally:
        # each process's group: TVM runs the tracker's and each server's loop in a PopenWorker child,
        # which a SIGTERM to its parent alone would leave running (and listening) after the test
        for proc in reversed(procs):
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:  # the group is gone already (a process that failed to start)
                pass
        for proc in procs:
            proc.wait(timeout=10)


def test_collect_through_rpc_servers(tracker, tmp_path, capsys):
    argv = ["--target", TARGET, "--workload", SPEC, "--per-task", "6", "--out", str(tmp_path), "--runner", "rpc",
            "--tracker", f"127.0.0.1:{tracker}", "--key", KEY, "--batch-size", "3", "--workers", "1", "--repeat", "2",
            "--min-repeat-ms", "1", "--timeout", "30"]  # fmt: skip
    assert cli(argv) == 0, capsys.readouterr().out[-2000:]

    device = tmp_path / target_device_name(parse_target(TARGET))
    task = device / operator_task(SPEC).task_dir
    db = ms.database.JSONDatabase(str(task / "database_workload.json"), str(task / "database_tuning_record.json"))
    records = db.get_all_tuning_records()
    latencies = [mean_latency([float(s) for s in r.run_secs]) for r in records]
    assert len(records) == 6 and all(np.isfinite(latencies)), latencies
    assert all(len(r.run_secs) == 2 for r in records), "one entry per --repeat"
    hashes = {int(tvm_ffi.structural_hash(r.as_measure_candidate().sch.mod)) for r in records}
    assert len(hashes) == 6, "each schedule stored once"
    assert count_records(task) == (6, 6)

    (run,) = json.loads((device / "index.json").read_text())["collections"]
    assert (run["runner"], run["runners"], run["records"]) == ("rpc", 2, 6), run
    assert run["evaluator"] == {"number": 1, "repeat": 2, "min_repeat_ms": 1, "enable_cpu_cache_flush": True}
