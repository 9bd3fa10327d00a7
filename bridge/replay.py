"""The bounded replay of online training: which of a run's measured records one update trains on.

`PrunerCostModel` keeps every record it measured in a run, per task. An update trains on at most
`replay` of them: every record of the newest batch, and a random sample of the earlier ones, so
that the cost of an update stops growing with the number of trials (`bridge.cost_model`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from data.batch import make_batch
from data.labels import normalized_throughput

__all__ = ["replay_batches"]


def replay_batches(
    data: Mapping[str, Mapping[str, list]],
    tags: Mapping[str, np.ndarray],
    newest: Sequence[tuple[str, int]],
    *,
    replay: int,
    batch_size: int,
    rng: np.random.Generator,
) -> list[dict[str, torch.Tensor]]:
    """Task-grouped training batches of at most `replay` records of `data` (task key -> "stmt", "gemm"
    and "latency" lists, a record an index; `tags`: task key -> workload tags): every record in
    `newest` ((task key, index) pairs) and a random sample of the others, drawn with `rng`.

    A task enters once it has two records with different labels (labels are per task, over all
    its records). Tasks are packed whole into batches of up to `batch_size` records; a larger
    task is split into random chunks.
    """
    labels = {key: normalized_throughput(np.asarray(task["latency"])) for key, task in data.items()}
    usable = {key for key, lab in labels.items() if len(lab) >= 2 and np.ptp(lab) > 0}
    fresh = [(k, i) for k, i in newest if k in usable]
    chosen = set(fresh)
    older = [(k, i) for k in sorted(usable) for i in range(len(labels[k])) if (k, i) not in chosen]
    room = max(0, replay - len(fresh))
    if len(older) > room:
        older = [older[j] for j in rng.choice(len(older), room, replace=False)]
    picked: dict[str, list[int]] = {}
    for k, i in [*fresh[:replay], *older]:
        picked.setdefault(k, []).append(i)
    groups = []
    for key in sorted(picked):
        order = rng.permutation(np.asarray(picked[key]))
        if len(order) < 2:
            continue
        for start in range(0, len(order), batch_size):
            groups.append((key, order[start : start + batch_size], labels[key]))
    batches, current, size = [], [], 0
    for group in groups:
        if current and size + len(group[1]) > batch_size:
            batches.append(_batch(data, tags, current))
            current, size = [], 0
        current.append(group)
        size += len(group[1])
    if current:
        batches.append(_batch(data, tags, current))
    return [b for b in batches if len(b["label"]) >= 2]


def _batch(data, tags, groups: list[tuple[str, np.ndarray, np.ndarray]]) -> dict[str, torch.Tensor]:
    stmt, gemm, tag_rows, label, task = [], [], [], [], []
    for t, (key, index, labels) in enumerate(groups):
        records = data[key]
        stmt += [records["stmt"][i] for i in index]
        gemm += [records["gemm"][i] for i in index]
        tag_rows.append(np.repeat(tags[key][None], len(index), axis=0))
        label.append(labels[index])
        task.append(np.full(len(index), t))
    return make_batch(stmt, np.concatenate(tag_rows), np.stack(gemm), np.concatenate(label), np.concatenate(task))
