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
import time
from collections.abc import Callable
from pathlib import Path

from nightly.format import say_err

# SQLite's own companions of a database file: a stale WAL must not meet a fresh database.
_COMPANIONS = ("-wal", "-shm")


def is_corruption(e: sqlite3.DatabaseError) -> bool:
    """A database that cannot be read ("file is not a database", "database disk image is
    malformed"), as opposed to one that is busy or locked (waited out by the caller)."""
    if isinstance(e, sqlite3.OperationalError):
        text = str(e).lower()
        return "malformed" in text or "not a database" in text
    return type(e) is sqlite3.DatabaseError


def check(conn: sqlite3.Connection, path: Path | None = None) -> None:
    """Raise sqlite3.DatabaseError unless the database's pages are all there: a truncated
    file opens and answers the first query, and breaks only where its missing pages are.

    With `path`, from its 100-byte header: the file must be as long as the page count the
    header declares (a constant-time check, whatever the history's size; SQLite itself then
    reports a damaged page where a query meets it). Where the header's count is not valid
    (a file written by an old SQLite) every page is read instead (`PRAGMA quick_check`)."""
    if path is not None:
        verdict = header_verdict(path)
        if verdict == "ok":
            return
        if verdict != "unknown":
            raise sqlite3.DatabaseError(f"database disk image is malformed ({verdict})")
    rows = conn.execute("PRAGMA quick_check(1)").fetchall()
    if rows != [("ok",)]:
        raise sqlite3.DatabaseError(f"database disk image is malformed ({rows[0][0] if rows else '?'})")


def header_verdict(path: Path) -> str:
    """"ok", "unknown", or what is wrong, from the database header (sqlite.org/fileformat2)."""
    try:
        with open(path, "rb") as f:
            header = f.read(100)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return "unknown"
    if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
        return "not a database" if header else "unknown"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    changes, pages, valid_for = (int.from_bytes(header[o:o + 4], "big") for o in (24, 28, 92))
    if pages == 0 or changes != valid_for or page_size < 512:
        return "unknown"
    if size < pages * page_size:
        return f"{size} bytes where the header declares {pages} pages of {page_size}"
    return "ok"


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
    say_err(message)  # it may quote the database's error


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


__all__ = ["check", "check_kind", "check_schema", "header_verdict", "inode_of", "is_corruption", "set_aside",
           "warn_stderr"]
