"""state.json: per build, what is done and what is published, for resume; typed.

Each build's entry is read as a frozen `BuildEntry`. Its JSON form is the one state.json has
always had (a night started by an earlier version resumes after an upgrade, and an earlier
version can read what this one writes): a field is written only once it has been set, keys
this version does not know are kept as they were (`BuildEntry.extra`), and `update` merges
into the stored entry instead of rewriting it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nightly.core.manylinux import ManylinuxRecord
from nightly.errors import StateError
from nightly.format import shown
from nightly.jsonvalues import JSONInputError, as_int, opt_float, read_json_file
from nightly.workspace.day import sync_file, write_temporary
from nightly.workspace.pythontests import PythonTest
from nightly.workspace.records import CacheStats, TestRecord

# Build states in state.json.
PENDING, RUNNING, SUCCEEDED, FAILED, INTERRUPTED = (
    "pending",
    "running",
    "succeeded",
    "failed",
    "interrupted",
)
FINISHED = (SUCCEEDED, FAILED, INTERRUPTED)
# `lost[].stage` of an attempt lost with its cluster worker: the build's, or its GPU test's.
LOST_BUILD, LOST_GPU_TEST = "build", "gpu-test"


@dataclass(frozen=True, kw_only=True)
class PackageFile:
    """A package a build produced, filed in the day folder."""

    name: str
    path: str  # relative to the day folder
    size: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "size": self.size, "sha256": self.sha256}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PackageFile:
        return cls(name=str(data.get("name") or ""), path=str(data.get("path") or ""),
                   size=as_int(data.get("size")), sha256=str(data.get("sha256") or ""))


@dataclass(frozen=True, kw_only=True)
class BuildEntry:
    """One build's entry in state.json."""

    status: str = PENDING
    attempts: int = 0
    reason: str | None = None
    exit_status: int | None = None
    infra: bool = False
    started: float | None = None
    ended: float | None = None
    duration_s: float | None = None
    updated: float | None = None
    machine: str = ""  # the machine (or the cluster worker's address) that ran it
    queue: int | None = None  # its queue (a cluster worker's slot)
    executor: str = ""
    package: str = ""
    python: str = ""
    cuda: str = ""
    variant: str = ""
    packages: tuple[PackageFile, ...] = ()
    log: str | None = None  # relative to the day folder
    published: Mapping[str, str] = field(default_factory=dict)  # destination -> sha256
    upload_error: str | None = None
    promoted: Mapping[str, str] = field(default_factory=dict)  # release destination -> sha256
    manual: Mapping[str, str] = field(default_factory=dict)  # a one-off build: by, at, command
    cache: CacheStats | None = None  # compiler cache statistics (nightly.builds.cache.wiring)
    manylinux: ManylinuxRecord | None = None  # policy, tags reached, glibc (nightly.core.manylinux)
    worker_name: str = ""  # cluster mode: the worker's name, host and attempt token
    host: str = ""
    token: str = ""
    # the test stage (nightly.builds.test.smoke): result, seconds, and per part (cpu, gpu) the
    # result (passed / failed / not run), where, when, seconds, attempts, reason
    tested: TestRecord | None = None
    extra: Mapping[str, object] = field(default_factory=dict)  # keys this version does not know

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def python_tests(self) -> tuple[PythonTest, ...]:
        """A limited-API build's test on each Python (nightly.workspace.pythontests)."""
        return self.tested.pythons if self.tested is not None else ()

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> BuildEntry:
        """Read an entry; a value of the wrong type (a hand-edited file) reads as unset."""
        known: dict[str, Any] = {}
        extra: dict[str, object] = {}
        for key, value in data.items():
            conv = _READ.get(key)
            if conv is None:
                extra[key] = value
                continue
            with contextlib.suppress(TypeError, ValueError, AttributeError):
                if value is not None:
                    known[key] = conv(value)
        return cls(**known, extra=extra)

    def to_json(self) -> dict[str, object]:
        """The JSON form: the fields that are set (not None, not empty), and the extra keys."""
        out: dict[str, object] = dict(self.extra)
        for f in dataclasses.fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if f.name in ("status", "attempts") or value not in (None, "", (), {}):
                out[f.name] = _json_value(value)
        return out

    def replace(self, **fields: Any) -> BuildEntry:
        return dataclasses.replace(self, **fields)


def _int(v: object) -> int:
    """A JSON integer (or its text); `true` is no 1 (TypeError: the field reads as unset)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise TypeError(f"not a number: {type(v).__name__}")
    return int(v)


def _float(v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise TypeError(f"not a number: {type(v).__name__}")
    return float(v)


def _bool(v: object) -> bool:
    """A JSON boolean; the text "false" or a number is no boolean (reads as unset)."""
    if not isinstance(v, bool):
        raise TypeError(f"not a boolean: {type(v).__name__}")
    return v


_READ: dict[str, Any] = {
    "status": str, "attempts": _int, "reason": str, "exit_status": _int, "infra": _bool,
    "started": _float, "ended": _float, "duration_s": _float, "updated": _float, "machine": str,
    "queue": _int, "executor": str, "package": str, "python": str, "cuda": str,
    "variant": str, "log": str, "upload_error": str, "worker_name": str, "host": str,
    "token": str,
    "packages": lambda v: tuple(PackageFile.from_json(p) for p in v if isinstance(p, Mapping)),
    "published": lambda v: {str(k): str(s) for k, s in dict(v).items()},
    "promoted": lambda v: {str(k): str(s) for k, s in dict(v).items()},
    "manual": lambda v: {str(k): str(s) for k, s in dict(v).items() if s is not None},
    "cache": CacheStats.from_json,
    "tested": TestRecord.from_json,
    "manylinux": ManylinuxRecord.from_json,
}


@dataclass(frozen=True, kw_only=True)
class DayMeta:
    """state.json's `meta`: the night's own facts, read as typed fields (a value of the wrong
    type reads as unset). It is a view: `State.set_meta` merges into the stored object, which
    keeps every key as written (those of other versions too); `meta[key]` is that JSON value."""

    commit: str = ""  # the source's commit ("" for a plain folder)
    source: str = ""  # how the source was described: "abc1234 (main, last commit before ...)"
    version: str = ""
    channel: str = ""  # nightly | test | release; "" when no night recorded one
    date: str = ""
    project: str = ""
    cluster: str = ""  # the cluster's address when the night ran on one
    publish_error: str | None = None
    # build -> why it was held back ([publish] atomic); None: never recorded, {}: none held
    held_back: Mapping[str, str] | None = None
    promoted: str = ""  # when the day was promoted (ISO time)
    gpu_workers: tuple[str, ...] = ()  # the cluster's GPU workers, by address
    run_started: float | None = None  # when the run that last wrote the day started (epoch s)
    raw: Mapping[str, object] = field(default_factory=dict, repr=False)

    @property
    def channel_name(self) -> str:
        """The day's channel, "nightly" when none was recorded."""
        return self.channel or "nightly"

    def __getitem__(self, key: str) -> object:
        return self.raw[key]

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> DayMeta:
        held, workers = data.get("held_back"), data.get("gpu_workers")
        text = {name: _text(data.get(name)) for name in _META_TEXT}
        error = data.get("publish_error")
        return cls(
            **text,
            publish_error=None if error is None else str(error),
            held_back=None if "held_back" not in data else (
                {str(k): str(v) for k, v in held.items()} if isinstance(held, Mapping) else {}),
            gpu_workers=tuple(str(w) for w in workers) if isinstance(workers, list) else (),
            run_started=opt_float(data.get("run_started")),
            raw=dict(data),
        )


_META_TEXT = ("commit", "source", "version", "channel", "date", "project", "cluster", "promoted")
META_FIELDS = frozenset(f.name for f in dataclasses.fields(DayMeta)) - {"raw"}


def _text(v: object) -> str:
    return "" if v is None or isinstance(v, (dict, list)) else str(v)


# state.json is written by nightly alone; a file this large is not one of its.
MAX_STATE_BYTES = 256 << 20


def _load(path: Path) -> dict[str, object]:
    """state.json, checked against its schema. A file that is not JSON or not of the schema
    is kept aside as `state.json.bad-<time>` and is an error: the day is never silently
    started afresh (its succeeded builds forgotten, its packages built and uploaded again)."""
    problem = None
    data: object = None
    try:  # a FIFO, a folder or a link is no state.json: never waited on, never followed
        data = read_json_file(path, MAX_STATE_BYTES)
    except JSONInputError as e:
        problem = str(e)
    except OSError as e:
        raise StateError(f"{path}: cannot read the day's state: {e.strerror or e}") from e
    problem = problem or _shape_problem(data)
    if problem is None and isinstance(data, dict):  # the shape checked: an object
        return dict(data)
    kept = path.with_name(f"{path.name}.bad-{time.strftime('%Y%m%dT%H%M%S')}")
    try:
        path.rename(kept)
        where = f"kept as {kept.name}"
    except OSError as e:
        where = f"could not be moved aside ({e.strerror or e}): move it yourself"
    raise StateError(
        f"{path}: not a state.json of nightly: {problem}; {where}. Restore it from that copy "
        "if you can; the next run starts the day's state afresh (published packages are only "
        "replaced with --rebuild)"
    )


def _shape_problem(data: object) -> str | None:
    """What is wrong with the shape of a parsed state.json (None: nothing)."""
    if not isinstance(data, dict):
        return f"the top level is {type(data).__name__}, not an object"
    builds, meta = data.get("builds", {}), data.get("meta", {})
    if not isinstance(builds, dict):
        return f"'builds' is {type(builds).__name__}, not an object"
    if not isinstance(meta, dict):
        return f"'meta' is {type(meta).__name__}, not an object"
    if "builds" not in data:
        return "no 'builds'"
    for bid, entry in builds.items():
        if not isinstance(entry, dict):
            return f"the entry of {bid[:80]!r} is {type(entry).__name__}, not an object"
        status = entry.get("status", PENDING)
        if status not in (PENDING, RUNNING, *FINISHED):
            return f"the entry of {bid[:80]!r} has status {str(status)[:40]!r}"
        # null is a field set back to unset (State.update with None), as valid as no field.
        for key in ("packages",):
            if entry.get(key) is not None and not isinstance(entry[key], list):
                return f"the entry of {bid[:80]!r} has {key} that is not a list"
        for key in ("published", "promoted", "manual"):
            if entry.get(key) is not None and not isinstance(entry[key], dict):
                return f"the entry of {bid[:80]!r} has {key} that is not an object"
    return None


# Fields whose words can quote what a build, a tool or a remote printed: stored as data
# (nightly.format), so every report that shows them later shows no terminal codes.
_WORDS = frozenset({"reason", "upload_error"})


def _json_value(value: object) -> object:
    if isinstance(value, (PackageFile, CacheStats, TestRecord, ManylinuxRecord)):
        return value.to_json()
    if isinstance(value, (tuple, list)):
        return [_json_value(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _json_value(v) for k, v in value.items()}
    return value


class State:
    """state.json: per build, what is done and what is published. Thread-safe; every change
    is written atomically before the call returns (in its own write or a later one)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.RLock()
        # A change is serialised under _lock, renamed into place under _disk (never one older
        # than what is there): no one waits for another's fsync to read or change the state.
        self._disk = threading.Lock()
        self._seq = self._written = self._synced = 0
        self.data: dict[str, Any] = {"builds": {}, "meta": {}}
        if os.path.lexists(path):  # a link or a FIFO too: _load says what it is
            self.data.update(_load(path))

    @property
    def _raw(self) -> dict[str, dict[str, object]]:
        b: dict[str, dict[str, object]] = self.data["builds"]
        return b

    @property
    def builds(self) -> dict[str, BuildEntry]:
        """Every build's entry, by build id (a snapshot)."""
        with self._lock:
            return {bid: BuildEntry.from_json(e) for bid, e in self._raw.items()}

    def __contains__(self, build_id: object) -> bool:
        return build_id in self._raw

    def get(self, build_id: str) -> BuildEntry:
        with self._lock:
            return BuildEntry.from_json(self._raw.get(build_id, {}))

    def status(self, build_id: str) -> str:
        return self.get(build_id).status

    def update(self, build_id: str, **fields: object) -> BuildEntry:
        """Set some fields of a build's entry (None reads back as unset)."""
        with self._lock:
            entry = self._raw.setdefault(build_id, {"status": PENDING, "attempts": 0})
            entry.update({k: _json_value(shown(v) if k in _WORDS and isinstance(v, str) else v)
                          for k, v in fields.items()})
            entry["updated"] = time.time()
            done, snapshot = BuildEntry.from_json(entry), self._snapshot()
        self._write(snapshot)
        return done

    def start(self, build_id: str, **fields: object) -> BuildEntry:
        """`update` for a build's start (status running), written without waiting for the
        disk: a kill -9 still finds it, and after a crash of the machine a build that state.json
        does not show running is simply built again, as one shown running would be."""
        with self._lock:
            entry = self._raw.setdefault(build_id, {"status": PENDING, "attempts": 0})
            entry.update({k: _json_value(v) for k, v in fields.items()})
            entry["updated"] = time.time()
            done, snapshot = BuildEntry.from_json(entry), self._snapshot()
        self._write(snapshot, sync=False)
        return done

    def note(self, build_id: str, **fields: object) -> None:
        """Set some fields of a build's entry in memory only: the build's next `update` (its
        end, at the latest) writes them with its own. For what a build records on its way
        (its cache figures, its test stage, its manylinux record), so that a build costs
        two writes of state.json, its start and its end, not one per record."""
        with self._lock:
            entry = self._raw.setdefault(build_id, {"status": PENDING, "attempts": 0})
            entry.update({k: _json_value(v) for k, v in fields.items()})

    def add_published(self, build_id: str, dest: str, sha256: str) -> None:
        """`dest` holds this build's package with this sha256 (its upload error cleared)."""
        with self._lock:
            published = {**self.get(build_id).published, dest: sha256}
            self.update(build_id, published=published, upload_error=None)

    def add_promoted(self, build_id: str, dest: str, sha256: str) -> None:
        """The release channel's `dest` holds this build's package with this sha256."""
        with self._lock:
            self.update(build_id, promoted={**self.get(build_id).promoted, dest: sha256})

    def set_meta(self, **fields: object) -> None:
        """Set fields of the day's meta (DayMeta's names; None is stored as null)."""
        unknown = set(fields) - META_FIELDS
        if unknown:
            raise TypeError(f"not a field of state.json's meta: {', '.join(sorted(unknown))}")
        with self._lock:
            self.data.setdefault("meta", {}).update(fields)
            snapshot = self._snapshot()
        self._write(snapshot)

    @property
    def meta(self) -> DayMeta:
        """The day's meta (a snapshot)."""
        with self._lock:
            return DayMeta.from_json(self.data.setdefault("meta", {}))

    def mark_stale_running(self) -> list[str]:
        """Builds left 'running' by a run that died are interrupted."""
        stale = []
        with self._lock:
            for bid, entry in self._raw.items():
                if entry.get("status") == RUNNING:
                    entry["status"] = INTERRUPTED
                    entry["reason"] = "interrupted (the run that started it died)"
                    stale.append(bid)
            snapshot = self._snapshot() if stale else None
        if snapshot is not None:
            self._write(snapshot)
        return stale

    def _snapshot(self) -> tuple[int, bytes]:
        """The state as it is now, numbered (under _lock). Compact: json's C encoder is used
        only without indent (indented, this was most of a short build's cost)."""
        self._seq += 1
        return self._seq, (json.dumps(self.data, sort_keys=True, separators=(",", ":"))
                           + "\n").encode()

    def _write(self, snapshot: tuple[int, bytes], *, sync: bool = True) -> None:
        """The change of `snapshot` on disk (synced: `sync`) when this returns, atomically: in
        its own file or a later snapshot's (then synced, `sync`, if it was not). Written and
        synced outside the disk's lock (no fsync holds another write up); renamed in order."""
        tmp, seq, placed = write_temporary(self.path, snapshot[1], sync=sync), snapshot[0], False
        try:
            with self._disk:
                if seq > self._written:
                    os.replace(tmp, self.path)
                    placed, self._written = True, seq
                    self._synced = seq if sync else self._synced
                elif sync and self._synced < seq:  # a later snapshot holds it: synced
                    sync_file(self.path)
                    self._synced = self._written
        finally:
            if not placed:
                tmp.unlink(missing_ok=True)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        with self._lock:
            yield


__all__ = ["FAILED", "FINISHED", "INTERRUPTED", "PENDING", "RUNNING", "SUCCEEDED", "BuildEntry",
           "DayMeta", "PackageFile", "State"]
