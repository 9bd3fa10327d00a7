"""data.zoo: torch networks, task extraction through relax, operator specs (real TVM, llvm)."""

import re

import pytest
import torch

from data.zoo import (
    NETWORKS,
    OPERATORS,
    TaskSpec,
    extract_network_tasks,
    extract_networks,
    operator_task,
    select_tasks,
)
from tvm_env import tvm_ffi

TARGET = {"kind": "llvm", "mcpu": "native", "num-cores": 2}


@pytest.mark.parametrize(
    ("name", "size", "shape"),
    [
        ("resnet_18", 64, (1, 1000)),
        ("resnet_50", 64, (1, 1000)),
        ("mobilenet_v2", 64, (1, 1000)),
        ("bert_base", 8, (1, 8, 768)),
        ("bert_tiny", 8, (1, 8, 128)),
        ("bert_large", 8, (1, 8, 1024)),
        ("gpt2_medium", 8, (1, 8, 50257)),
        ("vit_l16", 32, (1, 1000)),
    ],
)
def test_networks_run_in_torch(name, size, shape):
    net = NETWORKS[name]
    with torch.no_grad():
        out = net.build().eval()(net.example(size))
    assert out.shape == shape
    assert torch.isfinite(out).all()


@pytest.fixture(scope="module")
def bert_tiny_tasks():
    """bert_tiny's tasks at 16 tokens, extracted in this process (once for the module)."""
    return extract_network_tasks("bert_tiny", TARGET, size=16)


def test_extract_bert_tiny_tasks(bert_tiny_tasks):
    tasks = bert_tiny_tasks
    names = [t.name for t in tasks]
    assert len(names) == len(set(t.workload_hash for t in tasks)), "extract_tasks must dedupe workloads"
    # 2 identical encoder layers: their kernels dedupe into one task of weight >= 2
    assert max(t.weight for t in tasks) >= 2
    dense = [t for t in tasks if "matmul" in t.name and t.flops > 0]
    assert dense, names
    # Q/K/V/output projections: 16 tokens x 128 x 128 multiply-adds (+ bias) per call
    assert any(t.flops == pytest.approx(2 * 16 * 128 * 128, rel=0.01) for t in dense), [
        (t.name, t.flops) for t in dense
    ]
    for t in tasks:
        assert re.fullmatch(re.escape(t.name) + r"_[0-9a-f]{8}", t.task_dir)
        assert t.workload_hash == str(tvm_ffi.structural_hash(t.mod))
        assert "main" in [gv.name_hint for gv in t.mod.get_global_vars()]


def test_extract_networks_in_processes_matches_in_process(bert_tiny_tasks):
    """Networks extracted in spawned processes come back as the same tasks (modules through TVM JSON)."""
    names = ["vit_b16", "bert_tiny"]
    parallel = extract_networks(names, TARGET, size=16, workers=2)
    assert list(parallel) == names
    for name in names:
        here = bert_tiny_tasks if name == "bert_tiny" else extract_network_tasks(name, TARGET, size=16)
        assert [(t.name, t.weight, t.flops, t.workload_hash) for t in parallel[name]] == [
            (t.name, t.weight, t.flops, t.workload_hash) for t in here
        ]
        assert all(t.workload_hash == str(tvm_ffi.structural_hash(t.mod)) for t in parallel[name])
    with pytest.raises(ValueError, match="'vgg' is not in the zoo"):
        extract_networks(["bert_tiny", "vgg"], TARGET, size=16, workers=2)


def test_extract_rejects_bad_arguments():
    with pytest.raises(ValueError, match="'vgg' is not in the zoo"):
        extract_network_tasks("vgg", TARGET)
    with pytest.raises(ValueError, match="size=0"):
        extract_network_tasks("bert_tiny", TARGET, size=0)


@pytest.mark.parametrize(
    ("spec", "name", "flops"),
    [
        ("matmul:64,32,16", "matmul_64_32_16", 2 * 64 * 32 * 16),
        ("dense:1,768,768", "dense_1_768_768", 2 * 768 * 768),
        ("batch_matmul:2,8,16,4", "batch_matmul_2_8_16_4", 2 * 2 * 8 * 16 * 4),
        ("conv2d:1,8,8,4,8,3", "conv2d_1_8_8_4_8_3_1_0", 2 * 6 * 6 * 8 * 3 * 3 * 4),
        ("conv2d:1,8,8,4,8,3,1,1", "conv2d_1_8_8_4_8_3_1_1", 2 * 8 * 8 * 8 * 3 * 3 * 4),
        ("depthwise_conv2d:1,8,8,4,3,2,1", "depthwise_conv2d_1_8_8_4_3_2_1", 2 * 4 * 4 * 4 * 3 * 3),
    ],
)
def test_operator_specs(spec, name, flops):
    task = operator_task(spec)
    assert task.name == name
    assert task.weight == 1
    assert task.flops == pytest.approx(flops, rel=0.01)
    assert task.task_dir.startswith(name + "_")
    assert operator_task(spec).workload_hash == task.workload_hash, "same spec, same workload"


def test_softmax_spec_builds():
    assert operator_task("softmax:4,8").name == "softmax_4_8"
    assert set(OPERATORS) >= {"matmul", "dense", "batch_matmul", "conv2d", "depthwise_conv2d"}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gemm:1,2,3", "unknown kind 'gemm'"),
        ("matmul:1,2", r"expected matmul:M,N,K, got 2 parameters"),
        ("matmul", r"expected matmul:M,N,K, got 0 parameters"),
        ("conv2d:1,8,8,4,8", r"expected conv2d:N,H,W,CI,CO,KERNEL,STRIDE,PAD \(last 2 optional\)"),
        ("matmul:1,2,x", "parameters must be integers"),
        ("matmul:1,0,3", "N=0 must be positive"),
        ("conv2d:1,8,8,4,8,3,1,-1", "PAD=-1 must be positive"),
        ("matmul:3000000000,1,1", "M=3000000000 is larger than 65536"),
        ("matmul:65536,65536,1", "more than"),  # every parameter in range, the output tensor too large
    ],
)
def test_bad_operator_specs(spec, message):
    with pytest.raises(ValueError, match=message) as err:
        operator_task(spec)
    assert repr(spec) in str(err.value)


def _fake_tasks():
    mod = operator_task("matmul:4,4,4").mod
    return [
        TaskSpec(f"t{i}", mod, weight, flops, str(i))
        for i, (weight, flops) in enumerate([(1, 10.0), (3, 5.0), (1, 100.0), (2, 0.0)])
    ]


def test_select_tasks_by_flops_and_count():
    tasks = _fake_tasks()
    assert [t.name for t in select_tasks(tasks)] == ["t0", "t1", "t2", "t3"]
    assert [t.name for t in select_tasks(tasks, min_flops=1.0)] == ["t0", "t1", "t2"]
    assert [t.name for t in select_tasks(tasks, max_flops=50.0)] == ["t0", "t1", "t3"]
    # heaviest by weight x flops: t2 (100) then t1 (15); original order kept
    assert [t.name for t in select_tasks(tasks, max_tasks=2)] == ["t1", "t2"]
    with pytest.raises(ValueError, match="max_tasks=-1"):
        select_tasks(tasks, max_tasks=-1)
