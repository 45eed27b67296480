"""The day folder: layout, the day's lock, state.json for resume, log moves.

Crash safety rests on three rules: state.json is replaced atomically (write, fsync, rename);
packages reach `packages/` only by rename from the build's own output folder; a build's log is
only ever appended to or renamed, never rewritten, so kill -9 at any moment loses nothing.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import shutil
import socket
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nightly.errors import LockHeld, NightlyError

# Build states in state.json.
PENDING, RUNNING, SUCCEEDED, FAILED, INTERRUPTED = (
    "pending",
    "running",
    "succeeded",
    "failed",
    "interrupted",
)


def day_name(date: dt.date) -> str:
    return f"{date:%Y_%m_%d}"


def atomic_write(path: Path, data: bytes) -> None:
    """Write a file so readers see the old or the new content, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_json(path: Path, data: Any) -> None:
    atomic_write(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())


class Day:
    """ROOT/YYYY_MM_DD and the paths of DESIGN's day-folder contract."""

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
        for p in (self.logs, self.master, self.succeeded, self.failed, self.packages, self.work):
            p.mkdir(parents=True, exist_ok=True)

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


# ---------------------------------------------------------------------------- removal


def remove_tree(path: Path) -> None:
    """shutil.rmtree, also when the tree has read-only directories.

    rmtree never follows symlinks (it refuses one at the top and unlinks those inside).
    """

    def retry(func: Callable[..., Any], p: str, exc: BaseException) -> None:
        if isinstance(exc, FileNotFoundError):
            return
        if func in (os.unlink, os.remove, os.rmdir):
            _add_owner_rwx(os.path.dirname(p))  # unlink needs a writable parent
            func(p)
            return
        raise exc

    def run() -> None:
        if sys.version_info >= (3, 12):
            shutil.rmtree(path, onexc=retry)
        else:
            shutil.rmtree(path, onerror=lambda f, p, info: retry(f, p, info[1]))

    try:
        run()
    except OSError:
        # Unreadable directories cannot be walked: open the whole tree up, then go again.
        _open_up(path)
        run()


def _add_owner_rwx(path: str) -> None:
    try:
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode):
            os.chmod(path, stat.S_IMODE(st.st_mode) | stat.S_IRWXU)
    except OSError:
        pass


def _open_up(path: Path) -> None:
    _add_owner_rwx(str(path))
    try:
        with os.scandir(path) as entries:
            children = [e.path for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for child in children:
        _open_up(Path(child))


# ---------------------------------------------------------------------------- the lock


@dataclass
class DayLock:
    """An flock on ROOT/YYYY_MM_DD.lock. The kernel drops it when the holder dies (even
    kill -9), so a stale lock never blocks a night; its JSON says who holds it."""

    path: Path
    fd: int = -1
    taken_over: dict[str, Any] | None = None

    def acquire(self, purpose: str = "run") -> DayLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise LockHeld(
                f"another nightly {holder.get('purpose', 'run')} holds the lock for this day "
                f"({self.path}): host {holder.get('host', '?')}, pid {holder.get('pid', '?')}, "
                f"started {holder.get('started', '?')}. Wait for it to finish, or stop it."
            ) from None
        previous = _read_holder(fd)
        if previous and not previous.get("released"):
            self.taken_over = previous
        info = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": dt.datetime.now().isoformat(timespec="seconds"),
            "purpose": purpose,
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        os.fsync(fd)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd < 0:
            return
        with contextlib.suppress(OSError):
            info = _read_holder(self.fd)
            info["released"] = dt.datetime.now().isoformat(timespec="seconds")
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, json.dumps(info).encode(), 0)
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = -1

    def __enter__(self) -> DayLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        raw = os.pread(fd, 4096, 0)
        data = json.loads(raw.decode() or "{}")
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def is_locked(day_path: Path) -> bool:
    """True when a live process holds the lock of this day folder (for retention)."""
    lock = day_path.parent / f"{day_path.name}.lock"
    if not lock.exists():
        return False
    fd = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


# ---------------------------------------------------------------------------- state


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
    def builds(self) -> dict[str, dict[str, Any]]:
        b: dict[str, dict[str, Any]] = self.data["builds"]
        return b

    def get(self, build_id: str) -> dict[str, Any]:
        with self._lock:
            return dict(self.builds.get(build_id, {}))

    def status(self, build_id: str) -> str:
        return str(self.get(build_id).get("status", PENDING))

    def update(self, build_id: str, **fields: Any) -> dict[str, Any]:
        with self._lock:
            entry = self.builds.setdefault(build_id, {"status": PENDING, "attempts": 0})
            entry.update(fields)
            entry["updated"] = time.time()
            self._save()
            return dict(entry)

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
            for bid, entry in self.builds.items():
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
