"""Workload tags: 10 flags of an unscheduled workload (its kind of operator), from block names and compute patterns."""

from __future__ import annotations

import numpy as np

from data.features.graph import Graph, expr_loads, free_vars, has_load, subexprs
from data.schema import TAG_DIM, TAG_NAMES
from tvm_env import tvm

__all__ = ["workload_tags"]


_TAG = {name: i for i, name in enumerate(TAG_NAMES)}
_NAME_TAGS = (
    ("softmax", "softmax"),
    ("winograd", "winograd"),
    ("depthwise", "depthwise"),
    ("batch_matmul", "batch_matmul"),
    ("conv2d", "conv2d"),
    ("matmul", "dense"),
    ("dense", "dense"),
    ("max", "max"),
    ("min", "min"),
    ("add", "add"),
)


def workload_tags(mod: tvm.IRModule) -> np.ndarray:
    """(10,) float32 0/1 tags (data.schema.TAG_NAMES) of a workload module.

    A tag is set by a block name (e.g. 'T_add', 'conv2d_nhwc', 'T_softmax_exp', 'depthwise_conv2d')
    or by a compute pattern of a block:
      max / min: a float max / min in a stored value (ReLU, pooling, clipping);
      add: a spatial block adding two loaded values;
      conv2d: a reduction of a product whose input index adds a spatial and a reduction variable;
      depthwise: such a convolution where every (non-unit) reduction variable of the input slides
        with a spatial one (no channel reduction; a grouped form `co // g * g + rc` is a channel
        reduction);
      dense / batch_matmul: a reduction of a product of two loads with plain indices; batched when a
        spatial variable indexes both operands and the output;
      softmax: an exp together with a max reduction and a division.
    The 10th tag (reserved) is 0.
    """
    g = Graph(tvm.ir.save_json(mod), unit_vars=False)
    tags = np.zeros(TAG_DIM, dtype=np.float32)
    seen_exp = seen_max_reduce = seen_div = False
    for node in g.nodes:
        if node["type"] != "s_tir.SBlock":
            continue
        d = node["data"]
        name = g.string(d["name_hint"]).lower()
        for key, tag in _NAME_TAGS:
            if key in name:
                tags[_TAG[tag]] = 1
                if tag in ("softmax", "winograd", "depthwise", "batch_matmul", "conv2d"):
                    break
        reduce_vars, spatial_vars, wide_reduce = set(), set(), set()
        for iv in g.array(d["iter_vars"]):
            ivd = g.data(iv)
            (reduce_vars if ivd["iter_type"] == 2 else spatial_vars).add(ivd["var"])
            if ivd["iter_type"] == 2 and g.int_value(g.data(ivd["dom"])["extent"]) != 1:
                wide_reduce.add(ivd["var"])
        body = d["body"]
        if g.type(body) != "tirx.BufferStore":
            continue
        bd = g.data(body)
        value = g.expr(bd["value"])
        out_vars = set().union(*[free_vars(g.expr(x), set()) for x in g.array(bd["indices"])] or [set()])
        ops = _kinds(value, [])
        if "max" in ops:
            tags[_TAG["max"]] = 1
            seen_max_reduce |= bool(reduce_vars)
        if "min" in ops:
            tags[_TAG["min"]] = 1
        seen_exp |= any(k == "call" and "exp" in n for k, n in _calls(value, []))
        seen_div |= "div" in ops
        loads = [e for e in expr_loads(value, []) if e[2] != bd["buffer"]]
        if not reduce_vars:
            if value[0] == "add" and all(has_load(k) for k in value[3]):
                tags[_TAG["add"]] = 1
            continue
        products = [e for e in subexprs(value, []) if e[0] == "mul" and all(has_load(k) for k in e[3])]
        if not products or len(loads) < 2:
            continue
        mixed = [
            ld for ld in loads if any((v := free_vars(ix, set())) & reduce_vars and v & spatial_vars for ix in ld[3])
        ]
        if mixed:
            tags[_TAG["conv2d"]] = 1
            # depthwise: every (non-unit) reduction variable of the input slides with a spatial one
            window = all(
                _direct_vars(ix, set()) & spatial_vars or not (free_vars(ix, set()) & wide_reduce) for ix in mixed[0][3]
            )
            if window:
                tags[_TAG["depthwise"]] = 1
        else:
            shared = set.intersection(*[set().union(*[free_vars(ix, set()) for ix in ld[3]]) for ld in loads])
            batched = bool(shared & spatial_vars & out_vars)
            tags[_TAG["batch_matmul" if batched else "dense"]] = 1
    if seen_exp and seen_max_reduce and seen_div:
        tags[_TAG["softmax"]] = 1
    tags[_TAG["reserved"]] = 0
    return tags


def _direct_vars(e: tuple, out: set) -> set:
    """Variables of an index outside any division or modulo (the sliding part of a window)."""
    if e[0] == "v":
        out.add(e[2])
    elif e[0] not in ("fdiv", "div", "fmod", "mod"):
        for k in e[3]:
            _direct_vars(k, out)
    return out


def _kinds(e: tuple, out: list) -> set:
    return {x[0] for x in subexprs(e, out) if x[1].startswith(("float", "bfloat"))}


def _calls(e: tuple, out: list) -> list:
    return [(x[0], str(x[2])) for x in subexprs(e, out) if x[0] == "call"]
