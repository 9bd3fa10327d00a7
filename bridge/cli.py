"""Command-line flags from the typed config dataclasses (bridge.config), so each knob is spelled once.

`add_dataclass_arguments(parser, SearchConfig)` adds one jsonargparse flag per field: `--field-name`
(or the field's `flag` metadata), its type, its default and its `help` metadata, plus any `aliases`
(old names kept for one release). Fields with `cli=False` are left out (set by the caller).
`build(cls, namespace, **fixed)` makes the dataclass back from the parsed namespace.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

__all__ = ["add_dataclass_arguments", "build", "flag_of"]


def flag_of(field: dataclasses.Field) -> str:
    """The flag of a config field, without the dashes ("trials-per-round")."""
    return field.metadata.get("flag", field.name.replace("_", "-"))


def _cli_fields(cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if f.metadata.get("cli", True)]


def add_dataclass_arguments(parser: Any, cls: type, types: dict[str, Any] | None = None) -> None:
    """Add a flag per CLI field of the dataclass `cls` (see the module docstring).

    Args:
        types: flag -> a narrower type than the field's (e.g. a Literal of the registered choices).
    """
    hints = typing.get_type_hints(cls)
    for field in _cli_fields(cls):
        flags = [f"--{flag_of(field)}", *field.metadata.get("aliases", ())]
        kind = (types or {}).get(flag_of(field), hints[field.name])
        kwargs: dict[str, Any] = {"type": kind, "help": field.metadata["help"]}
        if field.default is dataclasses.MISSING:
            kwargs["required"] = True
        else:
            kwargs["default"] = field.default
        parser.add_argument(*flags, **kwargs)


def build(cls: type, namespace: Any, **fixed: Any) -> Any:
    """The dataclass `cls` from a parsed namespace (its CLI fields) and `fixed` values."""
    values = {f.name: namespace[flag_of(f).replace("-", "_")] for f in _cli_fields(cls)}
    return cls(**values, **fixed)
