"""The verifier's scores blended with PSA's, as a MetaSchedule cost model (`pruner_models.blend`).

`PSABlendCostModel` scores a task's candidates with the verifier (e.g. a pretrained PAM) and with
the draft model (PSA), standardizes both over the candidates scored together (one task's: a
MetaSchedule context is one task), and returns softplus(z(verifier) + weight * z(log PSA)):
positive, because MetaSchedule's evolution samples parents in proportion to the scores, and in the
blend's order. A verifier that scores every candidate the same (cold: no data yet) is returned as
it is, so the search's cold start (PSA's order) still sees it. `update`, `save` and `load` go to
the verifier; PSA never trains.

`DraftVerifySearch(psa_weight=w)` (`tune.py --psa-weight w`) ranks its potential space and evolves
its verifier generations with it. Offline, on networks the models never saw, weight 1 raised PAM's
peak@1 by 0.03-0.10 at the same pairwise accuracy (docs/benchmarks.md, "Model quality"); what it
does to a tuning run is a GPU measurement (the tuning suite's next A/B).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm.ir.utils import derived_object

from pruner_models.blend import blend_with_psa
from tvm_env import ms

__all__ = ["PSABlendCostModel"]


@derived_object
class PSABlendCostModel(ms.cost_model.PyCostModel):
    """softplus(z(model) + weight * z(log draft)) over the candidates scored together (module docstring)."""

    def __init__(self, *, model: Any, draft: Any, weight: float):
        super().__init__()
        if not np.isfinite(weight) or weight < 0:
            raise ValueError(f"psa_weight={weight!r} must be finite and >= 0")
        self.model, self.draft, self.weight = model, draft, float(weight)

    def load(self, path: str) -> None:
        self.model.load(path)

    def save(self, path: str) -> None:
        self.model.save(path)

    def update(self, context, candidates, results) -> None:
        self.model.update(context, candidates, results)

    def predict(self, context, candidates) -> np.ndarray:
        """(n,) float64 positive scores in the blend's order; the verifier's own while it is cold."""
        candidates = list(candidates)
        scores = np.asarray(self.model.predict(context, candidates), dtype=np.float64)
        if len(scores) < 2 or np.ptp(scores) == 0.0 or self.weight == 0.0:
            return scores
        psa = np.asarray(self.draft.predict(context, candidates), dtype=np.float64)
        return np.logaddexp(0.0, blend_with_psa(scores, psa, None, self.weight))
