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
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nightly.errors import NightlyError
from nightly.workspace.day import atomic_write

# Build states in state.json.
PENDING, RUNNING, SUCCEEDED, FAILED, INTERRUPTED = (
    "pending",
    "running",
    "succeeded",
    "failed",
    "interrupted",
)
FINISHED = (SUCCEEDED, FAILED, INTERRUPTED)


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
                   size=int(data.get("size") or 0), sha256=str(data.get("sha256") or ""))


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
    cache: Mapping[str, Any] | None = None  # compiler cache statistics (nightly.builds.cache)
    worker_name: str = ""  # cluster mode: the worker's name, host and attempt token
    host: str = ""
    token: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys this version does not know

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BuildEntry:
        """Read an entry; a value of the wrong type (a hand-edited file) reads as unset."""
        known: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in data.items():
            conv = _READ.get(key)
            if conv is None:
                extra[key] = value
                continue
            with contextlib.suppress(TypeError, ValueError, AttributeError):
                if value is not None:
                    known[key] = conv(value)
        return cls(**known, extra=extra)

    def to_json(self) -> dict[str, Any]:
        """The JSON form: the fields that are set (not None, not empty), and the extra keys."""
        out: dict[str, Any] = dict(self.extra)
        for f in dataclasses.fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if f.name in ("status", "attempts") or value not in (None, "", (), {}):
                out[f.name] = _json_value(value)
        return out

    def replace(self, **fields: Any) -> BuildEntry:
        return dataclasses.replace(self, **fields)


_READ: dict[str, Any] = {
    "status": str, "attempts": int, "reason": str, "exit_status": int, "infra": bool,
    "started": float, "ended": float, "duration_s": float, "updated": float, "machine": str,
    "queue": int, "executor": str, "package": str, "python": str, "cuda": str,
    "variant": str, "log": str, "upload_error": str, "worker_name": str, "host": str,
    "token": str,
    "packages": lambda v: tuple(PackageFile.from_json(p) for p in v if isinstance(p, Mapping)),
    "published": lambda v: {str(k): str(s) for k, s in dict(v).items()},
    "promoted": lambda v: {str(k): str(s) for k, s in dict(v).items()},
    "manual": lambda v: {str(k): str(s) for k, s in dict(v).items() if s is not None},
    "cache": lambda v: dict(v) if isinstance(v, Mapping) else None,
}


def _json_value(value: Any) -> Any:
    if isinstance(value, PackageFile):
        return value.to_json()
    if isinstance(value, (tuple, list)):
        return [_json_value(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _json_value(v) for k, v in value.items()}
    return value


class State:
    """state.json: per build, what is done and what is published. Thread-safe; every change
    is written atomically before the call returns."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.RLock()
        self.data: dict[str, Any] = {"builds": {}, "meta": {}}
        if path.exists():
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise NightlyError(
                    f"{path} is unreadable ({e}); move it aside to start the day's state afresh"
                ) from e
            self.data.update(loaded)

    @property
    def _raw(self) -> dict[str, dict[str, Any]]:
        b: dict[str, dict[str, Any]] = self.data["builds"]
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

    def update(self, build_id: str, **fields: Any) -> BuildEntry:
        """Set some fields of a build's entry (None reads back as unset)."""
        with self._lock:
            entry = self._raw.setdefault(build_id, {"status": PENDING, "attempts": 0})
            entry.update({k: _json_value(v) for k, v in fields.items()})
            entry["updated"] = time.time()
            self._save()
            return BuildEntry.from_json(entry)

    def add_published(self, build_id: str, dest: str, sha256: str) -> None:
        """`dest` holds this build's package with this sha256 (its upload error cleared)."""
        with self._lock:
            published = {**self.get(build_id).published, dest: sha256}
            self.update(build_id, published=published, upload_error=None)

    def add_promoted(self, build_id: str, dest: str, sha256: str) -> None:
        """The release channel's `dest` holds this build's package with this sha256."""
        with self._lock:
            self.update(build_id, promoted={**self.get(build_id).promoted, dest: sha256})

    def set_meta(self, **fields: Any) -> None:
        with self._lock:
            self.data.setdefault("meta", {}).update(fields)
            self._save()

    @property
    def meta(self) -> dict[str, Any]:
        m: dict[str, Any] = self.data.setdefault("meta", {})
        return m

    def mark_stale_running(self) -> list[str]:
        """Builds left 'running' by a run that died are interrupted."""
        stale = []
        with self._lock:
            for bid, entry in self._raw.items():
                if entry.get("status") == RUNNING:
                    entry["status"] = INTERRUPTED
                    entry["reason"] = "interrupted (the run that started it died)"
                    stale.append(bid)
            if stale:
                self._save()
        return stale

    def _save(self) -> None:
        # Compact: json's C encoder is used only without indent, and the file is rewritten
        # after every change of every build (indented, this was most of a short build's cost).
        data = json.dumps(self.data, sort_keys=True, separators=(",", ":")) + "\n"
        atomic_write(self.path, data.encode())

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        with self._lock:
            yield


__all__ = [
    "FAILED",
    "FINISHED",
    "INTERRUPTED",
    "PENDING",
    "RUNNING",
    "SUCCEEDED",
    "BuildEntry",
    "PackageFile",
    "State",
]
