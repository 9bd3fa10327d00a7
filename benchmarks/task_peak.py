"""Which held-out tasks does a model's peak@1 lose on? Peak@1 task by task, for checkpoints and PSA.

Peak@1 of a hold-out is a mean over its tasks of (the task's best latency / the latency of the
model's top-ranked record), weighted by the tasks' records. With 23 tasks, one missed task moves
it by several hundredths, so this prints each task's value for each checkpoint (each rebuilds the split of its seed, as `benchmarks/quality.py`
does) and for PSA, worst first, with the task's networks and its share of the shortfall from 1 (records x (1 - peak@1),
a mean over the checkpoints).

    python benchmarks/task_peak.py --shards runs/h100_shards_31k --test_networks "[resnet_50]" \\
        --checkpoints "[runs/q/s0/pam/version_0/checkpoints/best.ckpt, ...]" --seeds "[0, 1, 2]" \\
        --json_out benchmarks/results/quality/pam_ablation/h100_31k_pamxgb/resnet_50_per_task_peak1.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from jsonargparse import CLI

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.quality import REPO, checkpoint_test_scores, psa_test_scores, reference_datamodule  # noqa: E402
from data.shards import read_shards  # noqa: E402
from pruner_models.metrics import PeakScore  # noqa: E402

__all__ = ["task_peak", "task_peaks"]


def task_peaks(scores: np.ndarray, labels: np.ndarray, task: np.ndarray) -> dict[int, float]:
    """{task id: peak@1 of the task's records} (`pruner_models.metrics.PeakScore.compute_per_task`;
    labels: the task's best latency / latency)."""
    metric = PeakScore(k=1).set_dtype(torch.float64)
    metric.update(torch.as_tensor(scores, dtype=torch.float64), torch.as_tensor(labels), torch.as_tensor(task))
    _, values = metric.compute_per_task()
    return dict(zip(np.unique(task).tolist(), values.tolist()))


def task_peak(
    shards: str,
    test_networks: list[str],
    checkpoints: list[str],
    seeds: list[int],
    psa_device: str | None = "h100",
    json_out: str | None = None,
) -> dict[str, dict]:
    """Per-task peak@1 of each checkpoint (its seed's hold-out split) and of PSA.

    Args:
        shards: the shards the checkpoints were trained on.
        test_networks: the held-out networks (`quality.py --test-networks`).
        checkpoints: train.py checkpoints, one a seed.
        seeds: the split seed of each checkpoint (`quality.py --seed`).
        psa_device: PSA's device row (None: no PSA column).
        json_out: also write {task key: {"networks", "records", "<model>": peak@1}} here.
    """
    if len(checkpoints) != len(seeds) or not checkpoints:
        raise ValueError(f"{len(checkpoints)} checkpoints for {len(seeds)} seeds: give one seed a checkpoint")
    rows: dict[str, dict] = {}
    for i, (ckpt, seed) in enumerate(zip(checkpoints, seeds)):
        data_args = ["--data.shards", shards, "--data.split", "hold-out"]
        data_args += ["--data.test_networks", json.dumps(test_networks), "--data.seed", str(seed)]
        dm = reference_datamodule(REPO / "configs" / "pam.yaml", [*data_args, "--seed_everything", str(seed)], [])
        test = torch.from_numpy(dm.splits["test"])
        labels, task = dm.store.label[test].double().numpy(), dm.store.record_task[test].numpy()
        columns = {f"s{seed}": checkpoint_test_scores(dm, ckpt)}
        if psa_device and i == 0:  # PSA does not train: one split's test records are every split's
            data = read_shards(dm.hparams.shards, networks=dm.hparams.networks)
            columns["psa"] = psa_test_scores(dm, data, psa_device)
        for name, scores in columns.items():
            for t, peak in task_peaks(scores, labels, task).items():
                key = str(dm.tasks["task_key"][t])
                row = rows.setdefault(
                    key, {"networks": str(dm.tasks["task_networks"][t]), "records": int((task == t).sum())}
                )
                row[name] = peak
    fits = [f"s{s}" for s in seeds]
    records = {k: r["records"] for k, r in rows.items()}
    n = sum(records.values())
    # the ranking metrics' peak@1 is record-weighted over tasks; so is each task's share of its shortfall
    shortfall = {k: records[k] * sum(1 - r[f] for f in fits) / len(fits) for k, r in rows.items()}
    total = sum(shortfall.values()) or 1.0
    names = [*fits, *(["psa"] if psa_device else [])]
    means = {name: sum(r[name] * records[k] for k, r in rows.items()) / n for name in names}
    print(f"peak@1 over {len(rows)} tasks ({n} records): " + ", ".join(f"{k} {v:.3f}" for k, v in means.items()))
    for key in sorted(rows, key=shortfall.get, reverse=True):
        r = rows[key]
        cells = " ".join(f"{r[k]:.2f}" for k in names)
        print(f"{cells}  shortfall share {shortfall[key] / total:.2f}  {r['records']:4d}  {key}  ({r['networks']})")
    if json_out:
        Path(json_out).write_text(json.dumps(rows, indent=1))
    return rows


def main(argv: list[str] | None = None) -> dict:
    return CLI(task_peak, args=argv, as_positional=False)


if __name__ == "__main__":
    main()
