"""A history database that SQLite cannot read (truncated, overwritten, not SQLite at all) is
set aside as `history.sqlite.bad-<time>` with a warning, and a fresh one is started.

The history is a record, not the source of truth (state.json is): losing it costs estimates
and trends, never a night. So a corrupt file is never a reason to stop `nightly run`,
`status` or `report`; it is kept (renamed, not deleted) for whoever wants to look at it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path

# SQLite's own companions of a database file: a stale WAL must not meet a fresh database.
_COMPANIONS = ("-wal", "-shm")


def is_corruption(e: sqlite3.DatabaseError) -> bool:
    """A database that cannot be read ("file is not a database", "database disk image is
    malformed"), as opposed to one that is busy or locked (waited out by the caller)."""
    if isinstance(e, sqlite3.OperationalError):
        text = str(e).lower()
        return "malformed" in text or "not a database" in text
    return type(e) is sqlite3.DatabaseError


def check(conn: sqlite3.Connection) -> None:
    """Raise sqlite3.DatabaseError unless every page of the database reads back: a truncated
    file opens and answers the first query, and breaks only where its missing pages are."""
    rows = conn.execute("PRAGMA quick_check(1)").fetchall()
    if rows != [("ok",)]:
        raise sqlite3.DatabaseError(f"database disk image is malformed ({rows[0][0] if rows else '?'})")


def warn_stderr(message: str) -> None:
    print(message, file=sys.stderr)


def set_aside(path: Path, why: sqlite3.DatabaseError, inode: int | None,
              warn: Callable[[str], None] = warn_stderr) -> None:
    """Rename the unreadable `path` (and its WAL) to `<name>.bad-<time>`. `inode`: the file
    found unreadable; another process that already set it aside and started afresh keeps its
    fresh database."""
    try:
        if inode is not None and path.stat().st_ino != inode:
            return
    except FileNotFoundError:
        return
    stamp = time.strftime("%Y%m%dT%H%M%S")
    kept = path.with_name(f"{path.name}.bad-{stamp}")
    n = 1
    while kept.exists():  # never over an earlier one kept aside
        n += 1
        kept = path.with_name(f"{path.name}.bad-{stamp}-{n}")
    try:
        os.rename(path, kept)
    except OSError as e:
        raise sqlite3.OperationalError(
            f"{path} cannot be read ({why}) nor moved aside ({e.strerror or e}): move it "
            "away yourself; nightly then starts a fresh history") from e
    for suffix in _COMPANIONS:
        with contextlib.suppress(OSError):
            os.rename(f"{path}{suffix}", f"{kept}{suffix}")
    warn(f"warning: {path} is not a readable history database ({why}): kept as {kept.name}, "
         "a fresh history started (build estimates and trends start again)")


def inode_of(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


__all__ = ["check", "inode_of", "is_corruption", "set_aside", "warn_stderr"]
