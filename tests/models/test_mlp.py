"""TenSet MLP: the TenSet layer sizes, shared statement encoder, no GEMM input."""

import numpy as np
import torch

from data.batch import make_batch
from data.schema import ACCESS_DIM, GEMM_ROWS, STMT_DIM
from pruner_models.mlp import MLPConfig, MLPNet
from pruner_models.pam import PAMNet, StatementEncoder


def test_parameter_count_is_tensets():
    # statement encoder (174*256 + 256) + (256*256 + 256) = 110592; 2 residual blocks 2*(256*256 + 256)
    # = 131584; output 256 + 1 = 257; no BatchNorm (TenSet's use_norm=False)
    assert sum(p.numel() for p in MLPNet().parameters()) == 110592 + 131584 + 257
    assert sum(p.numel() for p in MLPNet(MLPConfig(batch_norm=True)).parameters()) == 110592 + 131584 + 257 + 512


def test_shares_the_statement_encoder_with_pam():
    assert type(MLPNet().stmt_encoder) is type(PAMNet().stmt_encoder) is StatementEncoder


def test_scores_ignore_the_gemm_matrix_and_batch_of_one_works():
    rng = np.random.default_rng(0)
    stmt = [rng.random((n, STMT_DIM), dtype=np.float32) for n in (3, 1, 0, 5)]
    tags = np.zeros(10, np.float32)
    net = MLPNet(MLPConfig(hidden=16)).eval()
    a = net(make_batch(stmt, tags, np.zeros((4, GEMM_ROWS, ACCESS_DIM))))
    b = net(make_batch(stmt, tags, rng.random((4, GEMM_ROWS, ACCESS_DIM))))
    assert a.shape == (4,)
    torch.testing.assert_close(a, b)
    one = net(make_batch(stmt[:1], tags, np.zeros((1, GEMM_ROWS, ACCESS_DIM))))
    torch.testing.assert_close(one, a[:1])
