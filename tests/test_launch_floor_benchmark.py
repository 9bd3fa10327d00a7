"""benchmarks/launch_floor.py on the host (llvm): the floor kernel and a database's best kernels are
built, loaded and read by the runner's evaluator with the host idle and with spinning processes. The
CUDA-graph readings need a GPU; on the host they are left out (empty)."""

import json
import signal
from pathlib import Path

import pytest
from benchmark_files import load_benchmark

launch_floor = load_benchmark("launch_floor")
DB = str(Path(__file__).resolve().parent / "fixtures/tiny_records/llvm-sapphirerapids-2c/matmul_e87e4aed")


def test_the_floor_and_the_best_kernels_are_read_idle_and_loaded(tmp_path, capsys):
    out = launch_floor.main(
        ["--databases", f"[{DB}]", "--target", '{"kind": "llvm", "num-cores": 1}', "--top", "1", "--rounds", "2",
         "--min-repeat-ms", "1", "--burn", "1", "--json", str(tmp_path / "f.json")]
    )  # fmt: skip
    assert list(out)[0] == launch_floor.FLOOR and len(out) == 2  # the floor, then the database's best kernel
    (best,) = [name for name in out if name != launch_floor.FLOOR]
    assert best.startswith(DB) and out[best]["reported_us"] > 0 and out[launch_floor.FLOOR]["reported_us"] is None
    for row in out.values():
        for state in ("idle", "loaded"):
            assert len(row[state]["evaluator_us"]) == 2 and all(t > 0 for t in row[state]["evaluator_us"])
            assert row[state]["graph_us"] == row[state]["graph_timer_us"] == row[state]["sm_mhz"] == []  # no GPU
    # the floor kernel (64 adds) reads faster than the matmul
    assert max(out[launch_floor.FLOOR]["idle"]["evaluator_us"]) < min(out[best]["idle"]["evaluator_us"])
    assert json.loads((tmp_path / "f.json").read_text()) == {
        "burn": 1,
        "gpu_burn": False,
        "fresh_args": False,
        "kernels": out,
    }
    assert "| kernel | reported (us) | evaluator, idle | evaluator, 1 spinning |" in capsys.readouterr().out


def test_burners_spin_until_stopped():
    burners = launch_floor.start_burners(2)
    assert all(p.poll() is None for p in burners)
    launch_floor.stop_burners(burners)
    assert all(p.returncode == -signal.SIGKILL for p in burners)  # killed and reaped


def test_fresh_arguments_land_elsewhere_and_a_training_process_loads_the_device(tmp_path, capsys, monkeypatch):
    """`--fresh-args` reads each kernel on arguments allocated anew every kept round, the earlier kept
    alive (so at new addresses); `--gpu-burn` starts one training process (on the CPU here) for the
    loaded state, and stops it."""
    fresh, burners = [], []
    real_fresh, real_start, real_stop = (
        launch_floor.Kernel.fresh_args,
        launch_floor.start_gpu_burner,
        launch_floor.stop_burners,
    )
    monkeypatch.setattr(launch_floor.Kernel, "fresh_args", lambda k: (fresh.append(k.name), real_fresh(k)))
    monkeypatch.setattr(
        launch_floor, "start_gpu_burner", lambda device, duty: burners.append(real_start(device, duty)) or burners[-1]
    )
    stopped = []
    monkeypatch.setattr(launch_floor, "stop_burners", lambda ps: (stopped.extend(ps), real_stop(ps)))
    out = launch_floor.main(
        ["--databases", f"[{DB}]", "--target", '{"kind": "llvm", "num-cores": 1}', "--top", "1", "--rounds", "2",
         "--min-repeat-ms", "1", "--burn", "0", "--fresh-args", "--gpu-burn", "--json", str(tmp_path / "f.json")]
    )  # fmt: skip
    assert all(len(row[state]["evaluator_us"]) == 2 for row in out.values() for state in ("idle", "loaded"))
    assert sorted(fresh) == sorted(list(out) * 4)  # 2 kept rounds x 2 states, each kernel
    assert len(burners) == 1 and burners[0] in stopped and burners[0].returncode == -signal.SIGKILL
    body = json.loads((tmp_path / "f.json").read_text())
    assert body["gpu_burn"] is True and body["fresh_args"] is True and body["gpu_duty"] == 1.0
    assert "| evaluator, 0 spinning + training |" in capsys.readouterr().out

    from tvm_env import tvm
    from tvm_env.builder import tiny_schedule

    sch = tiny_schedule(bind=False)
    built = tvm.tirx.build(sch.mod, tvm.target.Target({"kind": "llvm"}))
    path = str(tmp_path / "tiny.so")
    built.export_library(path)
    kernel = launch_floor.Kernel("tiny", None, sch, path, tvm.runtime.device("cpu", 0))
    seen = {tuple(a.data_ptr for a in kernel.args)}
    for _ in range(3):
        kernel.fresh_args()
        seen.add(tuple(a.data_ptr for a in kernel.args))
    assert len(seen) == 4 and len(kernel.kept) == 3  # four sets of arguments, all alive, none at one address


def test_the_training_process_trains_until_stopped():
    burner = launch_floor.start_gpu_burner("cpu")
    assert burner.poll() is None
    launch_floor.stop_burners([burner])
    assert burner.returncode == -signal.SIGKILL


def test_a_training_process_at_duty_zero_only_holds_its_memory(tmp_path):
    """At duty 0 the process trains once and then idles; at 0.5 it trains half of every half second,
    at 1 without pause: their CPU seconds over 1.5 s, read from /proc, tell idling from training. A
    burst whose last step runs past the half second goes on (no negative sleep). A duty outside 0-1
    is refused."""
    import time

    from bridge.host_cpu import cpu_seconds

    used, alive = {}, {}
    for duty in (0.0, 0.5, 0.9999, 1.0):
        burner = launch_floor.start_gpu_burner("cpu", duty)
        try:
            before = cpu_seconds(burner.pid)
            time.sleep(1.5)
            used[duty], alive[duty] = cpu_seconds(burner.pid) - before, burner.poll() is None
        finally:
            launch_floor.stop_burners([burner])
    # next to nothing at 0; at 0.5 and 1 it trains (torch's threads make 0.5 no cheaper than 1 on 2 cores)
    assert used[0.0] < 0.1 and used[0.5] > 0.3 and used[1.0] > 0.3, used
    assert all(alive.values()), alive  # 0.9999: a burst's last step overruns the half second, and it goes on
    with pytest.raises(ValueError, match="from 0 to 1: 1.5"):
        launch_floor.start_gpu_burner("cpu", 1.5)


def test_the_sm_clock_comes_from_nvidia_smi_and_is_none_without_it(tmp_path, monkeypatch):
    """`sm_clock_mhz` runs `nvidia-smi` for the first visible GPU: a stand-in on PATH that prints a
    clock only for the index it is asked about, then none on PATH at all."""
    tool = tmp_path / "nvidia-smi"
    tool.write_text('#!/bin/sh\n[ "$3" = "-i" ] && [ "$4" = "3" ] && echo 1755 && exit 0\nexit 1\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert launch_floor.sm_clock_mhz() == 1755.0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert launch_floor.sm_clock_mhz() is None  # it failed for that GPU
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert launch_floor.sm_clock_mhz() is None
