"""pruner_models.blend: standardizing within tasks and blending a model's scores with PSA's."""

import numpy as np
import pytest

from pruner_models.blend import blend_with_psa, log_psa, standardize


def test_standardize_within_each_group():
    scores = np.array([1.0, 2.0, 3.0, 10.0, 30.0, 5.0, 5.0])
    groups = np.array([0, 0, 0, 1, 1, 2, 2])
    z = standardize(scores, groups)
    for g in (0, 1):
        assert z[groups == g].mean() == pytest.approx(0.0) and z[groups == g].std() == pytest.approx(1.0)
    assert z[:3] == pytest.approx([-1.224744871, 0.0, 1.224744871])
    assert (z[groups == 2] == 0.0).all()  # all equal: no information, zeros
    assert standardize(scores[:3]) == pytest.approx(z[:3])  # one group by default


def test_log_psa_ranks_no_work_first_and_the_unscored_last():
    psa = np.array([1e-3, 1e-5, 0.0, np.inf, -np.inf, 4.0, -1.0])
    groups = np.array([0, 0, 0, 0, 0, 1, 2])
    out = log_psa(psa, groups)
    assert out[:2] == pytest.approx(np.log([1e-3, 1e-5]))
    assert out[2] == out[4] == pytest.approx(np.log(1e-5))  # failed lowering: the task's lowest
    assert out[3] == pytest.approx(np.log(1e-3) + np.log(2.0))  # no work estimated: above the best
    assert out[5] == pytest.approx(np.log(4.0)) and out[6] == 0.0  # a task with nothing scored


def test_blend_orders_by_model_psa_or_both():
    model = np.array([3.0, 2.0, 1.0, 0.0])
    psa = np.array([1e-6, 1e-4, 1e-3, 1e-5])  # PSA's order: 2, 1, 3, 0
    groups = np.zeros(4, dtype=int)
    assert list(np.argsort(-blend_with_psa(model, psa, groups, 0.0))) == [0, 1, 2, 3]
    assert list(np.argsort(-blend_with_psa(model, psa, groups, 1e6))) == [2, 1, 3, 0]
    both = blend_with_psa(model, psa, groups, 1.0)
    assert both == pytest.approx(standardize(model) + standardize(np.log(psa)))
    with pytest.raises(ValueError, match="weight"):
        blend_with_psa(model, psa, groups, -1.0)
    with pytest.raises(ValueError, match="shape"):
        standardize(model, groups[:3])
    with pytest.raises(ValueError, match="finite"):
        standardize(np.array([1.0, np.nan]))
