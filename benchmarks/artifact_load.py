"""What a build artifact's format costs the runner: MetaSchedule's builder exports a `.tar` (the
objects), which the runner untars and links into a shared library (`g++`) before it loads it, for
every candidate, one after another on each GPU's runner; a `.so` exported by the (parallel) build
workers would only be opened. This times both on the host for an llvm matmul: the export (a build
worker's share) and the load (the runner's), best of `--reps`.

    python benchmarks/artifact_load.py --size 256 --reps 5

On the host's TVM (no CUDA runtime) a CUDA artifact cannot be loaded, so the CUDA figures, whose
artifacts also carry the kernels' cubin, are a GPU-machine measurement.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cli import doc_parser


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = doc_parser(__doc__)
    parser.add_argument("--size", type=int, default=256, help="the matmul's n (n x n x n)")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)

    from tvm import te

    import tvm_env
    from tvm_env import tvm

    target = tvm_env.parse_target({"kind": "llvm", "mcpu": "native", "num-cores": 2})
    tvm_env.setup(target)
    n = args.size
    a, b = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    lib = tvm.tirx.build(tvm.IRModule({"main": te.create_prim_func([a, b, c])}), target)
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as work:
        for ext in ("tar", "so"):
            exports, loads = [], []
            for i in range(args.reps):
                path = str(Path(work) / f"m{i}.{ext}")
                start = time.perf_counter()
                lib.export_library(path)
                exports.append(time.perf_counter() - start)
                start = time.perf_counter()
                tvm.runtime.load_module(path)
                loads.append(time.perf_counter() - start)
            out[ext] = {"export_s": min(exports), "load_s": min(loads)}
    print("| artifact | export (build worker), ms | load (runner), ms |\n|---|---|---|")
    for ext, t in out.items():
        print(f"| .{ext} | {1e3 * t['export_s']:.1f} | {1e3 * t['load_s']:.1f} |")
    return out


if __name__ == "__main__":
    main()
