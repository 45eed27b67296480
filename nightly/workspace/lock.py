"""The day's lock: one run (or upload) per day folder at a time, on any number of hosts
sharing the folder."""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from nightly.errors import LockHeld, StateError, UsageError
from nightly.jsonvalues import json_object


@dataclass
class DayLock:
    """An flock on ROOT/YYYY_MM_DD.lock. The kernel drops it when the holder dies (even
    kill -9), so a stale lock never blocks a night; its JSON says who holds it."""

    path: Path
    fd: int = -1
    taken_over: dict[str, object] | None = None

    def acquire(self, purpose: str = "run") -> DayLock:
        check_lock_file(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # 0600: a lock file anyone could open is a lock anyone could hold (flock needs
            # only a read descriptor), pushing every later night of this day out.
            # O_NONBLOCK: a FIFO put there after the check must not make the run wait.
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
        except OSError as e:
            check_lock_file(self.path)  # a link or a folder: say so, not "cannot write"
            raise UsageError(
                f"cannot write the day folder {self.path.parent}: {e.strerror or e} "
                "(pass --root DIR, or set root, to a folder nightly can write)"
            ) from e
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise _not_a_lock(self.path, mode)
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o600)  # one made 0644 by an earlier version
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


def _kind(mode: int) -> str:
    for test, kind in ((stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


def _not_a_lock(lock: Path, mode: int) -> StateError:
    return StateError(
        f"the day's lock file {lock} is {_kind(mode)}, not a file nightly wrote: no run can "
        f"hold it; remove it (rm {'-r ' if stat.S_ISDIR(mode) else ''}'{lock}') and run again")


def check_lock_file(lock: Path) -> None:
    """Raise StateError (one line, exit 2) when the day's lock file exists and is no regular
    file: a FIFO would make every reader wait for a writer forever, a folder or a link is
    none of nightly's. Nothing of nightly's is in such a thing: the fix is to remove it."""
    try:
        mode = os.lstat(lock).st_mode
    except OSError:  # absent, or its folder is not one: what opens it says so
        return
    if not stat.S_ISREG(mode):
        raise _not_a_lock(lock, mode)


def is_locked(day_path: Path) -> bool:
    """True when a live process holds the lock of this day folder (for retention).
    StateError when the lock file is no regular file (check_lock_file): never waited on."""
    lock = day_path.parent / f"{day_path.name}.lock"
    check_lock_file(lock)
    try:  # O_NONBLOCK: a FIFO swapped in after the check must not make this wait
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        check_lock_file(lock)  # replaced since the check (a link): say what it is now
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _not_a_lock(lock, mode)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False

