"""A history database that SQLite cannot read (truncated, overwritten, not SQLite at all) or
that nightly cannot use (no regular file: a folder, a FIFO; tables of another schema) is set
aside as `history.sqlite.bad-<time>` with a warning, and a fresh one is started.

The history is a record, not the source of truth (state.json is): losing it costs estimates
and trends, never a night. So a corrupt file is never a reason to stop `nightly run`,
`status` or `report`; it is kept (renamed, not deleted) for whoever wants to look at it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
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


def check_kind(path: Path) -> None:
    """Raise sqlite3.DatabaseError unless `path` (when it exists) is a regular file: SQLite
    fails on a folder and waits forever on a FIFO. Checked before SQLite opens it."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:  # a link to nowhere, a loop: set aside like the rest
        raise sqlite3.DatabaseError(f"not a database ({e.strerror or e})") from e
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else \
            "not a regular file"
        raise sqlite3.DatabaseError(f"not a database ({kind})")


def check_schema(conn: sqlite3.Connection, schema: str, version: int) -> None:
    """Raise sqlite3.DatabaseError unless the tables of `schema` the database holds have (at
    least) its columns, and all of them are there once its user_version says so: a database
    of another program (or a table made by hand) would fail every write of the night."""
    want = sqlite3.connect(":memory:")
    try:
        want.executescript(schema)
        tables = _columns(want)
    finally:
        want.close()
    have = _columns(conn)
    for table, columns in tables.items():
        if table not in have:
            if conn.execute("PRAGMA user_version").fetchone()[0] >= version or \
                    conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
                raise sqlite3.DatabaseError(f"another schema (no table {table})")
            continue
        missing = sorted(columns - have[table])
        if missing:
            raise sqlite3.DatabaseError(
                f"another schema (table {table} lacks {', '.join(missing[:4])})")


def _columns(conn: sqlite3.Connection) -> dict[str, set[str]]:
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {n: {str(r[1]) for r in conn.execute(f"PRAGMA table_info({_quoted(n)})")}
            for n in names}


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


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


__all__ = ["check", "check_kind", "check_schema", "inode_of", "is_corruption", "set_aside",
           "warn_stderr"]
