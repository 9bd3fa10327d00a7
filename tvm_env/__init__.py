"""The bottom layer: the one place where the project imports and configures apache-tvm 0.27.

Everything that talks to TVM (collector, featurizer, cost model, search, tuning) goes through
here, so `pruner_models/` and shard reading import without TVM. `data/` and `bridge/` both build
on this package; it imports neither.

* `tvm_env.target`: target parsing (tags, JSON dicts; `"mcpu": "native"` is the host CPU), device names.
* `tvm_env.configure`: per-process set-up (threads, tensor intrinsics, logging), the cores a process
  may use, MetaSchedule's task loggers.
* `tvm_env.builder`: `fast_build` and `PooledLocalBuilder` (workers that live across batches).
* `tvm_env.runner`: `StartedRunner` (a runner whose worker starts while the first search runs).
* `tvm_env.arguments`: a runner's arguments with integer tensors set to ones (indices in range).
* `tvm_env.graph_timer`: `run_graph_evaluator`, a runner's timing of a CUDA kernel as a CUDA graph
  (the kernel's own time, not the host's launch rate).
* `tvm_env.kernel_reuse`: `kernel_key` (a build's generated code, hashed) and `ReusingRunner` (a
  runner that measures each distinct kernel once).
* `tvm_env.compile_cache`: NVRTC's output kept by source, in a folder a build pool's workers share.
* `tvm_env.popen`: `end_pool`, a TVM process pool shut down on purpose, not by the garbage collector.
* `tvm_env.nvrtc`: NVRTC builds of CUDA kernels without the libcu++ headers they do not use.
* `tvm_env.lean_workers`: TVM's worker processes start without importing torch (installed here, on
  import: 1.7 s a worker instead of 5.6 on the CI machine).
"""

import tvm
import tvm_ffi  # re-exported for callers that need structural_hash/equal
from tvm.s_tir import meta_schedule as ms

from tvm_env import lean_workers
from tvm_env.builder import PooledLocalBuilder, fast_build, one_build_thread
from tvm_env.configure import setup, task_context, task_loggers, usable_cores
from tvm_env.kernel_reuse import ReusingRunner, kernel_key
from tvm_env.runner import StartedRunner, init_device
from tvm_env.target import is_gpu, parse_target, target_device_name, target_spec

lean_workers.install()

__all__ = [
    "PooledLocalBuilder",
    "ReusingRunner",
    "StartedRunner",
    "fast_build",
    "init_device",
    "is_gpu",
    "kernel_key",
    "one_build_thread",
    "ms",
    "parse_target",
    "target_spec",
    "setup",
    "task_context",
    "target_device_name",
    "task_loggers",
    "tvm",
    "tvm_ffi",
    "usable_cores",
]
