"""Summarize a record tree for its data card: networks, tasks, records per task, collections.

    python -m data.card data/h100                     # markdown tables on stdout
    python -m data.card data/h100 --json card.json    # the same numbers as JSON

For every device folder: one row per network (tasks, records, valid records), one row per task
(its buffers' shapes, which tell apart tasks of one name in several networks, the networks that use
it, records, valid), and one row per collection that `data.collect`
recorded in index.json (date, records, measurement settings, GPU and clocks, TVM version).
"Valid" means the measurement succeeded (finite mean run time); failed builds and runs are stored
with run_secs [1e10] and counted apart. Reads the database files only; runs no code from them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from jsonargparse import ArgumentParser

from data.atomic import atomic_write_text
from data.collect import count_records
from data.record_tree import (
    DB_FILES,
    database_file,
    device_folders,
    index_weights,
    json_rows,
    read_index,
    task_dirs,
    task_name,
)

__all__ = ["device_card", "main", "markdown"]


def task_shapes(folder: Path) -> str:
    """The task's buffer shapes from its first record's argument info, e.g. "12x128x64, 12x64x128,
    12x128x128" (a dtype other than float32 is named: "int8 1x64"); "" when there is none.

    Raises:
        ValueError: a first record without argument info, naming the file and line.
    """
    path = database_file(Path(folder), DB_FILES[1])
    if path is None:
        return ""
    for lineno, _, row in json_rows(path, "tuning record"):
        try:
            args = row[1][3]
            shapes = []
            for _kind, dtype, shape in args:
                dims = "x".join(str(int(d)) for d in shape) or "scalar"
                shapes.append(dims if dtype == "float32" else f"{dtype} {dims}")
        except (IndexError, TypeError, ValueError) as err:
            raise ValueError(f"{path}:{lineno}: malformed tuning record argument info ({err})") from None
        return ", ".join(shapes)
    return ""


def device_card(device_dir: Path) -> dict:
    """The numbers of one device folder: {"device", "tasks": [...], "networks": {...}, "collections", totals}."""
    device_dir = Path(device_dir)
    index = read_index(device_dir) or {}
    weights = index_weights(index)
    tasks, networks, empty = [], {}, []
    for folder in task_dirs(device_dir):
        records, valid = count_records(folder)
        if records == 0:  # a folder a stopped collection created before its first batch
            empty.append(folder.name)
            continue
        nets = sorted(weights.get(folder.name, {})) or ["(not in index)"]
        tasks.append(
            {
                "task": task_name(folder.name),
                "folder": folder.name,
                "shapes": task_shapes(folder),
                "networks": nets,
                "records": records,
                "valid": valid,
            }
        )
        for net in nets:
            row = networks.setdefault(net, {"tasks": 0, "records": 0, "valid": 0})
            row["tasks"] += 1
            row["records"] += records
            row["valid"] += valid
    return {
        "device": device_dir.name,
        "records": sum(t["records"] for t in tasks),
        "valid": sum(t["valid"] for t in tasks),
        "tasks": tasks,
        "networks": dict(sorted(networks.items())),
        "empty": empty,
        "skipped": index.get("skipped", {}),
        "collections": index.get("collections", []),
    }


def _collection_row(c: dict) -> str:
    ev = c.get("evaluator", {})
    gpus = c.get("gpus") or [{}]
    gpu = gpus[0]
    clocks = f"SM {gpu.get('clocks.sm', '?')}, mem {gpu.get('clocks.mem', '?')}" if gpu else ""
    name = f"{len(gpus)}x {gpu.get('name', '?')}" if gpu else "(host)"
    return (
        f"| {c.get('date', '?')[:16].replace('T', ' ')} | {c.get('records', '?')} | {name} ({clocks}) | "
        f"number {ev.get('number', '?')}, repeat {ev.get('repeat', '?')}, min_repeat_ms {ev.get('min_repeat_ms', '?')} | "
        f"{c.get('runner', '?')} x{c.get('runners', '?')}, {c.get('builder_workers', '?')} build workers"
        + (f", source over {c['max_source_kb']:g} KB refused ({c.get('refused', 0)})" if c.get("max_source_kb") else "")
        + " | "
        f"{c.get('tvm', '?')} |"
    )


def markdown(card: dict) -> str:
    """Markdown tables of `device_card`'s numbers."""
    lines = [
        f"Device folder `{card['device']}`: {card['records']:,} records ({card['valid']:,} valid), "
        f"{len(card['tasks'])} tasks, {len(card['networks'])} networks.",
        "",
        "| network | tasks | records | valid |",
        "|---|---|---|---|",
        *(f"| {n} | {r['tasks']} | {r['records']:,} | {r['valid']:,} |" for n, r in card["networks"].items()),
        "",
        "(a task that several networks use counts in each of them)",
        "",
    ]
    if card["collections"]:
        lines += [
            "| collected (UTC) | records | GPU | measurement | runner, builds | TVM |",
            "|---|---|---|---|---|---|",
        ]
        lines += [_collection_row(c) for c in card["collections"]]
        lines.append("")
    lines += ["| task | shapes | networks | records | valid |", "|---|---|---|---|---|"]
    lines += [
        f"| {t['task']} | {t['shapes']} | {', '.join(t['networks'])} | {t['records']} | {t['valid']} |"
        for t in card["tasks"]
    ]
    if card["empty"]:
        lines += ["", f"Empty task folders (no records yet): {', '.join(card['empty'])}"]
    if card["skipped"]:
        lines += ["", "Skipped tasks:", *(f"- {k}: {v}" for k, v in sorted(card["skipped"].items()))]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m data.card", description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=str, help="a record tree root or a device folder")
    parser.add_argument("--json", type=str | None, default=None, help="also write the numbers here as JSON")
    args = parser.parse_args(argv)
    try:
        devices = device_folders(Path(args.root))
        cards = [device_card(d) for d in devices]
    except ValueError as err:  # not a record tree, or a malformed record (named by file and line)
        print(f"error: {err}", file=sys.stderr)
        return 2
    print("\n".join(markdown(c) for c in cards), end="")
    if args.json:
        atomic_write_text(Path(args.json), json.dumps(cards, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
