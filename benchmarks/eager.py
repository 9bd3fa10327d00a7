"""The vendor-library reference: an operator spec (`data.zoo.OPERATORS`) timed in torch eager mode.

The same computation as the TE workload MetaSchedule tunes (fp32, the same layouts: NHWC
activations, torch.nn.Linear's weight layout for dense), run by torch on CUDA device 0, which calls
cuBLAS / cuDNN. TF32 is off, since the tuned kernels compute in plain fp32. Timed as MetaSchedule's
runner times a tuned kernel: CUDA events around `number` back-to-back calls (launch gaps amortized),
after a warm-up; the median over `repeat` such measurements, divided by `number`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _inputs(spec: str):
    """(function, inputs) of the spec on the GPU."""
    kind, _, rest = spec.partition(":")
    p = [int(x) for x in rest.split(",")]
    dev = {"device": "cuda", "dtype": torch.float32}
    rand = lambda *shape: torch.randn(*shape, **dev)  # noqa: E731
    if kind == "dense":
        m, n, k = p
        return F.linear, (rand(m, k), rand(n, k))
    if kind == "matmul":
        m, n, k = p
        return torch.matmul, (rand(m, k), rand(k, n))
    if kind == "batch_matmul":  # te_workload.batch_matmul_nkkm(B, N, M, K): X[B, N, K] x Y[B, K, M]
        b, n, m, k = p
        return torch.bmm, (rand(b, n, k), rand(b, k, m))
    if kind == "conv2d":
        n, h, w, ci, co, kernel, stride, pad = p + [1, 0][len(p) - 6 :]  # STRIDE, PAD default to 1, 0
        x = rand(n, ci, h, w).to(memory_format=torch.channels_last)
        weight = rand(co, ci, kernel, kernel).to(memory_format=torch.channels_last)
        return (lambda a, b: F.conv2d(a, b, stride=stride, padding=pad)), (x, weight)
    if kind == "depthwise_conv2d":
        n, h, w, c, kernel, stride, pad = p + [1, 0][len(p) - 5 :]
        x = rand(n, c, h, w).to(memory_format=torch.channels_last)
        weight = rand(c, 1, kernel, kernel)
        return (lambda a, b: F.conv2d(a, b, stride=stride, padding=pad, groups=c)), (x, weight)
    if kind == "softmax":
        m, n = p
        return (lambda a: torch.softmax(a, dim=-1)), (rand(m, n),)
    raise ValueError(f"no eager reference for operator spec {spec!r}")


def eager_ms(spec: str, warmup: int = 20, repeat: int = 20, number: int = 100) -> float:
    """Median milliseconds of one call of the operator in torch eager mode on CUDA device 0."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    fn, inputs = _inputs(spec)
    with torch.no_grad():
        for _ in range(warmup):
            fn(*inputs)
        torch.cuda.synchronize()
        times = []
        for _ in range(repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(number):
                fn(*inputs)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / number)
    times.sort()
    return float(times[len(times) // 2])
