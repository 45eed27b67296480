"""The day folder ROOT/YYYY_MM_DD and the paths of the day-folder contract (docs/folders.md); atomic
writes; robust tree removal.

Crash safety rests on three rules: state.json is replaced atomically (write, fsync, rename);
packages reach `packages/` only by rename from the build's own output folder; a build's log is
only ever appended to or renamed, never rewritten, so kill -9 at any moment loses nothing.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import tempfile
from pathlib import Path

from nightly.errors import UsageError
from nightly.files import confined


def day_name(date: dt.date) -> str:
    return f"{date:%Y_%m_%d}"


def atomic_write(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Write a file so readers see the old or the new content, never a part. `sync=False`:
    without waiting for the disk first (a kill -9 still leaves the old or the new content;
    only a crash of the machine may lose the new one)."""
    tmp = write_temporary(path, data, sync=sync)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_temporary(path: Path, data: bytes, *, sync: bool = True) -> Path:
    """`data` in a new temporary file beside `path` (0644; on the disk first: `sync`), for
    the caller to rename over `path` (atomic_write) or remove."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), 0o644)
            if sync:
                os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return Path(tmp)


def sync_file(path: Path) -> None:
    """Wait for the disk to hold what `path` (a file, no link followed) holds now."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: Path, data: object) -> None:
    atomic_write(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())


class Day:
    """ROOT/YYYY_MM_DD and the paths of the day-folder contract (docs/folders.md)."""

    def __init__(self, root: Path, date: dt.date, *, name: str | None = None) -> None:
        self.root = root
        self.date = date
        self.name = name or day_name(date)
        self.path = root / self.name

    @property
    def source(self) -> Path:
        return self.path / "source"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    @property
    def master(self) -> Path:
        return self.logs / "master"

    @property
    def succeeded(self) -> Path:
        return self.logs / "succeeded"

    @property
    def failed(self) -> Path:
        return self.logs / "failed"

    @property
    def packages(self) -> Path:
        return self.path / "packages"

    @property
    def work(self) -> Path:
        """Scratch and per-build output folders (not part of the contract; cleaned up)."""
        return self.path / "work"

    def inside(self, recorded: object) -> Path | None:
        """The file a path recorded in state.json or summary.json names (relative to the day
        folder), or None when it would lead out of the day folder: absolute, through `..`, or
        through a link that points outside. Those files are rewritten by whoever can write
        the day folder; what they name is never read from anywhere else."""
        if not isinstance(recorded, str):
            return None
        rel = confined(recorded, self.path)
        return None if rel is None else self.path / rel

    @property
    def state_path(self) -> Path:
        return self.path / "state.json"

    @property
    def summary_path(self) -> Path:
        return self.path / "summary.json"

    @property
    def lock_path(self) -> Path:
        return self.root / f"{self.name}.lock"

    def create(self) -> None:
        try:
            for p in (self.logs, self.master, self.succeeded, self.failed, self.packages,
                      self.work):
                p.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"cannot write the day folder {self.path}: {e.strerror or e} "
                             "(pass --root DIR, or set root, to a folder nightly can write)") from e

    def package_dir(self, package: str, cuda: str) -> Path:
        return self.packages / package / cuda

    def running_log(self, build_id: str) -> Path:
        return self.logs / f"{build_id}.log"

    def final_log(self, build_id: str) -> Path | None:
        for d in (self.succeeded, self.failed):
            p = d / f"{build_id}.log"
            if p.exists():
                return p
        return None

    def reopen_log(self, build_id: str) -> Path:
        """The log a new attempt appends to: earlier attempts' text is kept above it."""
        running = self.running_log(build_id)
        if not running.exists():
            for d in (self.failed, self.succeeded):
                old = d / f"{build_id}.log"
                if old.exists():
                    os.replace(old, running)
                    break
        return running

    def file_log(self, build_id: str, ok: bool) -> Path:
        """Move the finished log into succeeded/ or failed/ (one atomic rename)."""
        dest = (self.succeeded if ok else self.failed) / f"{build_id}.log"
        os.replace(self.running_log(build_id), dest)
        return dest
