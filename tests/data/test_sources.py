"""A user's own model: a torch file (path.py:factory), a saved relax IRModule, an ONNX file."""

import textwrap

import numpy as np
import pytest

from data import zoo
from data.zoo.sources import load_network

TARGET = {"kind": "llvm", "mcpu": "native", "num-cores": 2}


@pytest.fixture
def torch_file(tmp_path):
    path = tmp_path / "tiny_mlp.py"
    path.write_text(
        textwrap.dedent(
            """
            import torch

            def factory():
                net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
                return net, (torch.randn(2, 16),)
            """
        )
    )
    return f"{path}:factory"


def onnx_file(path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((16, 24)).astype("float32"), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 24])],
        initializer=[weight],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def test_each_kind_of_own_model_gives_tasks(torch_file, tmp_path):
    from tvm_env import tvm

    from_torch = load_network(torch_file)
    assert [x.shape for x in from_torch.inputs] == [(2, 16)]
    json_path = tmp_path / "tiny_relax.json"
    json_path.write_text(tvm.ir.save_json(from_torch.mod))
    onnx_path = onnx_file(tmp_path / "tiny.onnx")
    for spec in (torch_file, str(json_path), onnx_path):
        tasks = zoo.extract_network_tasks(spec, TARGET)
        assert tasks and all(t.flops > 0 for t in tasks), spec
        names = " ".join(t.name for t in tasks)
        assert "matmul" in names or "dense" in names, (spec, names)


def test_bad_own_model_files_are_named(tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not a protobuf")
    with pytest.raises(ValueError, match="broken.onnx"):
        load_network(str(bad))
    not_module = tmp_path / "thing.json"
    not_module.write_text("[1, 2]")
    with pytest.raises(ValueError, match="thing.json"):
        load_network(str(not_module))
    missing = tmp_path / "nofactory.py"
    missing.write_text("x = 1\n")
    with pytest.raises(ValueError, match="has no function 'factory'"):
        load_network(f"{missing}:factory")


def test_own_torch_model_is_tuned_compiled_and_timed(torch_file, tmp_path):
    """tune.py as a user runs it (its own process): per-task report, network timings, summary.json."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "tune"
    done = subprocess.run(
        [sys.executable, "tune.py", "--network", torch_file, "--target", json.dumps(TARGET), "--cost-model", "random",
         "--trials", "2", "--trials-per-round", "2", "--max-tasks", "1", "--work-dir", str(out), "--number", "2",
         "--min-repeat-ms", "5", "--population", "16", "--workers", "1", "--no-progress"],
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=600,
        env={k: v for k, v in os.environ.items() if k != "COLUMNS"},  # a pipe's own width: 160
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "end-to-end mean inference time" in done.stdout and "fused_matmul" in done.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tasks"][0]["trials"] == 2 and summary["tasks"][0]["task"].startswith("fused_matmul")
    assert summary["end_to_end_ms"] > 0 and summary["untuned_ms"] > 0 and summary["torch_eager_ms"] > 0
    # the compiled network took the tuned task's schedule (a task with a valid record), the rest untuned
    tuned = sum(t["best_latency_us"] is not None for t in summary["tasks"])
    assert tuned == 1 == summary["tuned_kernels"] and summary["kernels"] >= len(summary["tasks"])
    assert f"tuned schedules for {tuned} of its {summary['kernels']} kernels" in done.stdout
    assert f"│ {summary['tasks'][0]['task']} " in done.stdout  # piped: the table's task names on one line
