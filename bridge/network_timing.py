"""Time a network end to end: tuned (the database's best schedules), untuned, and torch eager.

The network is a zoo name or a user's own model (`data.zoo.sources`: `path.py:factory`, ONNX, a
saved relax module); torch eager needs a torch module (zoo or `path.py:factory`).

Every timing runs in a child process (`tvm.support.popen_pool.PopenWorker`): a kernel that cannot run
on this machine (a database tuned for another CPU, whose code traps with SIGILL) fails the call with
a RuntimeError instead of killing the caller.

* tuned: `compile_relax` with the output dir's database (its re-read records first, `bridge.reread`),
  relax VM `time_evaluator` mean.
* untuned: the same compile with an EMPTY database (llvm: TVM's default lowering of each operator;
  GPU targets: DLight's default schedules, which compile_relax applies to functions without records).
* torch eager: the same torch module and input on the same device (CPU with the target's cores as
  torch threads, or CUDA), mean of `repeat` runs of `number` calls after a warm-up.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from tvm_env import ms, parse_target, setup, tvm, usable_cores

__all__ = ["measure_network", "time_torch_eager"]


def _time_network(
    work_dir: str | None, network: str, size: int | None, target_json: str, number: int, repeat: int
) -> float:
    """Child process: compile with the database of `work_dir` (None: an empty one) and time the relax VM."""
    from tvm import relax

    from bridge.reread import tuned_database
    from data.zoo.sources import load_network

    target = parse_target(target_json)
    setup(target)
    if work_dir is None:
        database = ms.database.MemoryDatabase()
    else:
        database = tuned_database(work_dir)  # the re-read records first, where the run left them
    loaded = load_network(network, size)  # the unfused module: compile_relax fuses like extraction did
    executable = ms.relax_integration.compile_relax(database, loaded.mod, target, params=None)
    dev = tvm.cpu() if target.kind.name == "llvm" else tvm.device(target.kind.name, 0)
    vm = relax.VirtualMachine(executable, dev)
    inputs = [tvm.runtime.tensor(x, dev) for x in loaded.inputs]
    return float(vm.time_evaluator("main", dev, number=number, repeat=repeat)(*inputs).mean)


def _time_eager(network: str, size: int | None, device: str, threads: int, number: int, repeat: int) -> float:
    """Child process: mean seconds of one torch eager call of the network."""
    import torch

    from data.zoo.sources import torch_module

    torch.set_num_threads(threads)
    model, example = torch_module(network, size)
    model = model.to(device)
    example = tuple(t.to(device) for t in example)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    means = []
    with torch.inference_mode():
        model(*example)  # warm-up
        sync()
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(number):
                model(*example)
            sync()
            means.append((time.perf_counter() - start) / number)
    return float(sum(means) / len(means))


def _in_child(function: Any, args: tuple, what: str, timeout: float) -> float:
    from tvm.support.popen_pool import PopenWorker

    worker = PopenWorker()
    try:
        worker.send(function, args, timeout=timeout)
        return float(worker.recv())
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
) -> float:
    """Mean inference time (s) of the network compiled with the best schedules of `work_dir`'s
    database (None: untuned, an empty database), timed in a child process.

    Raises:
        RuntimeError: the compile or the run failed or crashed in the child (a SIGILL included).
    """
    from bridge.tuning import target_spec

    target = parse_target(target)
    what = f"timing the {'untuned' if work_dir is None else 'tuned'} {network}"
    directory = None if work_dir is None else str(work_dir)
    args = (directory, network, size, json.dumps(target_spec(target)), number, repeat)
    return _in_child(_time_network, args, what, timeout)


def time_torch_eager(
    network: str, size: int | None, target: Any, number: int = 20, repeat: int = 5, timeout: float = 600.0
) -> float:
    """Mean seconds of one torch eager call of the network on the target's device (child process).

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
    return _in_child(_time_eager, (network, size, device, threads, number, repeat), f"timing torch {network}", timeout)
