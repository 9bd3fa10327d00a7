"""Variants of one method in one tuning-suite job: `tuning.py --variants`.

A device call runs one `suite.sh` job a GPU lane, and every job pays 60-80 s of start-up (the kit,
TVM and NVRTC in the build workers, the eager timing). An A/B of two settings as two jobs of one
lane therefore pays it twice, and two 195 s arms no longer fit a 560 s call (docs/benchmarks.md, "The
quick start and a one-generation first draft on the GPU"). As variants of one job they pay it once
and share its build and walk workers, the way `--arms 'pruner moa'` does.

A variant is `LABEL[:KNOB=VALUE[,KNOB=VALUE...]]`: its arms are named LABEL (as `--label` names
them) and run with the knobs given, the job's other settings otherwise. The knobs are the
draft-then-verify ones (`tuning.SEARCH_KNOBS`, as `SearchConfig` types them), the cost model's online
training (`tuning.COST_KNOBS`, as `CostModelConfig` types them; `null` for None) and the build's
artifact (`tuning.MEASURE_KNOBS`, as `MeasureConfig` types it: `pruner-so:artifact=so`). The method's
own name, with no settings, is its default arm:

    python benchmarks/tuning.py --arms pruner --variants pruner-quick:quick_start=true pruner ...

runs, for each seed and workload, the quick start and then the default, in that order.
"""

from __future__ import annotations

import json
import types
import typing

__all__ = ["parse_variants"]


def _typed(value: object, hint: object, where: str) -> object:
    """`value` (JSON-parsed) as `hint` types it, or ValueError naming `where`."""
    if typing.get_origin(hint) is typing.Literal:
        if value in typing.get_args(hint):
            return value
        raise ValueError(f"{where}: {value!r} is not one of {typing.get_args(hint)}")
    allowed = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if value is None and type(None) in allowed:
        return None
    if bool in allowed and isinstance(value, bool):
        return value
    if int in allowed and isinstance(value, int) and not isinstance(value, bool):
        return value
    if float in allowed and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if str in allowed and isinstance(value, str):
        return value
    raise ValueError(f"{where}: {value!r} is not a {' or '.join(getattr(a, '__name__', str(a)) for a in allowed)}")


def parse_variants(
    method: str, specs: list[str], knobs: tuple[str, ...], hints: dict[str, object]
) -> list[tuple[str | None, dict]]:
    """(label, settings) of each spec in order; label None for the method's own default arm.

    `knobs` are the settings a variant may change, `hints` their types. Raises ValueError naming the
    spec for an unknown knob, a value of the wrong type, a label given twice or settings on the
    method's own name. A label's file name is checked by the caller (`tuning.arm_name`)."""
    variants: list[tuple[str | None, dict]] = []
    seen: set[str] = set()
    for spec in specs:
        label, _, rest = spec.partition(":")
        if label in seen:
            raise ValueError(f"--variants {spec!r}: {label!r} is given twice")
        seen.add(label)
        settings: dict = {}
        for item in filter(None, rest.split(",")):
            knob, eq, text = item.partition("=")
            where = f"--variants {spec!r}, {knob}"
            if not eq:
                raise ValueError(f"{where}: a setting is KNOB=VALUE")
            if knob not in knobs:
                raise ValueError(f"{where}: not a knob a variant may set ({', '.join(knobs)})")
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                value = text  # a bare word: a string knob's value, or a type error below
            settings[knob] = _typed(value, hints[knob], where)
        if label == method:
            if settings:
                raise ValueError(
                    f"--variants {spec!r}: the method's own arm takes no settings; give the variant a label"
                )
            variants.append((None, settings))
        else:
            variants.append((label, settings))
    return variants
