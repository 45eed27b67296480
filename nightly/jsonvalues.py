"""The one place nightly parses JSON (tests/unit/test_one_home.py holds every other module
to it), and values read leniently from JSON that nightly wrote but someone else may have changed: a
day folder's summary.json and plan.json, a cluster worker's result (untrusted staging).

A value of the wrong type reads as unset (or the default) instead of failing the command that
reads it: a hand-edited number, a field another version wrote as a string, a boolean where a
number belongs. `true` is never the number 1 here, although Python's int(True) is.

`read_json_file` is how such a file is read: never blocking (a FIFO), never through a link,
bounded in size, depth (no RecursionError) and numbers (no integer SQLite cannot store, no
NaN or infinity); a file past a bound is a JSONInputError (a ValueError) naming the bound.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path


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


# ---------------------------------------------------------------------------- reading a file

# Bounds of a JSON file nightly reads back from a day folder (state.json, summary.json,
# plan.json): nightly writes none deeper than a handful of levels, nor an integer beyond
# SQLite's (the history stores them), nor NaN or infinity (json.dumps writes them, but no
# other JSON reader takes them).
MAX_DEPTH = 64
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 63) - 1


class JSONInputError(ValueError):
    """A file that is not one of nightly's JSON files: not a regular file (a FIFO, a folder,
    a link), larger than its bound, not UTF-8, not JSON, nested too deeply, or with a number
    out of range. Its text says which, in a few words."""


def _bounded_int(text: str) -> int:
    n = int(text) if len(text) <= 21 else None
    if n is None or not _INT_MIN <= n <= _INT_MAX:
        raise JSONInputError(f"an integer out of range ({text[:24]}{'...' if len(text) > 24 else ''})")
    return n


def _finite_float(text: str) -> float:
    x = float(text)
    if x in (float("inf"), float("-inf")):
        raise JSONInputError(f"a number out of range ({text[:24]})")
    return x


def _no_constant(text: str) -> object:
    raise JSONInputError(f"{text} is not JSON")


def _depth_problem(data: object, limit: int) -> str | None:
    stack: list[tuple[object, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > limit:
                return f"nested deeper than {limit} levels"
            children = value.values() if isinstance(value, dict) else value
            stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return None


def loads_bounded(text: str | bytes, *, max_depth: int = MAX_DEPTH,
                  max_bytes: int | None = None) -> object:
    """JSON text (any value) parsed with nightly's bounds (JSONInputError, a ValueError, when
    one is crossed): integers within 64 bits, finite numbers, at most `max_depth` levels, and
    (for text from elsewhere: a store, an engine, a package) at most `max_bytes` long.
    Booleans stay booleans."""
    if max_bytes is not None and len(text) > max_bytes:
        raise JSONInputError(f"larger than {_size(max_bytes)}")
    try:
        data = json.loads(text, parse_int=_bounded_int, parse_float=_finite_float,
                          parse_constant=_no_constant)
    except RecursionError:
        raise JSONInputError(f"nested deeper than {max_depth} levels") from None
    except UnicodeDecodeError:
        raise JSONInputError("not UTF-8") from None
    except JSONInputError:
        raise
    except ValueError as e:
        raise JSONInputError(f"not JSON ({str(e)[:120] or type(e).__name__})") from None
    problem = _depth_problem(data, max_depth)
    if problem:
        raise JSONInputError(problem)
    return data


def read_bounded(path: Path, max_bytes: int) -> bytes:
    """The bytes of `path`, a regular file of at most `max_bytes`: opened without following a
    link and without waiting (a FIFO never blocks the reader). OSError when it cannot be
    opened (FileNotFoundError when it is missing); JSONInputError when it is no regular file
    or is larger."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise JSONInputError("a symbolic link, not a file") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise JSONInputError(f"not a regular file ({_kind(mode)})")
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(max_bytes + 1)
    finally:
        os.close(fd)
    if len(raw) > max_bytes:
        raise JSONInputError(f"larger than {_size(max_bytes)}")
    return raw


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


def read_json_file(path: Path, max_bytes: int, *, max_depth: int = MAX_DEPTH) -> object:
    """A JSON file of nightly's, read with `read_bounded` and parsed with `loads_bounded`."""
    return loads_bounded(read_bounded(path, max_bytes), max_depth=max_depth)


# A small record nightly writes (a marker, an owner.json, a statistics file): far below this.
SMALL_FILE_BYTES = 4 << 20


def json_object(text: str | bytes, *, max_depth: int = MAX_DEPTH,
                max_bytes: int | None = None) -> dict[str, object] | None:
    """The JSON object in `text`, parsed with `loads_bounded`; None when it is not JSON, not
    an object, or crosses a bound (the lenient form, for a record that may be damaged)."""
    try:
        data = loads_bounded(text, max_depth=max_depth, max_bytes=max_bytes)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def read_json_object(path: Path, max_bytes: int = SMALL_FILE_BYTES, *,
                     max_depth: int = MAX_DEPTH) -> dict[str, object]:
    """The JSON object in the file at `path`, read the lenient way: {} when the file is
    missing, unreadable, not a regular file (a link, a FIFO), larger than `max_bytes`, not
    JSON or not an object. The one reader of nightly's own JSON files when a damaged one
    counts as empty; `read_json_file` when the caller must say what is wrong. Booleans stay
    booleans and every number is bounded."""
    try:
        data = read_json_file(path, max_bytes, max_depth=max_depth)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def opt_bool(v: object) -> bool | None:
    """A JSON boolean as it is; None for anything else (the text "false" is no True)."""
    return v if isinstance(v, bool) else None


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device")):
        if test(mode):
            return name
    return "not a file"
