"""PAMNet: the published layer sizes, shapes, segment sum, normalization buffers, eval-mode scoring."""

import numpy as np
import pytest
import torch

from data.batch import make_batch
from data.schema import ACCESS_DIM, GEMM_ROWS, ROW_DIM, STMT_DIM, TAG_DIM
from pruner_models.pam import PAMConfig, PAMNet, segment_sum


def _programs(rng, num, rows=(0, 9)):
    stmt = [rng.random((int(n), STMT_DIM), dtype=np.float32) * 10 for n in rng.integers(*rows, size=num)]
    tags = rng.integers(0, 2, size=(num, TAG_DIM)).astype(np.float32)
    gemm = rng.random((num, GEMM_ROWS, ACCESS_DIM), dtype=np.float32) * 5
    return stmt, tags, gemm


def test_parameter_count_is_the_published_417k():
    # statement encoder: (174*256 + 256) + (256*256 + 256)            = 44800 + 65792 = 110592
    # GEMM encoder:      (23*64 + 64) + (64*128 + 128)                = 1536 + 8320   = 9856
    # attention:         in_proj 3*128*128 + 3*128, out_proj 128*128 + 128 = 49536 + 16512 = 66048
    # fuse:              384*256 + 256                                                   = 98560
    # decoder:           BatchNorm 2*256 + 2 blocks (256*256 + 256) + (256 + 1)  = 512 + 131584 + 257 = 132353
    expected = 110592 + 9856 + 66048 + 98560 + 132353
    assert expected == 417409
    assert sum(p.numel() for p in PAMNet().parameters()) == expected


def test_forward_shapes_and_empty_programs():
    rng = np.random.default_rng(0)
    stmt, tags, gemm = _programs(rng, 7)
    stmt[3] = np.zeros((0, STMT_DIM), np.float32)  # a program without store statements
    batch = make_batch(stmt, tags, gemm)
    assert batch["rows"].shape == (sum(len(s) for s in stmt), ROW_DIM)
    net = PAMNet(PAMConfig(stmt_hidden=16, gemm_hidden=8, gemm_embed=8, heads=4, fuse_hidden=16)).eval()
    out = net(batch)
    assert out.shape == (7,) and out.dtype == torch.float32 and torch.isfinite(out).all()


def test_eval_scores_do_not_depend_on_the_batch_and_batch_of_one_works():
    rng = np.random.default_rng(1)
    stmt, tags, gemm = _programs(rng, 6, rows=(1, 6))
    net = PAMNet()
    net.train()
    net(make_batch(stmt, tags, gemm))  # moves the BatchNorm running statistics away from the init
    net.eval()
    with torch.no_grad():
        together = net(make_batch(stmt, tags, gemm))
        alone = torch.cat([net(make_batch(stmt[i : i + 1], tags[i : i + 1], gemm[i : i + 1])) for i in range(6)])
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-5)


def test_segment_sum_matches_a_loop():
    rng = np.random.default_rng(2)
    values = torch.from_numpy(rng.random((11, 3), dtype=np.float32))
    segment = torch.tensor([0, 0, 1, 1, 1, 3, 3, 3, 3, 4, 4])
    out = segment_sum(values, segment, 6)
    expected = torch.stack([values[segment == i].sum(0) for i in range(6)])
    torch.testing.assert_close(out, expected)
    assert out[2].abs().sum() == 0 and out[5].abs().sum() == 0


def test_scales_divide_the_raw_inputs():
    rng = np.random.default_rng(3)
    stmt, tags, gemm = _programs(rng, 5, rows=(1, 5))
    stmt_scale = torch.from_numpy(rng.random(ROW_DIM, dtype=np.float32) * 10 + 0.5)
    access_scale = torch.from_numpy(rng.random(ACCESS_DIM, dtype=np.float32) * 10 + 0.5)
    net = PAMNet().eval()
    scaled = PAMNet().eval()
    scaled.load_state_dict(net.state_dict())
    scaled.set_scales(stmt_scale, access_scale)
    raw = make_batch(stmt, tags, gemm)
    pre = dict(raw, rows=raw["rows"] / stmt_scale, gemm=raw["gemm"] / access_scale)
    with torch.no_grad():
        torch.testing.assert_close(scaled(raw), net(pre), rtol=1e-5, atol=1e-5)
    assert {"stmt_scale", "access_scale"} <= set(scaled.state_dict())


def test_bad_scales_and_configs_raise():
    net = PAMNet(PAMConfig(stmt_hidden=8, gemm_hidden=8, gemm_embed=8, heads=2, fuse_hidden=8))
    with pytest.raises(ValueError, match="stmt_scale"):
        net.set_scales(torch.ones(ROW_DIM - 1), torch.ones(ACCESS_DIM))
    with pytest.raises(ValueError, match="access_scale"):
        net.set_scales(torch.ones(ROW_DIM), torch.zeros(ACCESS_DIM))
    with pytest.raises(ValueError, match="heads"):
        PAMConfig(gemm_embed=10, heads=4)
    with pytest.raises(ValueError, match="stmt_hidden"):
        PAMConfig(stmt_hidden=0)


def test_bf16_autocast_forward_and_backward():
    rng = np.random.default_rng(4)
    batch = make_batch(*_programs(rng, 4, rows=(1, 4)))
    net = PAMNet(PAMConfig(stmt_hidden=16, gemm_hidden=8, gemm_embed=8, heads=2, fuse_hidden=16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = net(batch)
    assert out.dtype == torch.float32 and out.shape == (4,)
    out.sum().backward()
    assert net.stmt_encoder.mlp[0].weight.grad is not None
