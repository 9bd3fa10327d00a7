"""Workload tags from block names and from compute patterns."""

import numpy as np
import pytest
from tvm import te
from tvm.s_tir.meta_schedule.testing import te_workload

from data.features import workload_tags
from data.schema import TAG_NAMES
from tvm_env import tvm


@pytest.mark.parametrize(
    "tensors, expected",
    [
        (te_workload.matmul(16, 16, 16), {"dense"}),
        (te_workload.batch_matmul_nkkm(2, 16, 16, 16), {"batch_matmul"}),
        (te_workload.conv2d_nhwc(1, 8, 8, 16, 16, 3, 1, 1), {"conv2d"}),
        (te_workload.conv2d_nchw(1, 8, 8, 16, 16, 3, 3, 1, 1), {"conv2d"}),
        (te_workload.depthwise_conv2d_nhwc(1, 8, 8, 16, 3, 1, 1), {"conv2d", "depthwise"}),
        (te_workload.softmax_mn(16, 32), {"softmax", "max"}),
    ],
)
def test_workload_tags(tensors, expected, te_module):
    tags = workload_tags(te_module(tensors))
    assert tags.shape == (10,) and tags.dtype == np.float32
    assert {TAG_NAMES[i] for i in np.flatnonzero(tags)} == expected


def test_workload_tags_from_compute_patterns(te_module):
    x = te.placeholder((16,), name="x")
    y = te.placeholder((16,), name="y")
    relu = te.compute((16,), lambda i: te.max(x[i], tvm.tirx.const(0, "float32")), name="compute")
    summed = te.compute((16,), lambda i: relu[i] + y[i], name="compute_1")
    tags = workload_tags(te_module([x, y, summed]))
    assert {TAG_NAMES[i] for i in np.flatnonzero(tags)} == {"max", "add"}
