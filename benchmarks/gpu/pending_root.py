"""Copy the unfinished tasks of a record tree into a small root of their own, for a device call
that cannot carry the whole dataset beside the TVM kit (67.1 MB in all).

    python benchmarks/gpu/pending_root.py --root data/h100 --out pending --per_task 48

writes pending/<device>/ with every task folder of data/h100/<device> that holds fewer than
--per_task records (planned ones included) and an index.json that lists only those tasks (their
networks' rows, the skipped tasks and the collections are kept). On the device,
`ROOT=pending TOP_UP=1 PER_TASK=48 bash benchmarks/gpu/collect.sh` tops them up (same seed: the
tasks keep their stored records, so nothing already stored is drawn again); back here,
`tar -C /tmp/p -xJf h100_collect.tar.xz && python -m data.merge /tmp/p data/h100` joins them.

`--parts N` splits the tasks over N roots (OUT1 ... OUTN, every N-th task in each), one for each of N
device calls in a row: each call tops up its own part, so no call repeats another's tasks, and the
parts need no merging in between (they all travel, if they fit: the device tool's carry limit).

`--networks` keeps only the tasks of those networks, and `--without_networks` drops every task that one
of those networks also has: e.g. more records for the networks that train a model tested on ResNet-50,
none of them ResNet-50's own (its tasks are held out, so topping them up would not reach training):

    python benchmarks/gpu/pending_root.py --root data/h100 --out pend --per_task 320 \
        --networks "[resnext_50, wide_resnet_50, resnet_18]" --without_networks "[resnet_50]"
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from jsonargparse import CLI

from data.collect import count_records
from data.record_tree import index_weights, read_index, task_dirs, write_index


def pending_root(
    root: Path,
    out: Path,
    per_task: int,
    parts: int = 1,
    networks: list[str] | None = None,
    without_networks: list[str] | None = None,
) -> list[str]:
    """The task folders copied from each device folder of `root` into `out` (with `parts` > 1: into
    `out`1 ... `out`N, every N-th unfinished task in each).

    Args:
        root: the record tree (e.g. data/h100).
        out: the new root (must not hold the device folder yet).
        per_task: tasks with fewer records than this are copied.
        parts: split the tasks over this many roots, one a device call.
        networks: copy only the tasks of these networks (default: every network's).
        without_networks: copy no task that one of these networks has.
    """
    if parts < 1:
        raise ValueError(f"parts={parts!r} must be at least 1")
    outs = [out] if parts == 1 else [out.with_name(f"{out.name}{k + 1}") for k in range(parts)]
    copied = []
    for device in sorted(p for p in root.iterdir() if (p / "index.json").exists()):
        index = read_index(device)
        for name in (*(networks or ()), *(without_networks or ())):
            if name not in index["networks"]:
                raise ValueError(
                    f"{device / 'index.json'}: no network {name!r} (it has {', '.join(sorted(index['networks']))})"
                )
        nets_of = index_weights(index)  # task_dir -> {network: weight}
        wanted = {
            t
            for t in index["tasks"]
            if (networks is None or nets_of.get(t, {}).keys() & set(networks))
            and not nets_of.get(t, {}).keys() & set(without_networks or ())
        }
        pending = sorted(t.name for t in task_dirs(device) if t.name in wanted and count_records(t)[0] < per_task)
        for dest in outs:
            if (dest / device.name).exists():
                raise FileExistsError(f"{dest / device.name} exists; remove it first")
        for k, dest in enumerate(outs):
            keep = set(pending[k::parts])
            for name in sorted(keep):
                shutil.copytree(device / name, dest / device.name / name)
            part = dict(index, tasks={t: v for t, v in index["tasks"].items() if t in keep})
            rows_of = {net: [row for row in rows if row[0] in keep] for net, rows in index["networks"].items()}
            part["networks"] = {net: rows for net, rows in rows_of.items() if rows}  # networks with a kept task
            (dest / device.name).mkdir(parents=True, exist_ok=True)
            write_index(dest / device.name, part)
            copied += [f"{dest.name}/{device.name}/{n}" for n in sorted(keep)]
    return copied


def main(argv: list[str] | None = None) -> int:
    try:
        copied = CLI(pending_root, args=argv, as_positional=False)
    except (FileExistsError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{len(copied)} unfinished tasks copied")
    return 0


if __name__ == "__main__":
    sys.exit(main())
