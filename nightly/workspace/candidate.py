"""A release candidate's day folder and what it holds.

`nightly release VERSION [--rc N]` builds into `ROOT/release/VERSION[-rcN]/` (retention only
ever looks at dated folders directly under ROOT, so it never touches releases); `nightly
promote` reads the same folder and refuses an incomplete candidate.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
from collections.abc import Sequence

from nightly.config import Config
from nightly.errors import UsageError
from nightly.workspace.day import Day
from nightly.workspace.state import SUCCEEDED, State


def candidate_name(version: str, rc: int | None) -> str:
    return f"release/{version}" + (f"-rc{rc}" if rc is not None else "")


def check_version(version: str) -> str:
    from packaging.version import InvalidVersion, Version

    try:
        Version(version)
    except InvalidVersion as e:
        raise UsageError(f"'{version}' is not a version (PEP 440), e.g. 2.1.0") from e
    if ".dev" in version:
        raise UsageError(f"'{version}' is a development version; releases are e.g. 2.1.0")
    return version


def release_day(config: Config, version: str, rc: int | None) -> Day:
    return Day(config.root, dt.date.today(), name=candidate_name(version, rc))


def completeness(
    config: Config, state: State, allow_partial: Sequence[str]
) -> tuple[list[str], list[str]]:
    """(builds left out and allowed, builds missing or failed and not allowed)."""
    allowed: list[str] = []
    refused: list[str] = []
    for b in config.builds:
        entry = state.get(b.id)
        if entry.status == SUCCEEDED and entry.packages:
            continue
        (allowed if any(fnmatch.fnmatchcase(b.id, g) for g in allow_partial) else refused).append(
            b.id
        )
    return allowed, refused
