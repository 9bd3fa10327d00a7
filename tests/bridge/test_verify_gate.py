"""bridge.verify_gate: the verifier or the draft, judged on measured batches before the verifier learns."""

import itertools

import numpy as np
import pytest
from test_search import context_for, matmul
from tvm.ir.utils import derived_object

from bridge.draft_verify import DraftVerifySearch
from bridge.psa import PSACostModel
from bridge.verify_gate import VerifyGate, concordant_pairs
from tvm_env import ms


def test_concordant_pairs_count_what_a_pair_by_pair_comparison_counts():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 5, 30).astype(float)  # ties in score count half
    latencies = rng.integers(1, 8, 30).astype(float)  # ties in latency are not compared
    latencies[[3, 11]] = np.inf  # failed runs are not compared
    right = pairs = 0.0
    for i, j in itertools.combinations(range(30), 2):
        if np.isfinite(latencies[i]) and np.isfinite(latencies[j]) and latencies[i] != latencies[j]:
            pairs += 1
            faster, slower = (i, j) if latencies[i] < latencies[j] else (j, i)
            right += 1.0 if scores[faster] > scores[slower] else 0.5 if scores[faster] == scores[slower] else 0.0
    assert concordant_pairs(scores, latencies) == (right, pairs)


def test_the_gate_prefers_the_better_ranker_of_recent_batches():
    gate = VerifyGate(min_pairs=60, decay=0.7)
    latency = np.arange(1.0, 9.0)  # 28 pairs a batch
    good, bad = -latency, latency
    gate.observe(bad, good, latency)
    assert not gate.use_draft() and gate.draft_acc == 1.0 and gate.verifier_acc == 0.0  # 28 pairs: too few
    gate.observe(bad, good, latency)
    gate.observe(bad, good, latency)
    assert gate.use_draft()  # 61 decayed pairs, the draft right on all
    gate.observe(good, bad, latency)  # the verifier has learned: it takes over once ahead
    assert gate.use_draft()
    gate.observe(good, bad, latency)
    assert not gate.use_draft() and gate.verifier_acc > gate.draft_acc
    with pytest.raises(ValueError, match="decay=0"):
        VerifyGate(decay=0)


@derived_object
class Negated(ms.cost_model.PyCostModel):
    """A verifier that ranks exactly against the given model."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def load(self, path):
        pass

    def save(self, path):
        pass

    def update(self, context, candidates, results):
        pass

    def predict(self, context, candidates):
        return -np.asarray(self.model.predict(context, candidates))


def test_a_verifier_that_ranks_worse_than_the_draft_is_set_aside_until_it_is_better():
    psa = PSACostModel(device="a100")
    strategy = DraftVerifySearch(draft=psa, population_size=48, potential_size=48, redraft_stall=0, verify_gate=True)
    context = context_for(matmul(), strategy)
    strategy.pre_tuning(200, 16, context.generate_design_space(), ms.database.MemoryDatabase(), Negated(psa))

    def measure(rounds, latency_of_score):
        """(the gate chose the draft before the round's search, the search asked the verifier) per round."""
        out = []
        for _ in range(rounds):
            before, gated = strategy.verify_model.scored, strategy._gate.use_draft()
            batch = strategy.generate_measure_candidates()
            out.append((gated, strategy.verify_model.scored > before))
            secs = [latency_of_score(s) for s in psa.predict(context, batch)]
            strategy.notify_runner_results(batch, [ms.runner.RunnerResult([t], None) for t in secs])
        return out

    # the draft ranks these batches right (its score is the inverse latency), the verifier wrong:
    # once the gate has seen enough pairs, the search stops asking the verifier
    rounds = measure(8, lambda s: 1.0 / (1.0 + s))
    assert all(gated != asked for gated, asked in rounds), rounds
    assert not rounds[0][0] and rounds[-1][0]
    assert strategy._gate.draft_acc > 0.9 and strategy._gate.verifier_acc < 0.1
    # now the verifier is right and the draft wrong: the verifier is asked again once it is ahead
    rounds = measure(4, lambda s: 1.0 + s)
    assert all(gated != asked for gated, asked in rounds), rounds
    assert rounds[0][0] and not rounds[-1][0]
    strategy.post_tuning()


@pytest.mark.parametrize(
    ("cost_model", "setting", "gated"),
    [
        ("pam-siamese-update", None, False),  # MoA adapts every round by default: not gated
        ("pam-siamese-update@4", None, True),  # adapting every 4th round (the published rate): gated
        ("pam-no-update", None, True),
        ("mlp-no-update", None, True),
        ("pam", None, False),  # learns from nothing: not asked before it has data anyway
        ("xgb", None, False),
        ("pam-siamese-update", False, False),  # --verify-gate false
        ("pam", True, True),  # --verify-gate true
    ],
)
def test_tune_runs_gate_a_pretrained_verifier_unless_told_otherwise(cost_model, setting, gated):
    from bridge.config import SearchConfig
    from bridge.factory import make_strategy, resolve_verify_gate

    cost_model, _, every = cost_model.partition("@")  # "name@K": --adapt-every K
    every = int(every) if every else None
    strategy = make_strategy(SearchConfig(psa="a100", verify_gate=setting), cost_model=cost_model, adapt_every=every)
    assert strategy.verify_gate is gated
    strategy = make_strategy(SearchConfig(verify_gate=setting), cost_model=cost_model)  # evolution: no gate
    assert not hasattr(strategy, "verify_gate")
    # what tune.py prints and records: the same decision, and off without a draft
    assert resolve_verify_gate(SearchConfig(psa="a100", verify_gate=setting), cost_model, every).verify_gate is gated
    assert resolve_verify_gate(SearchConfig(verify_gate=None), cost_model, every).verify_gate is False
