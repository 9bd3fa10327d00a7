"""What a build artifact's format costs the runner: MetaSchedule's builder exports a `.tar` (the
objects), which the runner untars and links into a shared library (`g++`) before it loads it, for
every candidate, one after another on each GPU's runner; a `.so` exported by the (parallel) build
workers would only be opened. This times each on the host for an llvm matmul: the export (a build
worker's share) and the load (the runner's), best of `--reps`, for the `.tar`, a `.so` linked by
TVM's compiler driver (`g++`), and a `.so` linked by `ld` alone (`tvm_env.link.link_shared`, what
`tvm_env.builder.export_so` uses), each checked against numpy once loaded.

    python benchmarks/artifact_load.py --size 256 --reps 5

For a GPU (`--target nvidia/nvidia-h100`) the matmul is one sampled schedule, built as a build worker
builds it; the host's TVM (no CUDA runtime) cannot load a CUDA artifact, so there only the exports
are timed, and the loads and the check are a GPU machine's:

    python benchmarks/artifact_load.py --target nvidia/nvidia-h100 --size 512 --reps 5
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cli import doc_parser


def _module(target, n: int):
    """A built n x n x n matmul (C = A B, arguments A, B, C) for `target`: as written for a CPU, one
    sampled schedule built as a tuning run's build worker builds it for a GPU."""
    from tvm_env import fast_build, tvm

    if target.kind.name == "llvm":
        from tvm import te

        a, b = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
        k = te.reduce_axis((0, n), name="k")
        c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
        return tvm.tirx.build(tvm.IRModule({"main": te.create_prim_func([a, b, c])}), target)
    from data.sampler import sample_schedules
    from data.zoo import operator_task

    task = operator_task(f"matmul:{n},{n},{n}")
    (sch,) = sample_schedules(task, target, 1, seed=0, exclude=set(), population=16, genetic_iters=1, min_init=1)
    return fast_build(sch.mod, target, None)


def main(argv: list[str] | None = None) -> dict[str, dict[str, float | None]]:
    parser = doc_parser(__doc__)
    parser.add_argument("--size", type=int, default=256, help="the matmul's n (n x n x n)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--target",
        default='{"kind": "llvm", "mcpu": "native", "num-cores": 2}',
        help="a target JSON or tag; a GPU's artifacts are loaded and checked only where the GPU is",
    )
    args = parser.parse_args(argv)

    import numpy as np

    import tvm_env
    from tvm_env import tvm
    from tvm_env.link import link_shared

    target = tvm_env.parse_target(args.target)
    tvm_env.setup(target)
    n = args.size
    lib = _module(target, n)
    dev = tvm.cpu() if target.kind.name == "llvm" else tvm.device(target.kind.name, 0)
    ways = {"tar": ("tar", None), "so (g++)": ("so", None), "so (ld)": ("so", link_shared)}
    x, y = (np.random.default_rng(0).random((n, n), dtype="float32") for _ in range(2))
    out: dict[str, dict[str, float | None]] = {}
    with tempfile.TemporaryDirectory() as work:
        for way, (ext, fcompile) in ways.items():
            exports, loads = [], []
            for i in range(args.reps):
                path = str(Path(work) / f"{ext}{len(out)}_{i}.{ext}")
                start = time.perf_counter()
                lib.export_library(path, fcompile=fcompile)
                exports.append(time.perf_counter() - start)
                if dev.exist:  # the host's TVM cannot open a CUDA module
                    start = time.perf_counter()
                    loaded = tvm.runtime.load_module(path)
                    loads.append(time.perf_counter() - start)
            if dev.exist:
                result = tvm.runtime.tensor(np.zeros((n, n), "float32"), dev)
                loaded["main"](tvm.runtime.tensor(x, dev), tvm.runtime.tensor(y, dev), result)
                if not np.allclose(result.numpy(), x @ y, rtol=1e-3, atol=1e-2):
                    raise RuntimeError(f"{way}: the loaded module's product differs from numpy's")
            out[way] = {"export_s": min(exports), "load_s": min(loads) if loads else None}
    print(f"{target.kind.name}, n={n}, best of {args.reps}")
    print("| artifact | export (build worker), ms | load (runner), ms |\n|---|---|---|")
    for way, t in out.items():
        load = "-" if t["load_s"] is None else f"{1e3 * t['load_s']:.1f}"
        print(f"| .{way} | {1e3 * t['export_s']:.1f} | {load} |")
    return out


if __name__ == "__main__":
    main()
