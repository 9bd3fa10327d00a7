"""How much of a small kernel's measured latency is the host launching it, not the kernel.

Every tuning run measures with TVM's time evaluator (MetaSchedule's `LocalRunner`: number 3, repeat 1,
100 ms a measurement at least, so a 4 us kernel is launched some 25,000 times in a row). It times a
CUDA kernel between two events around those launches, and the host makes each launch (the packed
call, then `cuLaunchKernel`). A kernel that runs for less time than the host takes to launch the next
leaves the GPU waiting in between, and the reading is the host's launch rate, not the kernel. A busy
host (the build workers and the search of the run) launches more slowly.

This measures, on this machine's GPU:
- the floor: a kernel that does nearly nothing (64 adds), through the same evaluator;
- the best `--top` kernels of each of `--databases` (`remeasure.best_kernels`), through the evaluator,
  and as a CUDA graph of `--graph-launches` launches replayed (torch's CUDA graphs; the GPU launches
  the graph's kernels itself, so the reading is the kernel's own time plus the graph's gap between
  kernels; the floor kernel's graph reading is that gap), and as `tvm_env.graph_timer` reads it (what
  a run's runner reads with `--timer graph`: the same idea without torch);
- all of it with the host idle, and again with `--burn` processes spinning on the cores this process
  may use (default: one a core), as a tuning run keeps them busy while its runner measures; with
  `--gpu-burn`, the loaded state also has a process training a small network on the device, as
  Pruner's verifier trains on the GPU while the runner measures: without pause, or for `--gpu-duty` of
  every half second (0: it only holds its CUDA context and memory, as the tuning process does between
  its verifier's updates);
- on a GPU, the SM clock `nvidia-smi` reports right after each `--timer graph` reading (`sm_mhz`);
- with `--fresh-args`, each kernel's arguments allocated afresh every round, the earlier ones kept so
  that the new land elsewhere in memory (a run's runner allocates them for each candidate too, but
  frees the earlier ones, so its allocations may land where the last did).

    python benchmarks/launch_floor.py --databases "[benchmarks/results/suite_databases/ablations/suite_local/depthwise_conv2d_1x28x28x240x5x1x2/xgb-s2]" \\
        --target nvidia/nvidia-h100 --top 2 --json floor.json
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cli import doc_parser

FLOOR = "floor (64 adds)"
"""The name of the floor kernel's row."""


def start_burners(n: int) -> list:
    """`n` processes that spin until `stop_burners` ends them (a host as busy as a tuning run's)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


GPU_BURNER = """
import sys, time, torch
device, duty = sys.argv[1], float(sys.argv[2])
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(164, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                          torch.nn.Linear(256, 1)).to(device)
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
x, y = torch.randn(512, 164, device=device), torch.randn(512, 1, device=device)
def step():
    opt.zero_grad(set_to_none=True)
    torch.nn.functional.mse_loss(net(x), y).backward()
    opt.step()
def sync():
    if device == "cuda":
        torch.cuda.synchronize()
step()  # cuBLAS and autograd start up before the readings do
sync()
print("training", flush=True)
if duty >= 1:
    while True:
        step()
period = 0.5
while True:  # a burst of training, `duty` of each period, then a pause with the context and memory kept
    start = time.perf_counter()
    while time.perf_counter() - start < duty * period:
        step()
        sync()
    time.sleep(max(0.0, period - (time.perf_counter() - start)) if duty > 0 else period)
"""
"""A process that trains a small MLP (a batch of 512 rows of 164 features, as a verifier's training
takes them) on `argv[1]` until it is killed, for `argv[2]` (the duty) of every half second: 1 without
pause; 0 not after its first step, holding its CUDA context and memory (as a tuning process whose
verifier is on the device does between its updates). It says "training" once its first step is done."""


def start_gpu_burner(device: str, duty: float = 1.0) -> subprocess.Popen:
    """A process training `GPU_BURNER`'s network on `device` ("cuda" or "cpu") for `duty` of every half
    second, started and trained once when this returns; `stop_burners([it])` ends it."""
    if not 0 <= duty <= 1:
        raise ValueError(f"the training's duty is a share of its time, from 0 to 1: {duty}")
    p = subprocess.Popen([sys.executable, "-c", GPU_BURNER, device, str(duty)], stdout=subprocess.PIPE, text=True)
    if p.stdout.readline().strip() != "training":
        p.kill()
        p.wait()
        raise RuntimeError(f"the --gpu-burn process did not start training on {device} (exit {p.poll()})")
    return p


def sm_clock_mhz() -> float | None:
    """The GPU's SM clock now, in MHz, as `nvidia-smi` reports it for the first visible GPU; None
    where there is no `nvidia-smi` or it fails."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
    command = ["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-i", visible]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=True)
        return float(done.stdout.split()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def stop_burners(burners: list) -> None:
    for p in burners:
        p.kill()
    for p in burners:
        p.wait()


class Kernel:
    """One built kernel loaded on `device`, with its arguments allocated as the runner does."""

    def __init__(self, name: str, reported_us: float | None, sch, path: str, device) -> None:
        from tvm_env import ms, tvm

        self.name, self.reported_us = name, reported_us
        self.module = tvm.runtime.load_module(path)
        info = [a.as_json() for a in ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)]
        self.info, self.device, self.kept = info, device, []
        self.args = self._alloc()

    def _alloc(self) -> list:
        """One set of the kernel's arguments, allocated and filled as the runner does."""
        from tvm.s_tir.meta_schedule.runner.local_runner import default_alloc_argument

        (args,) = default_alloc_argument(self.device, self.info, 1)
        return args

    def fresh_args(self) -> None:
        """Allocate the arguments again (the runner does so for each candidate); the earlier ones are
        kept (until the kernel is dropped), so that the new ones land elsewhere in memory."""
        self.kept.append(self.args)
        self.args = self._alloc()

    def evaluator_us(self, min_repeat_ms: int) -> float:
        """One reading of the runner's evaluator (number 3, `min_repeat_ms`), in microseconds."""
        from tvm.s_tir.meta_schedule.runner.utils import run_evaluator_common

        return run_evaluator_common(self.module, self.device, _config(min_repeat_ms), [self.args])[0] * 1e6

    def graph_timer_us(self, min_repeat_ms: int) -> float:
        """One reading of `tvm_env.graph_timer` (what a run's runner reads with `--timer graph`)."""
        from tvm_env.graph_timer import run_graph_evaluator

        return run_graph_evaluator(self.module, self.device, _config(min_repeat_ms), [self.args])[0] * 1e6

    def graph_us(self, launches: int, replays: int) -> float:
        """The kernel's time a launch, in microseconds, from a CUDA graph of `launches` launches
        replayed `replays` times (timed by CUDA events around the replays)."""
        import torch
        import tvm_ffi

        f = self.module[self.module.entry_name]
        f(*self.args)  # loads the kernel into the context before the capture
        self.device.sync()
        graph = torch.cuda.CUDAGraph()
        with tvm_ffi.use_torch_stream(torch.cuda.graph(graph)):
            for _ in range(launches):
                f(*self.args)
        graph.replay()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / (launches * replays)


def _config(min_repeat_ms: int):
    from tvm_env import ms

    return ms.runner.EvaluatorConfig(number=3, repeat=1, min_repeat_ms=min_repeat_ms, enable_cpu_cache_flush=False)


def measure(
    kernels: list[Kernel], rounds: int, min_repeat_ms: int, launches: int, replays: int, graphs: bool, fresh: bool
) -> dict:
    """name -> {"evaluator_us": [...], "graph_us": [...], "graph_timer_us": [...], "graph_error": str (if
    it failed)}: a reading of each a round, the kernels in turn in every round (drift in the device or
    the host falls on all alike), after a round whose readings are left out (on an H200 the first
    kernels a call read came out up to 7% low); the graph readings on a GPU only (else empty), each
    `--timer graph` reading with the SM clock `nvidia-smi` gave right after it ("sm_mhz", None if
    none). With `fresh`, each kept round reads each kernel on arguments allocated afresh
    (`Kernel.fresh_args`)."""

    def readings() -> dict:
        return {"evaluator_us": [], "graph_us": [], "graph_timer_us": [], "sm_mhz": []}

    out = {k.name: readings() for k in kernels}
    for kept in [False] + [True] * rounds:  # a first round left out: it read a call's first kernels low
        for k in kernels:
            if kept and fresh:
                k.fresh_args()
            row = out[k.name] if kept else readings()
            row["evaluator_us"].append(k.evaluator_us(min_repeat_ms))
            if graphs and "graph_error" not in row:
                try:
                    row["graph_us"].append(k.graph_us(launches, replays))
                    row["graph_timer_us"].append(k.graph_timer_us(min_repeat_ms))
                    row["sm_mhz"].append(sm_clock_mhz())
                except Exception as err:  # noqa: BLE001 - a kernel the graph cannot capture keeps its evaluator row
                    row["graph_error"] = f"{type(err).__name__}: {err}"
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = doc_parser(__doc__)
    parser.add_argument("--databases", type=list[str], default=[], help="tuning databases (folders)")
    parser.add_argument(
        "--target", default="nvidia/nvidia-h100", help="the target to build for (this machine's device)"
    )
    parser.add_argument("--top", type=int, default=2, help="the best N kernels of each workload")
    parser.add_argument(
        "--rounds", type=int, default=5, help="rounds over the kernels, each state: a reading of each kernel and timer"
    )
    parser.add_argument("--min-repeat-ms", type=int, default=100, help="as the runs measured (tune.py's default)")
    parser.add_argument("--graph-launches", type=int, default=1000, help="launches captured in a kernel's graph")
    parser.add_argument("--graph-replays", type=int, default=20, help="replays of the graph timed")
    parser.add_argument(
        "--burn", type=int, default=None, help="spinning processes in the loaded state (default: a core each)"
    )
    parser.add_argument(
        "--gpu-burn", action="store_true", help="the loaded state also trains a small network on the device"
    )
    parser.add_argument(
        "--gpu-duty",
        type=float,
        default=1.0,
        help="with --gpu-burn, the share of every half second it trains (1: without pause; 0: it only holds "
        "its CUDA context and memory)",
    )
    parser.add_argument(
        "--fresh-args",
        action="store_true",
        help="allocate each kernel's arguments afresh every round, keeping the old ones alive",
    )
    parser.add_argument("--json", default=None, help="write the figures here too")
    from benchmarks.remeasure import best_kernels, parse_with_target

    args, target = parse_with_target(parser, argv)
    import tvm_env
    from tvm_env import PooledLocalBuilder, ms, usable_cores
    from tvm_env.builder import tiny_schedule

    gpu = target.kind.name not in ("llvm", "c")
    device = tvm_env.tvm.runtime.device(target.kind.name if gpu else "cpu", 0)
    burn = usable_cores() if args.burn is None else args.burn
    builder, paths = PooledLocalBuilder(), []
    try:  # every build made is removed, whatever fails
        try:
            floor = tiny_schedule(bind=gpu)
            (built,) = builder.build([ms.builder.BuilderInput(floor.mod, target)])
            if built.error_msg is not None:
                raise RuntimeError(f"the floor kernel does not build: {built.error_msg}")
            paths.append(built.artifact_path)
            best = best_kernels(args.databases, args.top, target, builder)
            paths += [path for *_, path in best]
        finally:
            builder.shutdown()
        kernels = [Kernel(FLOOR, None, floor, built.artifact_path, device)]
        for i, (db, workload, record, sch, path) in enumerate(best):
            kernels.append(Kernel(f"{db} {workload} #{i}", record.latency * 1e6, sch, path, device))
        settings = (args.rounds, args.min_repeat_ms, args.graph_launches, args.graph_replays, gpu, args.fresh_args)
        idle = measure(kernels, *settings)
        burners = start_burners(burn)
        try:
            if args.gpu_burn:
                burners.append(start_gpu_burner("cuda" if gpu else "cpu", args.gpu_duty))
            loaded = measure(kernels, *settings)
        finally:
            stop_burners(burners)
    finally:
        for path in paths:
            ms.utils.remove_build_dir(path)
    out = {k.name: {"reported_us": k.reported_us, "idle": idle[k.name], "loaded": loaded[k.name]} for k in kernels}

    def fmt(readings):
        return f"{statistics.median(readings):.3f}" if readings else "-"

    training = "training" if args.gpu_duty >= 1 else f"training {args.gpu_duty:g} of the time"
    loaded_name = f"{burn} spinning" + (f" + {training}" if args.gpu_burn else "")
    print(
        f"| kernel | reported (us) | evaluator, idle | evaluator, {loaded_name} | graph, idle | graph, {loaded_name} "
        f"| --timer graph, idle | --timer graph, {loaded_name} |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, row in out.items():
        cells = [fmt([row["reported_us"]] if row["reported_us"] is not None else [])]
        cells += [
            fmt(row[state][key])
            for key in ("evaluator_us", "graph_us", "graph_timer_us")
            for state in ("idle", "loaded")
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    for name, row in out.items():
        for state in ("idle", "loaded"):
            if "graph_error" in row[state]:
                print(f"{name}, {state}: no graph: {row[state]['graph_error']}", file=sys.stderr)
    if args.json:
        body = {"burn": burn, "gpu_burn": args.gpu_burn, "fresh_args": args.fresh_args, "kernels": out}
        if args.gpu_burn:
            body["gpu_duty"] = args.gpu_duty
        Path(args.json).write_text(json.dumps(body, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
