"""Time a network end to end: tuned (the database's best schedules), untuned, and torch eager.

The network is a zoo name or a user's own model (`data.zoo.sources`: `path.py:factory`, ONNX, a
saved relax module); torch eager needs a torch module (zoo or `path.py:factory`).

Every timing runs in a child process (`tvm.support.popen_pool.PopenWorker`): a kernel that cannot run
on this machine (a database tuned for another CPU, whose code traps with SIGILL) fails the call with
a RuntimeError instead of killing the caller.

* tuned: `compile_relax` with the output dir's database (its re-read records first, `bridge.reread`),
  relax VM `time_evaluator` mean. The module is prepared as the tasks were extracted from it
  (`data.zoo.inference_module`), so that the compile's kernels are the tuned tasks; the timing also
  counts the kernels that found a tuned schedule (`NetworkTime.tuned_kernels`).
* untuned: the same compile with an EMPTY database (llvm: TVM's default lowering of each operator;
  GPU targets: DLight's default schedules, which compile_relax applies to functions without records).
* torch eager: the same torch module and input on the same device (CPU with the target's cores as
  torch threads, or CUDA), the median of `repeat` runs of `number` calls after a warm-up of at least
  `EAGER_WARMUP_S`. A forward whose first call raises a RuntimeError (one that makes its own tensors
  on the CPU, `torch.arange` without `device=`) runs with the device as torch's default: a function
  mode, whose Python costs a launch-bound model a quarter more a call; the zoo's need none. Eager mode
  at batch 1 is bound by the host's launches, and on the GPU machines its readings moved up to 2x
  from one to the next in one process (ViT-B/16 0.71-1.40 ms), where the compiled networks held
  within 1-2%; the cause is not established. Compare with its fastest reading (docs/benchmarks.md,
  "Whole networks against MetaSchedule's default").

Time a tuned output dir again (a GPU machine, after `tune.py --network ... --out DIR`):

    python -m bridge.network_timing "[DIR1, DIR2]" resnet_18 nvidia/nvidia-h100 --json_out times.json
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from tvm_env import ms, parse_target, setup, tvm, usable_cores

EAGER_WARMUP_S = 1.0  # torch eager's warm-up, seconds at least

__all__ = ["NetworkTime", "compiled_kernels", "measure_network", "time_network", "time_torch_eager", "tuned_kernels"]


class NetworkTime(NamedTuple):
    """One compiled network's timing: mean seconds a call, and how many of its kernels (fused
    PrimFuncs, as the compile looks them up) took a tuned schedule from the database."""

    seconds: float
    tuned_kernels: int
    kernels: int


def compiled_kernels(mod: tvm.IRModule, target: Any) -> dict[str, Any]:
    """Kernel name -> fused PrimFunc, as `compile_relax` looks them up in the database: its own
    passes before `MetaScheduleApplyDatabase` (`data.zoo.fused_module` with the target's dispatch)."""
    from data.zoo import fused_module

    fused = fused_module(mod, target, dispatch=True)
    return {gv.name_hint: f for gv, f in fused.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}


def tuned_kernels(database: Any, mod: tvm.IRModule, target: Any) -> tuple[int, int]:
    """(kernels with a tuning record in `database`, kernels) of `mod` compiled for `target`. Any
    database (`query_tuning_record` only: an `OrderedUnionDatabase`, which `bridge.reread.tuned_database`
    returns after a re-read, has no `has_workload`)."""
    kernels = compiled_kernels(mod, target)
    found = 0
    for name, func in kernels.items():
        key = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
        found += database.query_tuning_record(key, target, name) is not None
    return found, len(kernels)


def _time_network(
    work_dir: str | None, network: str, size: int | None, target_json: str, number: int, repeat: int
) -> tuple[float, int, int]:
    """Child process: compile with the database of `work_dir` (None: an empty one) and time the relax
    VM; (mean seconds, kernels with a tuned schedule, kernels), the kernels not counted (0, 0) for
    an empty database."""
    from tvm import relax

    from bridge.reread import tuned_database
    from data.zoo import inference_module
    from data.zoo.sources import load_network

    target = parse_target(target_json)
    setup(target)
    if work_dir is None:
        database = ms.database.MemoryDatabase()
    else:
        database = tuned_database(work_dir)  # the re-read records first, where the run left them
    # the unfused module, prepared as the tasks were extracted from it: compile_relax fuses as extraction did
    loaded = load_network(network, size)
    mod = inference_module(loaded.mod, target)
    # an empty database tunes nothing: not fused a second time to count its kernels (3.6 s for ResNet-18 on the host)
    tuned, kernels = (0, 0) if work_dir is None else tuned_kernels(database, mod, target)
    executable = ms.relax_integration.compile_relax(database, mod, target, params=None)
    dev = tvm.cpu() if target.kind.name == "llvm" else tvm.device(target.kind.name, 0)
    vm = relax.VirtualMachine(executable, dev)
    inputs = [tvm.runtime.tensor(x, dev) for x in loaded.inputs]
    return float(vm.time_evaluator("main", dev, number=number, repeat=repeat)(*inputs).mean), tuned, kernels


def _time_eager(
    network: str,
    size: int | None,
    device: str,
    threads: int,
    number: int,
    repeat: int,
    warmup_s: float = EAGER_WARMUP_S,
) -> float:
    """Child process: median seconds of one torch eager call of the network, over `repeat` runs of
    `number` calls, after warming up for at least `warmup_s` (and `number` calls)."""
    import contextlib
    import statistics

    import torch

    from data.zoo.sources import torch_module

    torch.set_num_threads(threads)
    model, example = torch_module(network, size)
    model = model.to(device)
    example = tuple(t.to(device) for t in example)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    with torch.inference_mode():
        try:
            model(*example)
            sync()
            on_device = contextlib.nullcontext()
        except RuntimeError:
            # a forward that makes its own tensors on the CPU (torch.arange without device=): the device as the
            # default too, a function mode that costs every op some Python (a quarter more a call on a small model)
            on_device = torch.device(device)
    means = []
    with torch.inference_mode(), on_device:
        start, calls = time.perf_counter(), 0
        while calls < number or time.perf_counter() - start < warmup_s:  # clocks, caches, lazy loading
            model(*example)
            sync()
            calls += 1
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(number):
                model(*example)
            sync()
            means.append((time.perf_counter() - start) / number)
    return float(statistics.median(means))


def _in_child(function: Any, args: tuple, what: str, timeout: float) -> Any:
    from tvm.support.popen_pool import PopenWorker

    worker = PopenWorker()
    try:
        worker.send(function, args, timeout=timeout)
        return worker.recv()
    except (ChildProcessError, TimeoutError) as err:
        raise RuntimeError(f"{what} failed in its child process ({type(err).__name__}: {err})") from err
    finally:
        worker.kill()


def measure_network(
    work_dir: str | os.PathLike | None,
    network: str,
    size: int | None,
    target: Any,
    number: int = 20,
    repeat: int = 5,
    timeout: float = 600.0,
) -> NetworkTime:
    """Mean inference time (s) of the network compiled with the best schedules of `work_dir`'s
    database (None: untuned, an empty database), timed in a child process, with the count of its
    kernels that took a tuned schedule (untuned: none counted, `tuned_kernels` and `kernels` 0).

    Raises:
        RuntimeError: the compile or the run failed or crashed in the child (a SIGILL included).
        ValueError: `work_dir` holds no tuning database.
    """
    from bridge.database import RECORDS, WORKLOADS
    from bridge.tuning import target_spec

    if work_dir is not None and not all((Path(work_dir) / name).is_file() for name in (WORKLOADS, RECORDS)):
        raise ValueError(f"{work_dir}: no tuning database ({WORKLOADS}, {RECORDS}) to compile with")

    target = parse_target(target)
    what = f"timing the {'untuned' if work_dir is None else 'tuned'} {network}"
    directory = None if work_dir is None else str(work_dir)
    args = (directory, network, size, json.dumps(target_spec(target)), number, repeat)
    return NetworkTime(*_in_child(_time_network, args, what, timeout))


def time_torch_eager(
    network: str, size: int | None, target: Any, number: int = 20, repeat: int = 5, timeout: float = 600.0
) -> float:
    """Median seconds of one torch eager call of the network on the target's device (child process).

    Raises:
        ValueError: an ONNX or relax network (no torch module), or a target other than llvm / cuda.
    """
    from data.zoo.sources import check_network

    check_network(network)
    if network.endswith((".onnx", ".json")):
        raise ValueError(f"torch eager timing needs a torch model; {network!r} is a file of another kind")
    target = parse_target(target)
    kind = target.kind.name
    device = "cpu" if kind == "llvm" else "cuda" if kind == "cuda" else None
    if device is None:
        raise ValueError(f"torch eager timing supports llvm and cuda targets, not {kind!r}")
    threads = int(target.export().get("num-cores", usable_cores()))
    return float(
        _in_child(_time_eager, (network, size, device, threads, number, repeat), f"timing torch {network}", timeout)
    )


def time_network(
    work_dirs: Sequence[str],
    network: str,
    size: int | None,
    target: Any,
    *,
    number: int = 20,
    repeat: int = 5,
    say: Callable[[str], Any] = print,
) -> dict[str, Any]:
    """Time the network compiled with each tuned output dir's database, untuned, and in torch eager
    mode, one after another, saying each as it comes. A timing that fails is said and left None.

    Returns:
        {"tuned": {work_dir: {"ms", "tuned_kernels", "kernels"} or None}, "untuned_ms", "torch_eager_ms"}.
    """
    times: dict[str, Any] = {"tuned": {}}
    tuned = "end-to-end mean inference time (relax VM, best schedules{})"
    for work_dir in work_dirs:
        what = tuned.format(f" of {work_dir}" if len(work_dirs) > 1 else "")
        try:
            timed = measure_network(work_dir, network, size, target, number, repeat)
        except (RuntimeError, ValueError) as err:
            times["tuned"][str(work_dir)] = None
            say(f"{what}: failed ({err})")
            continue
        times["tuned"][str(work_dir)] = {
            "ms": timed.seconds * 1e3,
            "tuned_kernels": timed.tuned_kernels,
            "kernels": timed.kernels,
        }
        say(
            f"{what}: {timed.seconds * 1e3:.4f} ms (tuned schedules for {timed.tuned_kernels} of its "
            f"{timed.kernels} kernels, the rest untuned)"
        )
    others = {
        "untuned_ms": (
            "untuned baseline (empty database)",
            lambda: measure_network(None, network, size, target, number, repeat).seconds,
        ),
        "torch_eager_ms": (
            "torch eager on the same device",
            lambda: time_torch_eager(network, size, target, number, repeat),
        ),
    }
    for key, (what, timing) in others.items():
        try:
            times[key] = timing() * 1e3
            say(f"{what}: {times[key]:.4f} ms")
        except (RuntimeError, ValueError) as err:
            times[key] = None
            say(f"{what}: failed ({err})")
    return times


def time_work_dirs(
    work_dirs: list[str],
    network: str,
    target: str,
    size: int | None = None,
    number: int = 20,
    repeat: int = 5,
    json_out: str | None = None,
) -> dict[str, Any]:
    """Time a network compiled with each tuned output dir's database, untuned, and in torch eager
    mode, on this machine's device, one after another; print each and return them (and write JSON).

    Args:
        work_dirs: tune.py output dirs (`--out`) of this network and target.
        network: the network they tuned (a zoo name or your own model, as tune.py's --network).
        target: the target they tuned for (a tag or a JSON dict).
        size: the network's input size, as tune.py's --input-size.
        number: calls a measurement.
        repeat: measurements (their mean is reported).
        json_out: write the times here as JSON.
    """
    from data.atomic import atomic_write_text

    times = {
        "network": network,
        "target": target,
        **time_network(work_dirs, network, size, target, number=number, repeat=repeat),
    }
    if json_out:
        atomic_write_text(json_out, json.dumps(times, indent=2) + "\n")
    return times


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """`python -m bridge.network_timing DIRS NETWORK TARGET [--json_out F]`: `time_work_dirs`; exit
    status 1 when a tuned dir's or the untuned network's timing failed."""
    from jsonargparse import auto_cli

    times = auto_cli(time_work_dirs, args=argv)
    failed = [d for d, t in times["tuned"].items() if t is None] + (["untuned"] if times["untuned_ms"] is None else [])
    if failed:  # said above, and null in the JSON; torch eager may be n/a (an ONNX or relax network)
        raise SystemExit(f"error: the timing of {', '.join(failed)} failed")
    return times


if __name__ == "__main__":
    main()
