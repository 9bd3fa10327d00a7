"""Building and running the collector's candidates, and the record of how they were measured.

* `BuildPool`: builds one candidate per `submit` in a pool of worker processes (MetaSchedule's own
  `local_builder._worker_func` with `tvm_env.fast_build`), so a caller keeps every worker busy
  without waiting for a whole batch; the workers are recycled one at a time.
* `make_runners`: one MetaSchedule runner per device that measures in parallel: a `LocalRunner`
  per visible CUDA GPU (each times its kernels on its own GPU), or one `RPCRunner` with as many
  sessions as servers are registered at the tracker for the key.
* `run_built`: run built candidates on one runner; a failed build or run gives `[1e10]`.
* `Measurer`: the collector's sequential way (build a batch, then run it), kept for comparison.
* `measurement_settings`: the evaluator settings, builder workers, runners, TVM version, date and
  (on NVIDIA machines) the GPUs' clocks and power limit, stored in the device folder's index.json.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import functools
import logging
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from data.labels import FAILED_SECONDS
from tvm_env import PooledLocalBuilder, fast_build, is_gpu, ms, one_build_thread, tvm, tvm_ffi, usable_cores
from tvm_env.arguments import alloc_local, alloc_rpc
from tvm_env.nvrtc import is_refused

if TYPE_CHECKING:
    from data.collect import CollectConfig

__all__ = [
    "BuildPool",
    "Measurer",
    "gpu_info",
    "make_runners",
    "measurement_settings",
    "rpc_servers",
    "run_built",
    "runner_count",
    "runner_devices",
    "visible_gpus",
]

log = logging.getLogger(__name__)

GPU_QUERY = (
    "index,name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.limit,power.max_limit,pstate"
)
"""The `nvidia-smi --query-gpu` fields recorded with the data (MHz, W; one dict per GPU)."""


def device_type(target: tvm.target.Target) -> str:
    """The runtime device type a runner measures `target` on ("cpu" for llvm)."""
    return "cpu" if target.kind.name == "llvm" else target.kind.name


def evaluator_config(cfg: CollectConfig, target: tvm.target.Target) -> ms.runner.EvaluatorConfig:
    """One warm-up, then `repeat` measurements of at least `min_repeat_ms`; CPU caches flushed on CPUs."""
    return ms.runner.EvaluatorConfig(
        number=1, repeat=cfg.repeat, min_repeat_ms=cfg.min_repeat_ms, enable_cpu_cache_flush=not is_gpu(target)
    )


# ----------------------------------------------------------------------------------------------
# Devices
# ----------------------------------------------------------------------------------------------


def visible_gpus(target: tvm.target.Target) -> int:
    """CUDA GPUs this process sees (honours CUDA_VISIBLE_DEVICES); 0 for other targets or no GPU."""
    if target.kind.name != "cuda":
        return 0
    n = 0
    while n < 64 and tvm.cuda(n).exist:
        n += 1
    return n


def rpc_servers(tracker: str, key: str) -> int:
    """Servers registered at the tracker `host:port` under `key` (free or busy); 0 if none."""
    from tvm import rpc

    host, port = tracker.rsplit(":", 1)
    summary = rpc.connect_tracker(host, int(port)).summary()
    servers = sum(info.get("key") == f"server:{key}" for info in summary.get("server_info", []))
    return servers or int(summary.get("queue_info", {}).get(key, {}).get("free", 0))


def runner_count(cfg: CollectConfig, target: tvm.target.Target) -> int:
    """Runs measured in parallel: `cfg.runners`, else the servers of the RPC key, else the visible
    CUDA GPUs (one runner for a CPU target or a machine without a GPU)."""
    if cfg.runners:
        return cfg.runners
    if cfg.runner == "rpc":
        return max(1, rpc_servers(cfg.tracker, cfg.key))
    return max(1, visible_gpus(target))


def runner_devices(count: int, gpus: int) -> list[int | None]:
    """The CUDA device ordinal each of `count` runners measures on: GPU i mod `gpus` (an ordinal
    among the GPUs this process sees); None (LocalRunner's own device 0) with fewer than two GPUs."""
    if gpus < 2:
        return [None] * count
    return [i % gpus for i in range(count)]


def _alloc_on(index: int, device: Any, args_info: Any, alloc_repeat: int) -> Any:
    """A pinned runner's `f_alloc_argument`: LocalRunner's worker passes device 0 of the target's
    kind; the arguments go to device `index` of that kind instead."""
    at = tvm.runtime.device(device.dlpack_device_type(), index)
    return alloc_local(at, args_info, alloc_repeat)


def _run_on(index: int, rt_mod: Any, device: Any, evaluator_config: Any, repeated_args: Any) -> list[float]:
    """A pinned runner's `f_run_evaluator`: times the kernel on device `index` (see `_alloc_on`)."""
    at = tvm.runtime.device(device.dlpack_device_type(), index)
    return ms.runner.local_runner.default_run_evaluator(rt_mod, at, evaluator_config, repeated_args)


def make_runners(cfg: CollectConfig, target: tvm.target.Target, count: int) -> list[ms.runner.Runner]:
    """Runners that measure in parallel, one per thread of the caller.

    RPC: one `RPCRunner` with `count` sessions (its pool runs a chunk's candidates on the servers at
    once). Local: `count` LocalRunners; on a machine with several CUDA GPUs runner i allocates and
    times on GPU i mod the GPU count (`_alloc_on`, `_run_on`: the device is named in every call, so
    a worker restarted after a timeout measures on the same GPU). Pinning by CUDA_VISIBLE_DEVICES
    in the worker's initializer did not work: on two H200s every run went to GPU 0 (collection call
    24's utilization log), the worker having imported TVM before its initializer ran. On a CPU
    target, several local runners share the cores (what `--runners` tests).
    """
    evaluator = evaluator_config(cfg, target)
    if cfg.runner == "rpc":
        host, port = cfg.tracker.rsplit(":", 1)
        rpc = ms.runner.RPCConfig(host, int(port), cfg.key, session_timeout_sec=int(cfg.timeout))
        return [
            ms.runner.RPCRunner(
                rpc_config=rpc, evaluator_config=evaluator, max_workers=count, f_alloc_argument=alloc_rpc
            )
        ]
    return [
        ms.runner.LocalRunner(
            timeout_sec=cfg.timeout,
            evaluator_config=evaluator,
            f_alloc_argument=alloc_local if index is None else functools.partial(_alloc_on, index),
            f_run_evaluator=None if index is None else functools.partial(_run_on, index),
        )
        for index in runner_devices(count, visible_gpus(target))
    ]


def gpu_info() -> list[dict[str, str]]:
    """`nvidia-smi`'s name, driver, SM/memory clocks and their maxima, power limit and P-state of
    each GPU this process sees; [] without nvidia-smi or when it fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={GPU_QUERY}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as err:
        log.warning("nvidia-smi failed: %s", err)
        return []
    fields = GPU_QUERY.split(",")
    gpus = [dict(zip(fields, (v.strip() for v in line.split(",")))) for line in out.splitlines() if line.strip()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible and all(v.strip().isdigit() for v in visible.split(",")):
        keep = [v.strip() for v in visible.split(",")]
        gpus = [g for g in gpus if g.get("index") in keep]
    return gpus


def measurement_settings(cfg: CollectConfig, target: tvm.target.Target, runners: int, overlap: bool) -> dict:
    """How this run measures: the entry it adds to index.json's "collections" (see data.collect)."""
    evaluator = evaluator_config(cfg, target)
    settings = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "tvm": tvm.__version__,
        "tvm_ffi": tvm_ffi.__version__,
        "evaluator": {
            "number": evaluator.number,
            "repeat": evaluator.repeat,
            "min_repeat_ms": evaluator.min_repeat_ms,
            "enable_cpu_cache_flush": bool(evaluator.enable_cpu_cache_flush),
        },
        "timeout": cfg.timeout,
        "max_source_kb": cfg.max_source_kb,
        "builder_workers": cfg.builder_workers or usable_cores(),
        "runner": cfg.runner,
        "runners": runners,
        "pipeline": "sequential" if cfg.sequential else ("overlapped" if overlap else "quiet runs"),
        "records": 0,
        "refused": 0,  # over max_source_kb: not built, not stored
    }
    if cfg.runner == "local" and target.kind.name == "cuda":
        settings["gpus"] = gpu_info()
    return settings


# ----------------------------------------------------------------------------------------------
# Building and running
# ----------------------------------------------------------------------------------------------


def _lower_priority() -> None:
    """Build worker initializer: yield the CPU to the runner and the sampler (they are on the
    critical path, and a run's launches and timings should not queue behind compilers), and run
    TVM on one thread, as a worker builds one candidate at a time (`tvm_env.one_build_thread`)."""
    one_build_thread(nice=10)  # where the OS refuses, at the normal priority


def _timed_build(mod: Any, target: Any, max_source_kb: float | None = None) -> tuple[str, float]:
    """Worker side of `BuildPool`: LocalBuilder's build-and-export, and the seconds it took."""
    from tvm.s_tir.meta_schedule.builder import local_builder

    start = time.perf_counter()
    build = functools.partial(fast_build, max_source_kb=max_source_kb)
    path = local_builder._worker_func(build, None, mod, target, None)
    return path, time.perf_counter() - start


class BuildPool:
    """Builds candidates one `submit` at a time in `workers` processes.

    A future resolves to a `BuilderResult` (an error message for a failed or timed-out build, never
    an exception). Each worker process is replaced after `max_uses` builds (MetaSchedule restarts
    its whole pool every batch to bound leaks in long-lived workers; one at a time keeps the other
    workers busy). Workers run at a lower priority (nice 10), so the cores they leave idle are
    theirs but the runner and the sampler come first. `busy_s` sums the workers' build seconds.
    """

    def __init__(self, workers: int, timeout: float, max_uses: int = 256, max_source_kb: float | None = None):
        from tvm.support.popen_pool import PopenPoolExecutor

        self.workers, self.timeout, self.max_source_kb = workers, timeout, max_source_kb
        self._pool = PopenPoolExecutor(
            max_workers=workers, timeout=timeout, maximum_process_uses=max_uses, initializer=_lower_priority
        )
        self._idle = threading.Condition()
        self._outstanding = 0
        self._raw: set[concurrent.futures.Future] = set()
        self.busy_s = 0.0

    @property
    def outstanding(self) -> int:
        """Builds submitted and not finished."""
        return self._outstanding

    def submit(self, mod: tvm.IRModule, target: tvm.target.Target) -> concurrent.futures.Future:
        with self._idle:
            self._outstanding += 1
        result: concurrent.futures.Future = concurrent.futures.Future()
        raw = self._pool.submit(_timed_build, mod, target, self.max_source_kb)
        with self._idle:
            self._raw.add(raw)
        raw.add_done_callback(functools.partial(self._finish, result))
        return result

    def _finish(self, result: concurrent.futures.Future, raw: concurrent.futures.Future) -> None:
        seconds = 0.0
        try:
            path, seconds = raw.result()
            out = ms.builder.BuilderResult(path, None)
        except concurrent.futures.CancelledError:
            out = ms.builder.BuilderResult(None, "LocalBuilder: cancelled")
        except TimeoutError:
            seconds = self.timeout
            out = ms.builder.BuilderResult(None, f"LocalBuilder: Timeout, killed after {self.timeout} seconds")
        except Exception as err:  # the build's own error, as LocalBuilder reports it
            out = ms.builder.BuilderResult(None, f"LocalBuilder: An exception occurred\n{err}")
        with self._idle:
            self.busy_s += seconds
            self._outstanding -= 1
            self._raw.discard(raw)
            self._idle.notify_all()
        result.set_result(out)

    def wait_idle(self) -> None:
        """Block until no build is in flight (the caller stops submitting first)."""
        with self._idle:
            self._idle.wait_for(lambda: self._outstanding == 0)

    def cancel_pending(self) -> None:
        """Cancel the builds no worker has started (they resolve as failed builds at once)."""
        with self._idle:
            pending = list(self._raw)
        for raw in pending:
            raw.cancel()

    def shutdown(self) -> None:
        """Cancel the pending builds and kill the workers (builds in flight end as failures)."""
        self.cancel_pending()
        self._pool.shutdown(wait=False)


def run_built(
    runner: ms.runner.Runner,
    target: tvm.target.Target,
    candidates: Sequence[ms.MeasureCandidate],
    built: Sequence[ms.builder.BuilderResult],
) -> list[list[float] | None]:
    """run_secs per candidate: `repeat` seconds, [1e10] where its build or run failed, or None where
    the source guard refused its build (`--max-source-kb`: not measured, not a failure). Removes the
    build artifacts."""
    secs: list[list[float] | None] = [None if is_refused(b.error_msg) else [FAILED_SECONDS] for b in built]
    ok = [i for i, b in enumerate(built) if b.error_msg is None]
    for b in built:
        if b.error_msg is not None and not is_refused(b.error_msg):
            log.debug("build failed: %s", b.error_msg.splitlines()[-1] if b.error_msg else "")
    try:
        inputs = [
            ms.runner.RunnerInput(built[i].artifact_path, device_type(target), candidates[i].args_info) for i in ok
        ]
        futures = runner.run(inputs) if inputs else []
        for i, future in zip(ok, futures):
            result = future.result()
            if result.error_msg is None and result.run_secs:
                secs[i] = [float(s) for s in result.run_secs]
            else:
                log.debug("run failed: %s", (result.error_msg or "no run_secs").splitlines()[-1])
    finally:
        for b in built:
            if b.artifact_path:
                ms.utils.remove_build_dir(b.artifact_path)
    return secs


class Measurer:
    """The sequential way: build a whole batch (`PooledLocalBuilder`, workers kept across batches),
    then run it on the first runner. `build_s` and `run_s` sum the wall time of each phase."""

    def __init__(self, cfg: CollectConfig, target: tvm.target.Target, runners: int = 1):
        self.target = target
        self.builder = PooledLocalBuilder(
            max_workers=cfg.builder_workers, timeout_sec=cfg.timeout, max_source_kb=cfg.max_source_kb
        )
        self.runner = make_runners(cfg, target, runners if cfg.runner == "rpc" else 1)[0]
        self.build_s = self.run_s = 0.0

    def measure(self, candidates: Sequence[ms.MeasureCandidate]) -> list[list[float] | None]:
        """run_secs per candidate (`repeat` seconds, [1e10] when its build or run failed, None when
        the source guard refused its build; `run_built`)."""
        start = time.perf_counter()
        built = self.builder.build([ms.builder.BuilderInput(c.sch.mod, self.target) for c in candidates])
        self.build_s += time.perf_counter() - start
        start = time.perf_counter()
        secs = run_built(self.runner, self.target, candidates, built)
        self.run_s += time.perf_counter() - start
        return secs

    def close(self) -> None:
        """Stop the build and run workers."""
        if self.builder._pool is not None:
            self.builder._pool.shutdown(wait=False)
        self.runner.pool.shutdown(wait=False)
