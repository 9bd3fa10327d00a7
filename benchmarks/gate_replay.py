"""What would `verify_gate` have chosen in a finished tuning run? An offline replay on its database.

The measured records of one tuning database (a work dir) are taken in the order they were
measured (their line order), in batches of `--batch`; each batch is scored by PSA (from the shards'
PSA rows) and by a learned model (`--artifact`, e.g. the pretrained PAM a MoA run starts from,
without the run's online adaptation), the way `bridge.verify_gate.VerifyGate` scores a batch before
the verifier learns from it. Printed per database: both models' pairwise accuracy within the
batches, and the share of rounds in which the gate would have ranked by PSA. The verifier of a real
MoA run adapts as it goes, so this is the gate's choice for an unadapted verifier (an upper bound on
how often it sets the verifier aside), and the batches were picked by that run's own verifier.

    python -m data.featurize benchmarks/results/suite_databases/*/*-s0 --out runs/suite_shards --workers 2
    python benchmarks/gate_replay.py --shards runs/suite_shards \\
        --databases "[benchmarks/results/suite_databases/dense_128x3072x768/moa-s0]" \\
        --artifact benchmarks/weights/pam-suite-holdout-sm_90a.pt
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jsonargparse import CLI

from bridge.evaluate import score_shard_data
from bridge.export import load_model
from bridge.psa import get_device, psa_scores
from bridge.verify_gate import VerifyGate
from data.shards import ShardData, read_shards


def replay(scores_model: np.ndarray, scores_psa: np.ndarray, latency: np.ndarray, batch: int) -> dict:
    """The gate over consecutive batches of records in measurement order: the share of rounds it
    would rank by PSA, its choice per round, and each model's pairwise accuracy within the batches."""
    gate, gated, right, pairs = VerifyGate(), [], {"model": 0.0, "psa": 0.0}, 0
    for start in range(0, len(latency), batch):
        part = slice(start, start + batch)
        gated.append(gate.use_draft())
        m, p, n = gate.observe(scores_model[part], scores_psa[part], latency[part])
        right["model"], right["psa"], pairs = right["model"] + m, right["psa"] + p, pairs + n
    return {
        "rounds": len(gated),
        "psa_rounds": float(np.mean(gated)) if gated else float("nan"),
        "choices": "".join("P" if g else "v" for g in gated),
        "model_pairwise": right["model"] / pairs if pairs else float("nan"),
        "psa_pairwise": right["psa"] / pairs if pairs else float("nan"),
    }


def database_records(data: ShardData, db: str, shards: str) -> np.ndarray:
    """Indices of `data`'s records featurized from tuning database `db` (a work dir), in the order
    they were measured (their line order in its records file).

    Raises:
        ValueError: naming `shards`, when none of its records came from `db`.
    """
    source = [str(s).rsplit(":", 1) for s in data.record_source]
    mine = [i for i, (path, _) in enumerate(source) if Path(path).parent == Path(db)]
    if not mine:
        raise ValueError(f"{shards} holds no record of {db} (featurize it first)")
    return np.asarray(sorted(mine, key=lambda i: int(source[i][1])))


def gate_replay(
    shards: str, databases: tuple[str, ...], artifact: str, device: str = "h100", batch: int = 16
) -> dict[str, dict]:
    """Replay the gate on each database's records (found in `shards` by their source file).

    Args:
        shards: shards featurized from the databases (`python -m data.featurize`).
        databases: tuning work dirs whose records to replay, each on its own.
        artifact: the learned model (`bridge.export` file) in the verifier's place.
        device: PSA's device row.
        batch: records a round.
    """
    data = read_shards([shards])
    psa = psa_scores(data.psa_programs(), get_device(device))
    model = score_shard_data(load_model(artifact).net, data)
    out = {}
    for db in databases:
        idx = database_records(data, db, shards)
        out[db] = replay(model[idx], psa[idx], np.asarray(data.latency[idx], dtype=np.float64), batch)
        r = out[db]
        print(
            f"{db}: {r['rounds']} rounds, PSA chosen in {r['psa_rounds']:.0%} ({r['choices'][:20]}...); "
            f"pairwise within batches: model {r['model_pairwise']:.3f}, PSA {r['psa_pairwise']:.3f}"
        )
    return out


def main(argv: list[str] | None = None) -> dict:
    return CLI(gate_replay, args=argv, as_positional=False)


if __name__ == "__main__":
    main()
