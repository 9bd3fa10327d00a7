"""PAM checkpoints alone, ensembled, and blended with PSA, on one hold-out's test records.

`benchmarks/quality.py` fits its rows; this scores checkpoints that fits left behind, so that
checkpoints of several runs on the same hold-out (other seeds, other options) can be compared and
ensembled without fitting again. Each checkpoint alone, then each group's ensemble (the members'
scores standardized within each task, then averaged, as quality.py's `pam-ens` row), then every one
of those blended with PSA at each `--psa_weights` (`pruner_models.blend.blend_with_psa`, as the
`pam+psa` row and the search's `--psa-weight`). A hold-out's test records do not depend on the seed,
so one reference split (seed 0) scores them all.

    python benchmarks/ensemble_blend.py --shards runs/h100_shards_34k --test_networks "[resnet_50]" \\
        --groups "{base: [runs/a/pam/version_0/checkpoints/best.ckpt, ...], valnet: [...]}" \\
        --json_out benchmarks/results/quality/pam_ablation/h100_34k_valnet/resnet_50_ensembles_psa.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from jsonargparse import CLI

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.quality import (  # noqa: E402
    REPO,
    _test_tasks,
    checkpoint_test_scores,
    psa_test_scores,
    reference_datamodule,
    test_metrics,
)
from data.atomic import atomic_write_text  # noqa: E402
from data.shards import read_shards  # noqa: E402
from pruner_models.blend import blend_with_psa, standardize  # noqa: E402

__all__ = ["ensemble_blend"]


def ensemble_blend(
    shards: str,
    test_networks: list[str],
    groups: dict[str, list[str]],
    psa_device: str = "h100",
    psa_weights: list[float] = [0.5, 1.0],  # noqa: B006 (jsonargparse needs a literal default)
    json_out: str | None = None,
) -> dict[str, dict[str, float]]:
    """Rows of test metrics: each checkpoint, each group's ensemble and (with two groups or more)
    all distinct checkpoints' ensemble, each also blended with PSA at every weight.

    Args:
        shards: the shard folder the checkpoints were trained on.
        test_networks: the hold-out's test networks (every checkpoint's).
        groups: {name: checkpoint paths}; a name labels its checkpoints' rows and its ensemble's.
        psa_device: PSA's device row (configs/devices.yaml).
        psa_weights: PSA's weights in the blended rows.
        json_out: also write the rows there (JSON).
    """
    if not groups or not all(groups.values()):
        raise ValueError(f"groups={groups!r}: every group needs at least one checkpoint")
    data_args = ["--data.shards", shards, "--data.split", "hold-out", "--data.test_networks", json.dumps(test_networks)]
    dm = reference_datamodule(REPO / "configs" / "pam.yaml", data_args, [])
    task = _test_tasks(dm)
    psa = psa_test_scores(dm, read_shards(shards), psa_device)
    z = {c: standardize(checkpoint_test_scores(dm, c), task) for members in groups.values() for c in members}
    members = {f"{name} {i}": [c] for name, group in groups.items() for i, c in enumerate(group)}
    members |= {f"{name} ensemble ({len(group)})": group for name, group in groups.items() if len(group) > 1}
    if len(groups) > 1:
        members[f"all ensemble ({len(z)})"] = list(z)
    rows: dict[str, dict[str, float]] = {}
    for name, checkpoints in members.items():
        scores = np.mean([z[c] for c in checkpoints], axis=0)
        rows[name] = test_metrics(scores, dm)
        for weight in psa_weights:
            rows[f"{name} + psa {weight:g}"] = test_metrics(blend_with_psa(scores, psa, task, weight), dm)
    for name, row in rows.items():
        print(
            f"{name:32s} pairwise {row['test_pairwise_acc']:.4f}  peak@1 {row['test_peak@1']:.4f}  peak@5 {row['test_peak@5']:.4f}"
        )
    if json_out:
        atomic_write_text(Path(json_out), json.dumps({"checkpoints": groups, "rows": rows}, indent=1) + "\n")
    return rows


def main(argv: list[str] | None = None) -> dict:
    return CLI(ensemble_blend, args=argv, as_positional=False)


if __name__ == "__main__":
    main()
