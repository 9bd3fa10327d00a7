"""Keep what a device call of the tuning suite brought back: merge its results into the tree.

    python benchmarks/gpu/keep.py /work/.device/N --label gate_call1

A call of `lanes.sh` brings back, per lane, `laneI/tuning_results.tar.xz` (the lane's results folder,
RES, as it was on the device), `laneI/tuning_work.tar.xz` (its work dir, WORK: each arm's database)
and `laneI.log` (with three lanes or more, all three in one `laneI.tar`, the log as `laneI/lane.log`);
a plain `suite.sh` call brings the two tars back at the top of the call's folder.
For each of them this adds to the tree (`--root`, default the project root):

- the arms' CSVs of RES that the tree does not have. The device started from the tree, so a CSV
  both have is normally the same file; one that differs is reported and left as the tree has it.
  An empty CSV is the placeholder `stage.sh out lean` left for an arm the tree has: not a result.
- the eager times of RES's eager.json, key by key: a time the tree already has is kept. (Unpacking
  the tars of two calls by hand, the older one last, once overwrote the newer call's eager times.)
- each arm's database (`WORK/<workload>/<arm>/database_*.json`), xz-compressed, to
  `benchmarks/results/suite_databases/<workload>/<arm>/` for a RES of `benchmarks/results/tuning*`
  (`.../suite_databases/<gpu>/<workload>/<arm>/` for one named after another GPU, `tuning_240_h200`),
  and to `.../suite_databases/ablations/<name>/<workload>/<arm>/` for `benchmarks/results/ablations/<name>`;
  again without replacing a database the tree has. Only the arms whose CSV is in the call's RES: a warm
  machine's WORK still holds the arms of the calls before, whatever their RES was.
- with `--label`, the lane's log as `benchmarks/results/ablations/logs/<label>[_laneI].log`.

The tars are unpacked into a temporary folder with tarfile's "data" filter (no absolute paths, no
links out of it). Prints each file it added and each conflict; commit what it added at once.
"""

from __future__ import annotations

import filecmp
import json
import lzma
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

from jsonargparse import CLI

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path("benchmarks/results")
DATABASES = RESULTS / "suite_databases"
LOGS = RESULTS / "ablations" / "logs"
DB_FILES = ("database_workload.json", "database_tuning_record.json")


def _unpack(archive: Path, into: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into


def _is_placeholder(path: Path) -> bool:
    """An empty arm CSV: what `stage.sh out lean` leaves for an arm the tree has, not a result."""
    return path.suffix == ".csv" and path.stat().st_size == 0


def _results_folders(unpacked: Path) -> list[Path]:
    """The RES folders in an unpacked results tar (relative paths)."""
    return sorted({p.parent.relative_to(unpacked) for p in unpacked.rglob("eager.json")} |
                  {p.parent.parent.relative_to(unpacked) for p in unpacked.rglob("*-s*.csv")})  # fmt: skip


def _merge_results(unpacked: Path, found: list[Path], root: Path, report: dict) -> None:
    """Add the new arm CSVs and eager times of the RES folders `found` in `unpacked` to the tree."""
    for res in found:
        for src in sorted((unpacked / res).rglob("*")):
            if not src.is_file():
                continue
            rel = src.relative_to(unpacked)
            dst = root / rel
            if _is_placeholder(src):
                continue
            if src.name == "eager.json":
                theirs = json.loads(src.read_text())
                ours = json.loads(dst.read_text()) if dst.exists() else {}
                new = {k: v for k, v in theirs.items() if k not in ours}
                if new:
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    dst.write_text(json.dumps({**ours, **new}, indent=1) + "\n")
                    report["added"].append(f"{rel}: {', '.join(new)}")
            elif not dst.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
                report["added"].append(str(rel))
            elif not filecmp.cmp(src, dst, shallow=False):
                report["conflicts"].append(f"{rel}: differs from the tree's; the tree's kept")


def _database_home(res: Path) -> Path:
    """Where the databases of a results folder's arms are kept (see the module docstring)."""
    parts = res.relative_to(RESULTS).parts if res.is_relative_to(RESULTS) else ()
    if len(parts) >= 2 and parts[0] == "ablations":
        return DATABASES / "ablations" / Path(*parts[1:])
    if len(parts) == 1 and parts[0].startswith("tuning"):
        _, sep, gpu = parts[0].rpartition("_")  # tuning_240_h200: another GPU's arms, kept apart
        return DATABASES / gpu if sep and not gpu.isdigit() else DATABASES
    raise ValueError(f"{res}: not benchmarks/results/tuning* or benchmarks/results/ablations/<name>")


def _merge_databases(unpacked: Path, home: Path, root: Path, report: dict, arms: set[tuple[str, str]]) -> None:
    for record in sorted(unpacked.rglob("database_tuning_record.json")):
        arm_dir = record.parent  # WORK/<workload>/<arm>
        if arm_dir.name == "reread":  # WORK/<workload>/<arm>/reread: the arm's re-read, in <arm>-s<seed>.reread.json
            continue
        if (arm_dir.parent.name, arm_dir.name) not in arms:  # an earlier call's, on a warm machine
            report["skipped"].append(f"{arm_dir.parent.name}/{arm_dir.name}: no arm of the call's results")
            continue
        rel = home / arm_dir.parent.name / arm_dir.name
        for name in DB_FILES:
            src, dst = arm_dir / name, root / rel / f"{name}.xz"
            if not src.exists():
                continue
            data = src.read_bytes()
            if dst.exists():
                if lzma.decompress(dst.read_bytes()) != data:
                    report["conflicts"].append(f"{rel / name}: differs from the tree's; the tree's kept")
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(lzma.compress(data, preset=9))
            report["added"].append(str(rel / f"{name}.xz"))


def keep(call: Path, label: str | None = None, root: Path = ROOT) -> dict:
    """Merge a device call's suite results into the tree at `root`; {"added": [...], "conflicts": [...],
    "skipped": [...]} (skipped: databases of arms whose CSVs the call's results do not hold).

    Args:
        call: the call's folder (e.g. /work/.device/N): `laneI/` folders (or `laneI.tar` bundles)
            from lanes.sh, or the two tars of a plain suite.sh call.
        label: keep each lane's log as benchmarks/results/ablations/logs/<label>[_laneI].log.
        root: the project root to merge into.
    """
    call, root = Path(call), Path(root)
    with tempfile.TemporaryDirectory() as bundles:
        lanes = [(p, call / f"{p.name}.log") for p in sorted(call.glob("lane*")) if p.is_dir()]
        for bundle in sorted(call.glob("lane*.tar")):  # lanes.sh's one tar a lane (three lanes or more)
            lane = _unpack(bundle, Path(bundles) / bundle.stem) / bundle.stem
            if not lane.is_dir():
                raise FileNotFoundError(f"{bundle}: no {bundle.stem}/ folder inside")
            lanes.append((lane, lane / "lane.log"))
        return _keep_lanes(sorted(lanes) or [(call, None)], label, root)


def _keep_lanes(lanes: list[tuple[Path, Path | None]], label: str | None, root: Path) -> dict:
    """`keep` for the call's lanes: (the lane's folder, its log or None) each."""
    report: dict = {"added": [], "conflicts": [], "skipped": []}
    with tempfile.TemporaryDirectory() as tmp:
        unpacked = []  # (the lane's results unpacked, its RES folders), every lane's checked before anything is added
        for i, (lane, _) in enumerate(lanes):
            results = lane / "tuning_results.tar.xz"
            if not results.exists():
                raise FileNotFoundError(f"{results}: no tuning results in this call's folder")
            into = _unpack(results, Path(tmp) / str(i) / "results")
            found = _results_folders(into)
            if len(found) > 1 and (lane / "tuning_work.tar.xz").exists():
                raise ValueError(
                    f"{results}: several results folders ({', '.join(map(str, found))}); whose databases? "
                    "(a folder inside one of the same name is what a stale stage.sh staging leaves)"
                )
            unpacked.append((into, found))
        for i, ((lane, log), (into, found)) in enumerate(zip(lanes, unpacked)):
            _merge_results(into, found, root, report)
            work = lane / "tuning_work.tar.xz"
            if work.exists() and found:
                csvs = (into / found[0]).glob("*/*-s*.csv")
                arms = {(c.parent.name, c.stem) for c in csvs if not _is_placeholder(c)}
                _merge_databases(
                    _unpack(work, Path(tmp) / str(i) / "work"), _database_home(found[0]), root, report, arms
                )
            if label and log is not None and log.exists():
                dst = root / LOGS / f"{label}{'' if len(lanes) == 1 else '_' + lane.name}.log"
                if not dst.exists():
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(log, dst)
                    report["added"].append(str(dst.relative_to(root)))
    for line in report["added"]:
        print(f"added {line}")
    for line in report["skipped"]:
        print(f"skipped {line}")
    for line in report["conflicts"]:
        print(f"CONFLICT {line}", file=sys.stderr)
    return report


def main(argv: list[str] | None = None) -> dict:
    return CLI(keep, args=argv, as_positional=True)


if __name__ == "__main__":
    main()
