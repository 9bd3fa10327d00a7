"""Arms spread over GPUs: `tuning.py --gpus N` starts one process a GPU, each on its share of the cores.

The pending arms are dealt out in turn (`share`), every share computed from the same listing before
any child writes a file, so each process resumes the same way; each child pins itself to a contiguous
share of the cores (`_pin`) before TVM or torch start threads. An H100 pair's 32 cores give each arm
the 16 a one-GPU machine has.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

__all__ = ["pin", "run_shards", "share"]


def share(items: list, index: int, count: int) -> list:
    """The `index`-th of `count` shares of `items`, dealt out in turn (the i-th item to share i mod count)."""
    if not 0 <= index < count:
        raise ValueError(f"share {index} of {count} does not exist")
    return items[index::count]


def pin(index: int, count: int) -> None:
    """Pin this process to its contiguous share of the cores it may use, before TVM or torch start threads."""
    cores = sorted(os.sched_getaffinity(0))
    per = len(cores) // count
    if per < 1:
        raise ValueError(f"{count} processes need at least {count} cores; this one may use {len(cores)}")
    mine = cores[index * per : (index + 1) * per]
    os.sched_setaffinity(0, mine)
    os.environ["TVM_NUM_THREADS"] = str(len(mine))


def run_shards(args, argv: list[str], time_left: float, script: str) -> int:
    """Start one `script --shard i/N` (tuning.py) per GPU (CUDA_VISIBLE_DEVICES its GPU), echo each one's lines
    prefixed with its GPU, and wait for all; the exit status is the worst child's."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = visible.split(",") if visible else [str(i) for i in range(args.gpus)]
    if len(gpus) < args.gpus:
        raise ValueError(f"--gpus {args.gpus}, but CUDA_VISIBLE_DEVICES names {len(gpus)}: {visible}")
    children = []
    for i in range(args.gpus):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpus[i], PYTHONUNBUFFERED="1")
        cmd = [sys.executable, script, *argv, "--shard", f"{i}/{args.gpus}", "--time-limit", f"{time_left:.0f}"]
        children.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))

    def echo(i: int, child: subprocess.Popen) -> None:
        for line in child.stdout:
            print(f"[gpu {gpus[i]}] {line}", end="", flush=True)

    threads = [threading.Thread(target=echo, args=(i, c)) for i, c in enumerate(children)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return max(c.wait() for c in children)
