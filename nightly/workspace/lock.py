"""The day's lock: one run (or upload) per day folder at a time, on any number of hosts
sharing the folder."""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from nightly.errors import LockHeld, UsageError
from nightly.jsonvalues import json_object


@dataclass
class DayLock:
    """An flock on ROOT/YYYY_MM_DD.lock. The kernel drops it when the holder dies (even
    kill -9), so a stale lock never blocks a night; its JSON says who holds it."""

    path: Path
    fd: int = -1
    taken_over: dict[str, object] | None = None

    def acquire(self, purpose: str = "run") -> DayLock:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # 0600: a lock file anyone could open is a lock anyone could hold (flock needs
            # only a read descriptor), pushing every later night of this day out.
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            with contextlib.suppress(OSError):
                os.fchmod(fd, 0o600)  # one made 0644 by an earlier version
        except OSError as e:
            raise UsageError(
                f"cannot write the day folder {self.path.parent}: {e.strerror or e} "
                "(pass --root DIR, or set root, to a folder nightly can write)"
            ) from e
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


def _read_holder(fd: int) -> dict[str, object]:
    try:
        raw = os.pread(fd, 4096, 0)
    except OSError:
        return {}
    return json_object(raw or b"{}") or {}


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

