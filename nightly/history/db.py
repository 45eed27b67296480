"""The build history: a SQLite database beside the day folders (ROOT/history.sqlite).

One row per attempt of every build of every night (table `builds`, keyed by day, build id and
attempt), its package files in a child table (`files`). The scheduler's estimates, the
report's trends and the per-night sizes JSON are read from it. The tables and their rows as
Python values are in history_schema.py.

Several queues (threads) and several processes (machines sharing ROOT on a local disk, a
`nightly build` beside a `nightly run`) write at once. Each thread of a process holds one
connection for the History's life (opening one per call, and the checkpoint SQLite runs when
the last connection closes, cost 14-20 ms per recorded build; a held connection about 1 ms);
each call runs one short transaction on it (BEGIN IMMEDIATE for writes, so a writer waits on
the busy timeout instead of failing on a lock upgrade). A forked child opens its own. The
database is in WAL mode: readers never block the writer. SQLite's locking needs a local
filesystem: keep ROOT off NFS.

Every query is bounded by what it returns, not by how many nights are recorded: estimates
read each build's last successes through the (build_id, outcome, started) index, failure
facts only the nights since the build's last success, and `prune` keeps the database to
`[retention] history_days` (history/retention.py).

The history is a record, not the source of truth (state.json is): a night that cannot write it
loses nothing but statistics.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from nightly.history import recover
from nightly.history.schema import (
    BUILD_COLUMNS,
    DAY_GLOB,
    SCHEMA,
    SCHEMA_VERSION,
    SUCCEEDED,
    BuildRecord,
    entry_rows,
    files_by_key,
    record_from_row,
)
from nightly.jsonvalues import json_object
from nightly.workspace import BuildEntry

if TYPE_CHECKING:
    from nightly.workspace import State

FILENAME = "history.sqlite"
BUSY_TIMEOUT_MS = 60_000


def history_path(root: Path) -> Path:
    return root / FILENAME


def median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


class History:
    """ROOT/history.sqlite. Safe to share between threads and processes (see the module doc).

    Usable as a context manager: closing closes the connections its threads hold (an unclosed
    History's connections close when it is collected)."""

    def __init__(self, path: Path, *, warn: Callable[[str], None] = recover.warn_stderr) -> None:
        self.path = Path(path)
        self._local = threading.local()
        self._held: list[sqlite3.Connection] = []
        self._held_lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        inode = recover.inode_of(self.path)
        try:
            recover.check_kind(self.path)  # a folder or a FIFO: set aside, never waited on
            self._init_schema(check=inode is not None)
        except sqlite3.DatabaseError as e:
            # Unreadable (truncated, garbage): kept aside, a fresh history started
            # (history/recover.py); a busy or locked one was waited out and re-raised.
            if not recover.is_corruption(e):
                raise
            recover.set_aside(self.path, e, inode, warn)
            self._init_schema(check=False)

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._held_lock:
            held, self._held = self._held, []
        for conn in held:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        self._local = threading.local()

    # ------------------------------------------------------------------ connections

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use (and again in a forked child: a
        connection never crosses a fork)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            conn = self._open()
            self._local.conn, self._local.pid = conn, os.getpid()
            with self._held_lock:
                self._held.append(conn)
        return conn

    def _open(self) -> sqlite3.Connection:
        # isolation_level=None: no implicit transactions; every write says BEGIN IMMEDIATE.
        conn = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
        )
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA synchronous = NORMAL")
        return conn

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        # One read transaction, so the statements of one call see one snapshot.
        conn = self._conn()
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("COMMIT")

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _init_schema(self, *, check: bool) -> None:
        # Several processes may create the database at the same moment: switching to WAL and
        # creating the tables are both idempotent, and a lock met here is waited out.
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                conn = self._open()
                try:
                    if check:  # an existing file: its pages all there, of our schema
                        recover.check(conn, self.path)
                        recover.check_schema(conn, SCHEMA, SCHEMA_VERSION)
                    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                    if str(mode).lower() != "wal":
                        raise sqlite3.OperationalError(f"cannot switch {self.path} to WAL ({mode})")
                    version = conn.execute("PRAGMA user_version").fetchone()[0]
                    if version < SCHEMA_VERSION:
                        conn.execute("BEGIN IMMEDIATE")
                        for statement in _statements(SCHEMA):
                            conn.execute(statement)
                        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                        conn.execute("COMMIT")
                finally:
                    conn.close()
                return
            except sqlite3.OperationalError as e:
                if ("locked" not in str(e) and "busy" not in str(e)) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    # ------------------------------------------------------------------ writing

    def transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """One write transaction on this thread's connection (history/retention.py)."""
        return self._write()

    def record(
        self,
        day_name: str,
        build_id: str,
        entry: BuildEntry | Mapping[str, object],
        *,
        commit: str,
        channel: str = "nightly",
    ) -> None:
        """Record (insert or replace) one attempt from a state.json entry, as runner.py
        writes it: status, reason, exit_status, started, ended, duration_s, attempts, machine,
        queue, executor, package, python, cuda, variant, packages=[{name,path,size,sha256}],
        log. The attempt is the entry's `attempts` (0 for a build that never started)."""
        if not isinstance(entry, BuildEntry):
            entry = BuildEntry.from_json(entry)
        row, files = entry_rows(
            day_name, build_id, entry, commit=commit, channel=channel, recorded=time.time()
        )
        attempt = row[2]
        with self._write() as conn:
            conn.execute(
                "DELETE FROM files WHERE day = ? AND build_id = ? AND attempt = ?",
                (day_name, build_id, attempt),
            )
            conn.execute(
                f"INSERT OR REPLACE INTO builds ({BUILD_COLUMNS}) "
                f"VALUES ({', '.join('?' * len(row))})",
                row,
            )
            conn.executemany(
                "INSERT OR REPLACE INTO files (day, build_id, attempt, name, path, size, sha256) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                files,
            )

    def record_state(
        self,
        day_name: str,
        state: State,
        *,
        commit: str | None = None,
        channel: str | None = None,
        only_finished: bool = True,
    ) -> int:
        """Record every build of a day's State (commit and channel default to its meta).
        By default only finished builds (succeeded, failed, interrupted). Returns how many."""
        commit = commit if commit is not None else state.meta.commit
        channel = channel if channel is not None else state.meta.channel_name
        n = 0
        for build_id in sorted(state.builds):
            entry = state.get(build_id)
            if only_finished and not entry.finished:
                continue
            self.record(day_name, build_id, entry, commit=commit, channel=channel)
            n += 1
        return n

    # ------------------------------------------------------------------ reading

    def night(self, day_name: str, *, all_attempts: bool = False) -> list[BuildRecord]:
        """The builds of one night, by build id: the last attempt of each (or every attempt)."""
        where = "day = ?"
        if not all_attempts:
            where += (
                " AND attempt = (SELECT MAX(b2.attempt) FROM builds b2"
                " WHERE b2.day = builds.day AND b2.build_id = builds.build_id)"
            )
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {BUILD_COLUMNS} FROM builds WHERE {where} ORDER BY build_id, attempt",
                (day_name,),
            ).fetchall()
            files = files_by_key(
                conn.execute(
                    "SELECT build_id, attempt, name, path, size, sha256 FROM files WHERE day = ? "
                    "ORDER BY name",
                    (day_name,),
                ).fetchall()
            )
        return [record_from_row(r, files.get((r[1], r[2]), ())) for r in rows]

    def days(self) -> list[str]:
        """Every recorded night, oldest first (by the first start of the night)."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT day FROM builds GROUP BY day ORDER BY MIN(COALESCE(started, recorded)), day"
            ).fetchall()
        return [str(r[0]) for r in rows]

    def trend(
        self,
        build_id: str,
        nights: int = 30,
        *,
        before: str | None = None,
        until: float | None = None,
    ) -> list[tuple[str, float, int]]:
        """(day, duration, total size) of the last successful attempt of `build_id` in each
        of its last `nights` nights with a success, oldest first. `before` leaves out that
        day and every night that started after it (the previous nights of a night's report);
        `until` (epoch seconds) leaves out every run that started at or after it, for a night
        not recorded yet."""
        params: list[object] = [build_id, SUCCEEDED]
        cut = ""
        if before is not None:
            cut += (
                " AND b.day != ? AND b.started < COALESCE("
                "(SELECT MIN(started) FROM builds WHERE day = ?), 1e18)"
            )
            params += [before, before]
        if until is not None:
            cut += " AND b.started < ?"
            params.append(until)
        params.append(nights)
        with self._read() as conn:
            rows = conn.execute(
                f"""
                SELECT b.day, b.duration_s,
                       (SELECT COALESCE(SUM(size), 0) FROM files f
                        WHERE f.day = b.day AND f.build_id = b.build_id AND f.attempt = b.attempt)
                FROM builds b
                WHERE b.build_id = ? AND b.outcome = ? AND b.duration_s IS NOT NULL
                  AND b.started IS NOT NULL {cut}
                  AND b.attempt = (SELECT MAX(b2.attempt) FROM builds b2
                                   WHERE b2.day = b.day AND b2.build_id = b.build_id
                                     AND b2.outcome = b.outcome)
                ORDER BY b.started DESC
                LIMIT ?
                """,
                params,
            ).fetchall()
        return [(str(d), float(dur), int(size)) for d, dur, size in reversed(rows)]

    def durations(
        self, build_id: str, nights: int = 30, *, before: str | None = None,
        until: float | None = None,
    ) -> list[tuple[str, float]]:
        """(day, seconds) of the build's successful runs over its last `nights` nights,
        oldest first."""
        return [(d, dur) for d, dur, _ in self.trend(build_id, nights, before=before, until=until)]

    def sizes(
        self, build_id: str, nights: int = 30, *, before: str | None = None,
        until: float | None = None,
    ) -> list[tuple[str, int]]:
        """(day, total bytes of its package files) of the build's successful runs over its
        last `nights` nights, oldest first."""
        return [(d, size) for d, _, size in self.trend(build_id, nights, before=before, until=until) if size]

    def estimates(self, build_ids: Iterable[str], *, last: int = 5) -> dict[str, float]:
        """The median duration of the last `last` successful runs of each build id; ids
        without a successful run are left out. Failed and interrupted runs never count (a
        build that fails after a minute says nothing about how long it takes)."""
        ids = sorted(set(build_ids))
        out: dict[str, float] = {}
        if not ids or last < 1:
            return out
        # One indexed look-up per build (builds_by_build: build_id, outcome, started), read
        # newest first and stopped after `last`: the cost does not grow with the nights kept.
        query = (
            "SELECT duration_s FROM builds INDEXED BY builds_by_build "
            "WHERE build_id = ? AND outcome = ? AND duration_s IS NOT NULL AND duration_s >= 0 "
            "ORDER BY started DESC, day DESC, attempt DESC LIMIT ?"
        )
        with self._read() as conn:
            for bid in ids:
                durs = [float(r[0]) for r in conn.execute(query, (bid, SUCCEEDED, last))]
                if durs:
                    out[bid] = median(durs)
        return out
        with self._read() as conn:
            for chunk in _chunks(ids, 500):
                rows = conn.execute(
                    f"""
                    SELECT build_id, duration_s FROM (
                        SELECT build_id, duration_s,
                               ROW_NUMBER() OVER (PARTITION BY build_id
                                                  ORDER BY started DESC, day DESC, attempt DESC) AS n
                        FROM builds
                        WHERE outcome = ? AND duration_s IS NOT NULL AND duration_s >= 0
                          AND build_id IN ({", ".join("?" * len(chunk))})
                    ) WHERE n <= ?
                    """,
                    [SUCCEEDED, *chunk, last],
                ).fetchall()
                per: dict[str, list[float]] = {}
                for bid, dur in rows:
                    per.setdefault(str(bid), []).append(float(dur))
                for bid, durs in per.items():
                    out[bid] = median(durs)
        return out

    def outcomes(self, build_id: str, *, before: str | None = None) -> list[tuple[str, str, str]]:
        """(day, outcome, commit) of the last attempt of `build_id` in each recorded night
        since its last success (that night included), by day name: all that the failure facts
        of nightly.history.triage need, however many nights are recorded. `before`: only
        nights before that day (the nights before the one being reported)."""
        cut, params = f" AND day GLOB '{DAY_GLOB}'", [build_id, SUCCEEDED]
        if before is not None:
            cut, params = cut + " AND day < ?", [build_id, SUCCEEDED, before]
        with self._read() as conn:
            # Newest first through builds_by_night, stopped at the first success: the rows
            # read are the build's failing streak, not its whole history.
            row = conn.execute(
                f"SELECT day FROM builds INDEXED BY builds_by_night WHERE build_id = ? "
                f"AND outcome = ?{cut} ORDER BY day DESC LIMIT 1", params
            ).fetchone()
            since = str(row[0]) if row and row[0] is not None else ""
            rows = conn.execute(
                f"SELECT day, outcome, commit_sha FROM builds b WHERE build_id = ? AND day >= ?{cut} "
                "AND attempt = (SELECT MAX(b2.attempt) FROM builds b2 WHERE b2.day = b.day "
                "AND b2.build_id = b.build_id) ORDER BY day",
                [build_id, since, *params[2:]],
            ).fetchall()
        return [(str(d), str(o), str(c)) for d, o, c in rows]

    def record_bisect(self, day_name: str, build_id: str, result: Mapping[str, object]) -> None:
        """Record (replace) the result of `nightly bisect` for one failure of a night."""
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO bisects (day, build_id, result, recorded) "
                "VALUES (?, ?, ?, ?)",
                (day_name, build_id, json.dumps(dict(result), sort_keys=True), time.time()),
            )

    def bisects(self, day_name: str) -> dict[str, dict[str, object]]:
        """The recorded bisect results of a night, by build id."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT build_id, result FROM bisects WHERE day = ?", (day_name,)
            ).fetchall()
        out: dict[str, dict[str, object]] = {}
        for bid, text in rows:
            got = json_object(text)
            if got is not None:
                out[str(bid)] = got
        return out

    def sizes_json(self, day_name: str) -> dict[str, object]:
        """The night's binary sizes, for the dashboard JSON published beside the index pages:
        {"date": day, "builds": {id: {"files": {name: bytes}, "total": bytes}}}, succeeded
        builds only (their last attempt), keys sorted when dumped with sort_keys."""
        builds: dict[str, object] = {}
        for rec in self.night(day_name):
            if rec.ok and rec.files:
                builds[rec.build_id] = {
                    "files": {f.name: f.size for f in rec.files},
                    "total": rec.size,
                }
        return {"date": day_name, "builds": builds}


# ---------------------------------------------------------------------------- helpers


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


def _chunks(items: list[str], n: int) -> Iterator[list[str]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]
