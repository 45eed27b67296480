"""Values read leniently from JSON that nightly wrote but someone else may have changed: a
day folder's summary.json and plan.json, a cluster worker's result (untrusted staging).

A value of the wrong type reads as unset (or the default) instead of failing the command that
reads it: a hand-edited number, a field another version wrote as a string, a boolean where a
number belongs. `true` is never the number 1 here, although Python's int(True) is.
"""

from __future__ import annotations

from collections.abc import Mapping


def opt_str(v: object) -> str | None:
    """None stays None; anything else as its text."""
    return None if v is None else str(v)


def as_str(v: object, default: str = "") -> str:
    return default if v is None else str(v)


def opt_int(v: object) -> int | None:
    """An integer from a number or its text (2.7 -> 2, "3" -> 3); None for anything else."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        return None
    try:
        return int(v)
    except (ValueError, OverflowError):  # "x", "3.5", NaN, infinity
        return None


def as_int(v: object, default: int = 0) -> int:
    n = opt_int(v)
    return default if n is None else n


def opt_float(v: object) -> float | None:
    """A float from a number or its text; None for anything else."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        return None
    try:
        return float(v)
    except (ValueError, OverflowError):
        return None


def as_float(v: object, default: float = 0.0) -> float:
    n = opt_float(v)
    return default if n is None else n


def str_map(v: object) -> dict[str, str]:
    """An object of strings (None values left out); {} for anything that is not an object."""
    if not isinstance(v, Mapping):
        return {}
    return {str(k): str(x) for k, x in v.items() if x is not None}


def opt_mapping(v: object) -> Mapping[str, object] | None:
    """An object as it is; None for anything else."""
    return v if isinstance(v, Mapping) else None
