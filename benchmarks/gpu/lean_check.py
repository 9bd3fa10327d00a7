"""On a GPU machine: do TVM's worker processes still reach CUDA when they start without torch
(`tvm_env.lean_workers`), and how much sooner do they start? Prints one line per mode and exits 1 if
a lean worker loses CUDA. From the project root, with the kit:

    source .devkit/use-devkit.sh && python3 benchmarks/gpu/lean_check.py

Each mode (`PRUNER_TORCH_IN_WORKERS=1`, TVM's own workers; then the default, lean ones) runs in a
fresh process (the variable is read when `tvm_env` is imported):
it starts one `PopenWorker`, which copies an array to GPU 0 and back and compiles a kernel with NVRTC
(as a build worker does), and times the worker's start to that answer.
"""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = """
import time
from tvm.support.popen_pool import PopenWorker
from tvm_env import lean_workers


def probe():
    import sys
    import numpy as np
    import tvm
    dev = tvm.cuda(0)
    back = tvm.runtime.tensor(np.arange(4, dtype="float32"), dev).numpy() if dev.exist else None
    cubin = 0
    if dev.exist:  # what a build worker does: NVRTC compiles a kernel (tvm_env.nvrtc)
        from tvm_env.nvrtc import compile_cuda

        code = 'extern "C" __global__ void add_one(float* a) { a[threadIdx.x] += 1.0f; }'
        cubin = len(compile_cuda(code, "cubin", "sm_" + dev.compute_version.replace(".", "")))
    return dev.exist, None if back is None else float(back.sum()), cubin, "torch" in sys.modules


start = time.perf_counter()
worker = PopenWorker()
worker.send(probe)
exist, total, cubin, torch_loaded = worker.recv()
print(f"lean={lean_workers.install()} cuda={exist} sum={total} cubin_bytes={cubin} torch_in_worker={torch_loaded} "
      f"first_answer_s={time.perf_counter() - start:.2f}")
worker.kill()
"""


def main() -> int:
    ok = True
    for mode in ("1", "default"):  # TVM's own workers, then the lean ones (on unless turned off)
        env = {k: v for k, v in os.environ.items() if k != "PRUNER_TORCH_IN_WORKERS"}
        if mode == "1":
            env["PRUNER_TORCH_IN_WORKERS"] = mode
        out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True)
        line = (out.stdout.strip() or out.stderr.strip()[-400:]).splitlines()[-1]
        print(f"PRUNER_TORCH_IN_WORKERS={mode}: {line}", flush=True)
        ok &= out.returncode == 0 and "cuda=True sum=6.0" in line and "cubin_bytes=0 " not in line
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
