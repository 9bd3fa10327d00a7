"""Does a pretrained verifier that adapts online rank a run's next batch better than one learned from
nothing? An offline replay of online learning on a finished tuning run's database.

The measured records of one tuning database (a work dir) are taken in the order they were measured
(their line order), in batches of `--batch`. Before each batch is learned from, every variant scores
it, the way `bridge.verify_gate` judges a batch; then each variant learns from it through the cost
model a tuning run uses (`bridge.cost_model.PrunerCostModel.learn`, the code path of `update`, with
the records' features read back from the shards). Variants:

- `pam`: Pruner online, a PAM from nothing, retrained every batch (bounded as in tuning). Until it has
  learned from a batch it ranks as PSA, as the search's cold start does.
- `pam-rN`: the same with `replay` N: once it holds more than N records it continues training the
  current network for `warm_epochs` instead of retraining a fresh one (tuning's N is 1,024).
- `moa-K`: MoA, the pretrained `--artifact` adapted every K-th batch (`pam-siamese-update`, the
  paper's K is 4).
- `pretrained`: the artifact, never adapted (`pam-no-update`).
- `psa`: the draft model alone.
- `pam&moa-K`: both learners side by side, each learning as above; their scores standardized within
  the batch and summed (the cold `pam` adds nothing until it has learned from a batch).

With `--psa_weight w`, each learned variant is also ranked blended with PSA (`<variant>+psa`:
z(scores) + w z(log PSA) within the batch, tuning's `--psa-weight`). With `--gate true`, each is also
ranked behind the verify gate (`<variant>+gate`: PSA's order while PSA ordered the task's earlier
batches better, `bridge.verify_gate`; on by default for MoA in tuning).

Printed per database and variant, over the first `--rounds` batches: the pairwise accuracy within
the batches (pairs of one task with different latencies) and the batches' peak@1 (the batch's best
latency / the latency of the variant's top pick, a mean over batches); the JSON also has each
learner's seconds of learning (`learn_s`, on this host's CPU: a tuning run trains on its GPU). The batches were picked by
the run's own search, so this compares the verifiers on the schedules one run measured, not on what
each would have picked. The online fits' results depend on torch's CPU thread count (the
floating-point order of their sums), so compare runs made with the same `OMP_NUM_THREADS`.

    python -m data.featurize benchmarks/results/suite_databases/defaults/*/pruner-s0 --out runs/suite_shards --workers 2
    OMP_NUM_THREADS=1 python benchmarks/adapt_replay.py --shards runs/suite_shards --artifact benchmarks/weights/pam-suite-holdout-sm_90a.pt \\
        --databases "[benchmarks/results/suite_databases/defaults/dense_128x3072x768/pruner-s0]" --rounds 12
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jsonargparse import CLI  # noqa: E402 - after the path insert, as the other benchmarks

from benchmarks.gate_replay import database_records  # noqa: E402
from bridge.psa import get_device, psa_scores  # noqa: E402
from bridge.verify_gate import VerifyGate, concordant_pairs  # noqa: E402
from data.shards import ShardData, read_shards  # noqa: E402
from pruner_models.blend import blend_with_psa, check_weight, standardize  # noqa: E402

__all__ = ["adapt_replay", "record_features", "replay_database", "variant_model", "workload_means"]


class _Ensemble:
    """Two or more learners scored as one: z(scores) within the batch, summed over the trained members.
    The members share one `tags` dict, so a replay that sets a task's tags sets them for all."""

    def __init__(self, *members):
        self.members, self.tags = members, {}
        for member in members:
            member.tags = self.tags

    @property
    def trained(self) -> bool:
        return any(m.trained for m in self.members)

    def score_features(self, key: str, feats) -> np.ndarray:
        trained = [m for m in self.members if m.trained]
        if not trained:
            return np.ones(len(feats))
        return np.sum([standardize(m.score_features(key, feats)) for m in trained], axis=0)

    def learn(self, key: str, feats, latencies) -> None:
        for member in self.members:
            member.learn(key, feats, latencies)


def variant_model(name: str, artifact: str | None, seed: int, epochs: int):
    """A fresh learner of variant `name` (module docstring; None for `psa`, the draft model)."""
    from bridge.cost_model import PrunerCostModel

    if "&" in name:
        members = [variant_model(part, artifact, seed, epochs) for part in name.split("&")]
        if None in members:
            raise ValueError(f"variant {name!r}: only learners join with & (psa is the draft model, not a learner)")
        return _Ensemble(*members)
    if name == "pam" or (name.startswith("pam-r") and name[5:].isdigit() and int(name[5:]) >= 1):
        replay = {} if name == "pam" else {"replay": int(name[5:])}  # pam: tuning's own replay
        return PrunerCostModel(
            mode="pam", device="cpu", seed=seed, epochs=epochs, workers=1, background=False, **replay
        )
    if name == "pretrained":
        return PrunerCostModel(
            mode="pam-no-update", artifact=artifact, device="cpu", seed=seed, workers=1, background=False
        )
    if name.startswith("moa-") and name[4:].isdigit() and int(name[4:]) >= 1:
        return PrunerCostModel(
            mode="pam-siamese-update",
            artifact=artifact,
            device="cpu",
            seed=seed,
            epochs=epochs,
            adapt_every=int(name[4:]),
            workers=1,
            background=False,  # a replay has nothing to overlap the training with, and times it (learn_s)
        )
    if name == "psa":
        return None
    raise ValueError(
        f"variant {name!r}: one of pam, pam-rN, pretrained, psa, moa-K (K >= 1, N >= 1), or learners joined by &"
    )


def record_features(data: ShardData, i: int) -> tuple[np.ndarray, np.ndarray]:
    """Record `i`'s (statement rows, GEMM row), as `PrunerCostModel.learn` and `score_features` take them."""
    return data.stmt[data.stmt_ptr[i] : data.stmt_ptr[i + 1]], data.gemm[i]


def replay_database(
    data: ShardData,
    records: np.ndarray,
    psa: np.ndarray,
    models: dict,
    batch: int,
    rounds: int,
    psa_weight: float | None = None,
    gate: bool = False,
) -> dict[str, dict[str, float]]:
    """Score, then learn, batch by batch; returns {variant: {"pairwise", "peak1", "batches"}}.

    Args:
        data: the shards holding `records`.
        records: indices into `data`, in measurement order.
        psa: PSA scores of every record of `data`.
        models: variant name -> a fresh `PrunerCostModel` (None: PSA alone).
        batch, rounds: records a batch; batches replayed at most.
        psa_weight: also rank each learned variant's scores blended with PSA's within the batch
            (`pruner_models.blend`, tuning's `--psa-weight`), as "<variant>+psa".
        gate: also rank each learned variant behind the verify gate (`bridge.verify_gate.VerifyGate`, one
            a task, as in tuning: PSA's order while PSA ordered the earlier batches better), as "<variant>+gate".
    """
    learners = {n: m for n, m in models.items() if m is not None}
    names = [
        *models,
        *(f"{n}+psa" for n in learners if psa_weight is not None),
        *(f"{n}+gate" for n in learners if gate),
    ]
    gates: dict[tuple[str, str], VerifyGate] = {}
    right = {name: 0.0 for name in names}
    learn_s = dict.fromkeys(learners, 0.0)
    peaks = {name: [] for name in names}
    pairs = 0
    for model in learners.values():
        for t in np.unique(data.record_task[records]):
            model.tags[str(data.task_key[t])] = data.task_tags[t]
    done = 0
    for start in range(0, len(records), batch):
        if done == rounds:
            break
        part = records[start : start + batch]
        for t in np.unique(data.record_task[part]):
            mine = part[data.record_task[part] == t]
            latency = np.asarray(data.latency[mine], dtype=np.float64)
            finite = np.isfinite(latency)
            key, feats = str(data.task_key[t]), [record_features(data, i) for i in mine]
            n = concordant_pairs(psa[mine], latency)[1]
            pairs += n
            ranked = {name: psa[mine] for name in models if name not in learners}
            for name, model in learners.items():
                own = model.score_features(key, feats)  # all equal before any training
                ranked[name] = own if model.trained else psa[mine]  # the cold start ranks as PSA
                if f"{name}+psa" in right:  # a cold model's equal scores leave the order to PSA, as in tuning
                    ranked[f"{name}+psa"] = blend_with_psa(own, psa[mine], weight=psa_weight)
                if f"{name}+gate" in right:
                    judge = gates.setdefault((name, key), VerifyGate())
                    ranked[f"{name}+gate"] = psa[mine] if judge.use_draft() else ranked[name]
                    judge.observe(ranked[name], psa[mine], latency)  # scored before the verifier learns
            for name, scores in ranked.items():
                right[name] += concordant_pairs(scores, latency)[0]
                if finite.sum() >= 2:
                    top = int(np.argmax(scores))  # a pick that fails counts 0, as it would in tuning
                    peaks[name].append(latency[finite].min() / latency[top] if np.isfinite(latency[top]) else 0.0)
            for name, model in learners.items():
                start_s = time.perf_counter()
                model.learn(key, feats, latency)
                learn_s[name] += time.perf_counter() - start_s
        done += 1
    return {
        name: {
            "pairwise": right[name] / pairs if pairs else float("nan"),
            "peak1": float(np.mean(peaks[name])) if peaks[name] else float("nan"),
            "batches": float(done),
            **({"learn_s": learn_s[name]} if name in learn_s else {}),
        }
        for name in names
    }


def _cell(name: str, row: dict[str, float]) -> str:
    """A variant's printed result: pairwise / peak@1, and a learner's seconds of learning."""
    learn = f" ({row['learn_s']:.1f} s learning)" if "learn_s" in row else ""
    return f"{name} {row['pairwise']:.3f} / {row['peak1']:.3f}{learn}"


def workload_means(results: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """{variant: {"pairwise", "peak1", "workloads"}}: the mean over workloads (a database's parent folder,
    e.g. dense_128x3072x768) of the mean over that workload's databases (its seeds)."""
    by_workload: dict[str, list[dict]] = {}
    for db, rows in results.items():
        by_workload.setdefault(Path(db).parent.name, []).append(rows)
    out = {}
    for name in next(iter(results.values())):
        cells = [[r[name] for r in rows] for rows in by_workload.values()]
        out[name] = {
            metric: float(np.mean([np.mean([c[metric] for c in cell]) for cell in cells]))
            for metric in ("pairwise", "peak1", "learn_s")
            if all(metric in c for cell in cells for c in cell)
        }
        out[name]["workloads"] = float(len(cells))
    return out


def adapt_replay(
    shards: str,
    databases: tuple[str, ...],
    artifact: str,
    variants: tuple[str, ...] = ("psa", "pam", "pretrained", "moa-4", "moa-1"),
    device: str = "h100",
    batch: int = 32,
    rounds: int = 12,
    epochs: int = 50,
    seed: int = 0,
    psa_weight: float | None = None,
    gate: bool = False,
    json_out: str | None = None,
) -> dict[str, dict[str, dict[str, float]]]:
    """Replay online learning on each database's records (found in `shards` by their source file).

    Args:
        shards: shards featurized from the databases (`python -m data.featurize`).
        databases: tuning work dirs whose records to replay, each on its own.
        artifact: the pretrained model (`bridge.export` file or train.py checkpoint) of the moa-K and
            pretrained variants.
        variants: see the module docstring.
        device: PSA's device row.
        batch: records a batch (a tuning round).
        rounds: batches replayed at most, from the run's start.
        epochs: maximum epochs of each online training (tuning's default 50).
        seed: seeds the online trainings.
        psa_weight: also report each learned variant blended with PSA at this weight ("<variant>+psa").
        gate: also report each learned variant behind the verify gate ("<variant>+gate"; MoA's default).
        json_out: also write the results here.
    """
    if batch < 2 or rounds < 1:
        raise ValueError(f"batch={batch!r} must be >= 2 and rounds={rounds!r} >= 1")
    if psa_weight is not None:
        check_weight(psa_weight, f"--psa_weight {psa_weight!r}")
    data = read_shards([shards])
    psa = psa_scores(data.psa_programs(), get_device(device))
    out = {}
    for db in databases:
        mine = database_records(data, db, shards)
        models = {name: variant_model(name, artifact, seed, epochs) for name in variants}
        out[db] = replay_database(data, mine, psa, models, batch, rounds, psa_weight, gate)
        cells = ", ".join(_cell(n, r) for n, r in out[db].items())
        print(f"{db} ({int(next(iter(out[db].values()))['batches'])} batches of {batch}; pairwise / peak@1): {cells}")
    if len(out) > 1:
        means = workload_means(out)
        cells = ", ".join(_cell(n, r) for n, r in means.items())
        print(f"mean over {int(next(iter(means.values()))['workloads'])} workloads of their databases: {cells}")
    if json_out:
        Path(json_out).write_text(json.dumps(out, indent=1))
    return out


def main(argv: list[str] | None = None) -> dict:
    return CLI(adapt_replay, args=argv, as_positional=False)


if __name__ == "__main__":
    main()
