"""The tuning suite's report (benchmarks/tuning.py --report): tables and plots from the finished arms.

Per workload and seed, MetaSchedule's default (xgb) sets the bar: its best latency at the end of
the budget ("XGB's final") and the search time it first reached it at. For every other method:
its best latency at the same time, the search time and trials at which it first reached XGB's
final, and the speedup (XGB's time to its final / the method's time to it). A method that never
reached it within the budget gets "never" and, in the geometric mean, the speedup it would have
had at the budget's end (an upper bound: it needed more). Seeds of one workload are averaged
(geometric mean of the speedups, mean of the latencies); where only some seeds reached XGB's final,
the time and trials are those seeds' mean, with the count ("63 s (2 of 3 seeds)"), and the speedup
keeps its "<".
Paired with a reference method (`against`), seed by seed, each geometric mean of the ratios comes with
a 95% interval: Student's t over the pairs' log ratios. Two runs of one arm and seed have ended
11% and 1.59x apart on the GPU (docs/benchmarks.md), so a ratio whose interval spans 1 is not a result.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from benchmarks.suite_reread import reread_factors, rescale
from bridge.curve import build_per_round, device_idle_share, drafting_share, idle_between_batches
from bridge.search_log import read_rounds

__all__ = ["arms", "report", "slug", "time_to", "trials_to"]

_TOL = 1e-9
_BEHIND = 1.02  # latency at equal time / XGB's beyond which a method is behind: past the 2% measurement noise


def slug(workload: str) -> str:
    """A workload's folder name in a results folder ("dense:1,8,8" -> "dense_1x8x8")."""
    return workload.replace(":", "_").replace(",", "x")


def arms(*folders: Path, only: str | None = None) -> dict[str, dict[str, dict[int, list[dict]]]]:
    """workload slug -> method -> seed -> curve rows, over one results folder or several. A workload's
    seeds may come from several folders (seeds added by later calls), but one arm (workload, method,
    seed) from two is refused: which of the two ran is not for the report to guess. `only`: read that
    method's arms and no other's (the other methods' arms are neither read nor checked)."""
    out: dict = defaultdict(lambda: defaultdict(dict))
    home: dict[tuple[str, str, int], Path] = {}
    for folder in map(Path, folders):
        for path in sorted(folder.glob("*/*-s*.csv")):
            workload = path.parent.name
            method, _, seed = path.stem.rpartition("-s")
            if only is not None and method != only:
                continue
            key = (workload, method, int(seed))
            if home.setdefault(key, path) != path:
                raise ValueError(f"{path}: arm {method} seed {seed} of {workload} is in {home[key]} too")
            out[workload][method][int(seed)] = read_rounds(path)
    return out


def best_at(rows: list[dict], seconds: float) -> float:
    """Best estimated latency (ms) among the batches finished by `seconds` of search (inf if none)."""
    return min((r["estimated_ms"] for r in rows if r["elapsed_s"] <= seconds + _TOL), default=math.inf)


def time_to(rows: list[dict], latency_ms: float) -> float:
    """Search seconds at which a curve first reached `latency_ms` (inf if never)."""
    return next((r["elapsed_s"] for r in rows if r["estimated_ms"] <= latency_ms * (1 + _TOL)), math.inf)


def trials_to(rows: list[dict], latency_ms: float) -> float:
    return next((r["total_trials"] for r in rows if r["estimated_ms"] <= latency_ms * (1 + _TOL)), math.inf)


def _geomean(values: list[float]) -> float:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan


def _fmt(x: float, unit: str = "") -> str:
    return "never" if math.isinf(x) else ("n/a" if math.isnan(x) else f"{x:.4g}{unit}")


def _share(values: list[float]) -> str:
    """Mean of per-seed shares as a percentage ('-' where the method has none, e.g. no drafting)."""
    values = [v for v in values if math.isfinite(v)]
    return f"{100 * sum(values) / len(values):.0f}%" if values else "-"


def _seconds(values: list[float]) -> str:
    """Mean of per-seed medians in seconds ('-' where no round logged a build)."""
    known = [v for v in values if math.isfinite(v)]
    return f"{sum(known) / len(known):.1f} s" if known else "-"


def _reached(values: list[float], reached: list[int], unit: str = "") -> str:
    """Mean over the seeds that reached XGB's final; 'never' if none did, and a count if only some did."""
    if not reached:
        return "never"
    mean = _fmt(sum(values[i] for i in reached) / len(reached), unit)
    return mean if len(reached) == len(values) else f"{mean} ({len(reached)} of {len(values)} seeds)"


def _ratio(x: float) -> str:
    return "n/a" if math.isnan(x) else ("inf" if math.isinf(x) else f"{x:.3f}")


def report(
    results: Path,
    plot: str | None = None,
    baseline: str = "xgb",
    also: tuple[Path, ...] = (),
    against: tuple[str, ...] = ("pruner",),
    baseline_from: tuple[Path, ...] = (),
    sooner: float = 0.0,
    take: tuple[str, ...] = (),
    reread: tuple[Path, ...] = (),
) -> str:
    """The markdown tables of every workload with a baseline arm; with `plot`, the figure too. `also`:
    more results folders read beside `results` (e.g. workloads or seeds that ran under the same settings
    in another folder; an arm found in two is refused); eager times from the first folder that has them.
    `against`: the methods every other method is paired with, seed by seed. `baseline_from`: folders
    whose baseline arms only are read, for the workloads and seeds the other folders have and whose
    baseline they lack (an A/B of two settings run without XGB, against XGB runs of another call).
    `sooner`: a what-if, every other method's curve moved this many seconds earlier (what a first batch
    that much sooner would give, if the rest of the run followed it); the baseline's stays. `take`:
    "FOLDER:LABEL[=METHOD]", the arms of one label only from a folder, reported as METHOD (e.g. an A/B's
    variant under the name its setting became the default of, beside later seeds of that default).
    `reread`: `benchmarks/launch_floor.py` JSON files that re-read each arm's best kernel: every arm's
    curve is multiplied by its best kernel's re-read over its reported latency, so that the arms are
    compared on one scale (`benchmarks.suite_reread`, which says what it refuses)."""
    import json

    folders = [Path(results), *map(Path, also)]
    for folder in folders:
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder}: no such results folder (run benchmarks/tuning.py first)")
    data = arms(*folders)
    if baseline_from:
        extra = arms(*baseline_from, only=baseline)
        for workload, methods in data.items():
            seeds = {seed for runs in methods.values() for seed in runs}
            for seed, rows in extra.get(workload, {}).get(baseline, {}).items():
                if seed in seeds:
                    methods[baseline].setdefault(seed, rows)
    for spec in take:
        _take(data, spec)
    if sooner < 0:
        raise ValueError(f"sooner={sooner!r}: seconds to move the curves earlier, >= 0")
    if sooner:
        for methods in data.values():
            for method, runs in methods.items():
                if method != baseline:
                    for seed, rows in runs.items():
                        runs[seed] = [{**r, "elapsed_s": max(r["elapsed_s"] - sooner, _TOL)} for r in rows]
    scaled = rescale(data, reread_factors(*reread), baseline) if reread else []
    eager: dict = {}
    for folder in reversed(folders):  # the first folder's time wins
        if (folder / "eager.json").exists():
            eager.update({slug(k): v for k, v in json.loads((folder / "eager.json").read_text()).items()})
    name = "XGB" if baseline == "xgb" else baseline  # how the tables call it
    lines = [
        f"| workload | method | seeds | trials | best at equal time (us) | vs {name} at equal time "
        f"| reached {name}'s final at (s) | trials to it | speedup | device idle (between batches) | drafting | build a round |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    speedups: dict[str, list[float]] = defaultdict(list)
    ratios: dict[str, list[float]] = defaultdict(list)  # latency at equal time / XGB's, a workload each
    worse: list[str] = []
    pairs: dict[str, list[str]] = defaultdict(list)  # method -> its single seeds behind XGB beyond 2%
    counted: dict[str, int] = defaultdict(int)  # method -> its seeds with an XGB run beside them
    for workload, methods in sorted(data.items()):
        if baseline not in methods:
            continue
        for method, seeds in sorted(methods.items(), key=lambda kv: (kv[0] != baseline, kv[0])):
            cols = defaultdict(list)
            for seed, rows in seeds.items():
                base = methods[baseline].get(seed)
                if not rows or not base:
                    continue
                pair = _pair(base, rows)
                for key, value in pair.items():
                    cols[key].append(value)
                if method != baseline:
                    counted[method] += 1
                    if pair["ratio"] > _BEHIND:
                        pairs[method].append(f"{workload} s{seed} {_ratio(pair['ratio'])}x")
                cols["idle"].append(device_idle_share(rows))
                cols["between"].append(idle_between_batches(rows))
                cols["drafting"].append(drafting_share(rows))
                cols["build"].append(build_per_round(rows))
            if not cols:
                continue
            n = len(cols["best"])
            reached = [i for i, t in enumerate(cols["time"]) if math.isfinite(t)]
            bound = len(reached) < n  # a seed never reached it: its speedup is an upper bound
            speedup = _geomean(cols["speedup"])
            ratio = sum(cols["ratio"]) / n if not any(math.isnan(r) for r in cols["ratio"]) else math.nan
            if method != baseline:
                speedups[method].append(speedup)
                ratios[method].append(ratio)
                if ratio > _BEHIND:  # NaN (XGB had no estimate at that time) is no comparison; inf is worse
                    worse.append(f"{method} on {workload} ({_ratio(ratio)}x {name}'s latency)")
            lines.append(
                f"| {workload} | {method} | {n} | {sum(cols['trials']) / n:.0f} | {sum(cols['best']) / n:.2f} "
                f"| {_ratio(ratio)} | {_reached(cols['time'], reached, ' s')} | {_reached(cols['trials_to'], reached)} "
                f"| {'<' if bound else ''}{speedup:.2f}x | {100 * sum(cols['idle']) / n:.0f}% ({100 * sum(cols['between']) / n:.0f}%) "
                f"| {_share(cols['drafting'])} "
                f"| {_seconds(cols['build'])} |"
            )
        if workload in eager:
            lines.append(f"| {workload} | torch eager (cuBLAS/cuDNN) | | | {eager[workload] * 1e3:.2f} | | | | | | | |")
    lines.append("")
    for method, values in sorted(speedups.items()):
        known = [r for r in ratios[method] if math.isfinite(r)]
        lines.append(
            f"- {method}: geometric-mean speedup over {name} (search time to {name}'s final latency) "
            f"{_geomean(values):.2f}x over {len(values)} workloads; latency at equal time "
            f"{_geomean(known):.3f}x {name}'s (geometric mean over {len(known)})"
        )
    lines.append(f"- worse than {name} at equal time beyond 2%: {', '.join(worse) if worse else 'none'}")
    lines.append(  # the same by single seeds: a mean over seeds can hide a seed that fell behind
        f"- single seeds behind {name} at equal time beyond 2%: "
        + "; ".join(
            f"{m} {len(pairs[m])} of {counted[m]}" + (f" ({', '.join(pairs[m])})" if pairs[m] else "")
            for m in sorted(counted)
        )
    )
    spread = [  # the time to XGB's final is measured against each seed's own XGB run: how far those ended apart
        f"{workload} {min(finals):.2f}-{max(finals):.2f} us ({len(finals)} seeds)"
        for workload, methods in sorted(data.items())
        if len(finals := [rows[-1]["estimated_ms"] * 1e3 for rows in methods.get(baseline, {}).values() if rows]) > 1
    ]
    if spread:
        lines.append(f"- {baseline}'s final latency across seeds: {', '.join(spread)}")
    for reference in against:
        lines += _against(data, baseline, reference)
    lines += _per_seed(data, baseline)
    lines[:0] = scaled + [""] if scaled else []  # said before the tables it changed
    if plot:
        _plot(data, plot)
        lines.append(f"- plot: {plot}")
    return "\n".join(lines)


def _take(data: dict, spec: str) -> None:
    """Add to `data` the arms of one label of a folder (`spec`: "FOLDER:LABEL[=METHOD]"), as METHOD's;
    an arm (workload, method, seed) that `data` has already is refused, as `arms` refuses it."""
    folder, sep, which = spec.rpartition(":")
    label, _, method = which.partition("=")
    if not sep or not folder or not label:
        raise ValueError(f"{spec!r}: give FOLDER:LABEL or FOLDER:LABEL=METHOD")
    if not Path(folder).is_dir():
        raise FileNotFoundError(f"{folder}: no such results folder (in {spec!r})")
    found = False
    for workload, methods in arms(Path(folder)).items():
        for seed, rows in methods.get(label, {}).items():
            runs = data[workload][method or label]
            if seed in runs:
                raise ValueError(f"{spec!r}: {method or label} seed {seed} of {workload} is in the other folders too")
            runs[seed], found = rows, True
    if not found:
        raise ValueError(f"{spec!r}: {folder} has no arm labelled {label!r}")


def _pair(base: list[dict], rows: list[dict]) -> dict[str, float]:
    """One seed of a method against the same seed's baseline arm: the report's columns."""
    budget = min(base[-1]["elapsed_s"], rows[-1]["elapsed_s"])
    final = base[-1]["estimated_ms"]
    t = time_to(rows, final)
    best, base_best = best_at(rows, budget), best_at(base, budget)  # base_best inf: XGB had no estimate yet (no ratio)
    return {
        "trials": rows[-1]["total_trials"],
        "best": best * 1e3,
        "ratio": best / base_best if math.isfinite(base_best) else math.nan,
        "time": t,
        "trials_to": trials_to(rows, final),
        "speedup": time_to(base, final) / (t if math.isfinite(t) else rows[-1]["elapsed_s"]),
    }


def geomean_interval(logs: list[float], digits: int, of: str = "") -> str:
    """ "G x [of] (geometric mean, 95% interval L-H x)" of ratios given as logs: Student's t over the logs;
    without the interval for a single ratio or ratios all equal."""
    from scipy.stats import t as student_t  # only a report needs it, not a tuning run's start

    n, mean = len(logs), sum(logs) / len(logs)
    text = f"{math.exp(mean):.{digits}f}x" + (f" {of}" if of else "")
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1)) if n > 1 else 0.0
    if sd == 0.0:
        return f"{text} (geometric mean)"
    half = student_t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    return (
        f"{text} (geometric mean, 95% interval {math.exp(mean - half):.{digits}f}-{math.exp(mean + half):.{digits}f}x)"
    )


def _against(data: dict, baseline: str, reference: str = "pruner") -> list[str]:
    """Each other method against `reference` on the seeds where both ran beside the baseline: a mean
    over each method's own seeds can compare different draws of XGB, so this pairs them seed by seed.
    Their latencies are compared at the earlier of the two arms' ends (an arm that reached its trial
    cap ends early), not each at its end against the baseline's."""
    lines = []
    for method in sorted({m for methods in data.values() for m in methods} - {baseline, reference}):
        sooner = later = lower = n = 0
        logs, best_logs = [], []
        for methods in data.values():
            for seed, base in methods.get(baseline, {}).items():
                rows, ref = methods.get(method, {}).get(seed), methods.get(reference, {}).get(seed)
                if not (base and rows and ref):
                    continue
                a, b = _pair(base, rows), _pair(base, ref)
                n += 1
                sooner += a["time"] < b["time"]
                later += a["time"] > b["time"]  # both never: neither
                equal = min(rows[-1]["elapsed_s"], ref[-1]["elapsed_s"])
                mine, theirs = best_at(rows, equal), best_at(ref, equal)
                lower += mine < theirs
                logs.append(math.log(a["speedup"] / b["speedup"]))
                if math.isfinite(mine) and math.isfinite(theirs):  # both had a batch back by then
                    best_logs.append(math.log(mine / theirs))
        if n:
            of = f"{reference}'s"
            lines.append(
                f"- {method} against {reference}, seed by seed ({n} seeds where both ran): reached {baseline}'s "
                f"final sooner on {sooner}, later on {later}; speedup {geomean_interval(logs, 2, of)}; "
                f"lower latency at equal time on {lower} of {n}, "
                + (geomean_interval(best_logs, 3, of) if best_logs else "no batch back at equal time")
            )
    return lines


def _per_seed(data: dict, baseline: str) -> list[str]:
    """A table of each seed, for the workloads with several baseline seeds: the time to XGB's final
    is measured against each seed's own XGB run, whose final moves from seed to seed."""
    seeded = {w: m for w, m in sorted(data.items()) if len(m.get(baseline, {})) > 1}
    others = sorted({m for methods in seeded.values() for m in methods if m != baseline})
    if not others:
        return []
    lines = [
        "",
        f"| workload | seed | {baseline} final (us) | {baseline} reached it at (s) | "
        + " | ".join(f"{m} reached it at (s) | {m} speedup" for m in others)
        + " |",
        "|---|---|---|---|" + "---|---|" * len(others),
    ]
    for workload, methods in seeded.items():
        for seed, base in sorted(methods[baseline].items()):
            cells = [workload, str(seed), f"{base[-1]['estimated_ms'] * 1e3:.2f}"]
            cells.append(_fmt(time_to(base, base[-1]["estimated_ms"]), " s"))
            for m in others:
                rows = methods.get(m, {}).get(seed)
                if not rows:
                    cells += ["-", "-"]
                    continue
                pair = _pair(base, rows)
                bound = "<" if math.isinf(pair["time"]) else ""
                cells += [_fmt(pair["time"], " s"), f"{bound}{pair['speedup']:.2f}x"]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def _plot(data: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = sorted(data)
    colors = {"xgb": "C0", "pruner": "C1", "moa": "C2", "mlp": "C3"}
    variants = sorted({m for methods in data.values() for m in methods} - set(colors))  # e.g. --label pruner-r16
    colors.update((m, f"C{4 + i}") for i, m in enumerate(variants))  # each its own, the same in every panel
    fig, axes = plt.subplots(len(workloads), 2, figsize=(11, 3.2 * len(workloads)), squeeze=False)
    for row, workload in enumerate(workloads):
        for method, seeds in sorted(data[workload].items()):
            for i, (_, rows) in enumerate(sorted(seeds.items())):
                pts = [(r["elapsed_s"], r["total_trials"], r["estimated_ms"] * 1e3) for r in rows]
                pts = [p for p in pts if math.isfinite(p[2])]
                if not pts:
                    continue
                t, n, lat = zip(*pts)
                label = method if i == 0 else None
                color = colors[method]
                axes[row][0].step(t, lat, where="post", label=label, color=color, alpha=0.9 - 0.2 * i, marker="o", ms=3)
                axes[row][1].step(n, lat, where="post", label=label, color=color, alpha=0.9 - 0.2 * i, marker="o", ms=3)
        for col, xlabel in enumerate(("search time (s)", "trials")):
            ax = axes[row][col]
            ax.set(xlabel=xlabel, ylabel="best latency (us)", title=workload)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    from data.atomic import atomic_path

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=80, format="png")
    plt.close(fig)
