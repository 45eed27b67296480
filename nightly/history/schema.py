"""The history database's tables (see history.py) and their rows as Python values: the SQL
schema, the records a query returns, and a state.json entry turned into the rows it writes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nightly.jsonvalues import opt_float, opt_int, opt_str
from nightly.workspace import BuildEntry

SCHEMA_VERSION = 3  # 2: the bisects table (nightly bisect); 3: builds_by_night (bounded failure facts)
# The nights of the calendar (a release folder's rows are kept apart from them).
DAY_GLOB = "[0-9][0-9][0-9][0-9]_[0-9][0-9]_[0-9][0-9]"
SUCCEEDED = "succeeded"  # as nightly.workspace.SUCCEEDED (not imported: keep this module light)

SCHEMA = """
CREATE TABLE IF NOT EXISTS builds (
    day          TEXT    NOT NULL,   -- the day folder's name (YYYY_MM_DD, or a release folder)
    build_id     TEXT    NOT NULL,
    attempt      INTEGER NOT NULL,
    commit_sha   TEXT    NOT NULL DEFAULT '',
    channel      TEXT    NOT NULL DEFAULT '',
    machine      TEXT    NOT NULL DEFAULT '',
    queue        INTEGER,
    executor     TEXT    NOT NULL DEFAULT '',
    package      TEXT    NOT NULL DEFAULT '',
    python       TEXT    NOT NULL DEFAULT '',
    cuda         TEXT    NOT NULL DEFAULT '',
    variant      TEXT    NOT NULL DEFAULT '',
    started      REAL,               -- epoch seconds
    ended        REAL,
    duration_s   REAL,
    outcome      TEXT    NOT NULL,   -- succeeded | failed | interrupted | running | pending
    reason       TEXT,
    exit_status  INTEGER,
    log          TEXT,               -- relative to the day folder
    recorded     REAL    NOT NULL,
    PRIMARY KEY (day, build_id, attempt)
);
CREATE INDEX IF NOT EXISTS builds_by_build ON builds (build_id, outcome, started);
CREATE INDEX IF NOT EXISTS builds_by_night ON builds (build_id, day);
CREATE TABLE IF NOT EXISTS files (
    day       TEXT    NOT NULL,
    build_id  TEXT    NOT NULL,
    attempt   INTEGER NOT NULL,
    name      TEXT    NOT NULL,
    path      TEXT    NOT NULL DEFAULT '',
    size      INTEGER NOT NULL,
    sha256    TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (day, build_id, attempt, name),
    FOREIGN KEY (day, build_id, attempt) REFERENCES builds (day, build_id, attempt)
        ON DELETE CASCADE
);
CREATE TABLE IF NOT EXISTS bisects (
    day          TEXT    NOT NULL,   -- the night whose failure was bisected
    build_id     TEXT    NOT NULL,
    result       TEXT    NOT NULL,   -- JSON of nightly.bisect.BisectResult
    recorded     REAL    NOT NULL,
    PRIMARY KEY (day, build_id)
);
"""

BUILD_COLUMNS = (
    "day, build_id, attempt, commit_sha, channel, machine, queue, executor, package, python, "
    "cuda, variant, started, ended, duration_s, outcome, reason, exit_status, log, recorded"
)


@dataclass(frozen=True, kw_only=True)
class FileRecord:
    name: str
    path: str
    size: int
    sha256: str


@dataclass(frozen=True, kw_only=True)
class BuildRecord:
    """One attempt of one build of one night."""

    day: str
    build_id: str
    attempt: int
    commit: str
    channel: str
    machine: str
    queue: int | None
    executor: str
    package: str
    python: str
    cuda: str
    variant: str
    started: float | None
    ended: float | None
    duration_s: float | None
    outcome: str
    reason: str | None
    exit_status: int | None
    log: str | None
    recorded: float
    files: tuple[FileRecord, ...] = ()

    @property
    def ok(self) -> bool:
        return self.outcome == SUCCEEDED

    @property
    def size(self) -> int:
        """The total size of the attempt's package files, in bytes."""
        return sum(f.size for f in self.files)


def entry_rows(
    day_name: str, build_id: str, entry: BuildEntry, *, commit: str, channel: str, recorded: float
) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
    """The `builds` row and the `files` rows of one attempt, from its state.json entry."""
    e = entry
    row = (
        day_name, build_id, e.attempts, commit or "", channel or "", e.machine, e.queue,
        e.executor, e.package, e.python, e.cuda, e.variant, e.started, e.ended, e.duration_s,
        e.status or "pending", e.reason, e.exit_status, e.log, recorded,
    )
    files = [
        (day_name, build_id, e.attempts, p.name, p.path, p.size, p.sha256)
        for p in e.packages if p.name
    ]
    return row, files


def files_by_key(rows: list[Any]) -> dict[tuple[str, int], tuple[FileRecord, ...]]:
    out: dict[tuple[str, int], list[FileRecord]] = {}
    for bid, attempt, name, path, size, sha in rows:
        out.setdefault((str(bid), int(attempt)), []).append(
            FileRecord(name=str(name), path=str(path), size=int(size), sha256=str(sha))
        )
    return {k: tuple(v) for k, v in out.items()}


def record_from_row(r: Any, files: tuple[FileRecord, ...]) -> BuildRecord:
    return BuildRecord(
        day=str(r[0]),
        build_id=str(r[1]),
        attempt=int(r[2]),
        commit=str(r[3]),
        channel=str(r[4]),
        machine=str(r[5]),
        queue=opt_int(r[6]),
        executor=str(r[7]),
        package=str(r[8]),
        python=str(r[9]),
        cuda=str(r[10]),
        variant=str(r[11]),
        started=opt_float(r[12]),
        ended=opt_float(r[13]),
        duration_s=opt_float(r[14]),
        outcome=str(r[15]),
        reason=opt_str(r[16]),
        exit_status=opt_int(r[17]),
        log=opt_str(r[18]),
        recorded=float(r[19]),
        files=files,
    )
