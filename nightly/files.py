"""Small file and process helpers every layer uses (nothing of nightly's own below them).

One definition each: the confinement of a name to a folder, the sha256 of a file, a
time-stamped line appended to a log, the tail of a child's output, this boot's identity, and
a process's identity (pid, start time, boot) to tell the process that wrote a record from a
later one that reused its pid.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import socket
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any


def confined(name: str, folder: Path | None = None) -> PurePosixPath | None:
    """`name` (a path written with "/") when it stays inside what it is relative to, else
    None: the one confinement check for names that come from outside (an object key, an
    archive member, a path recorded in a day folder's JSON, a staged package's name).

    It must be relative and plain: not empty, no empty, `.` or `..` part, no backslash, no
    control character. With `folder`, `folder/name` must also stay under `folder` once
    links are resolved (a link that points outside, or a link loop, is None)."""
    parts = name.split("/")
    if (not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts)
            or any(ord(c) < 32 or c == "\\" for c in name)):
        return None
    rel = PurePosixPath(name)
    if folder is not None:
        try:
            if not (folder / rel).resolve().is_relative_to(folder.resolve()):
                return None
        except (OSError, RuntimeError):  # a link loop
            return None
    return rel


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks (packages can be gigabytes)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def append_line(path: Path, line: str) -> None:
    """`<local time> line` at the end of a log file (its folder made if needed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().isoformat(timespec="seconds")
    with path.open("a", encoding="utf-8") as f:
        f.write(f"{stamp} {line}\n")


def tail(out: str, limit: int = 4000) -> str:
    """":\n<the last `limit` characters of a child's output>" for an error message, or ""."""
    out = out.strip()
    if not out:
        return ""
    if len(out) > limit:
        out = "..." + out[-limit:]
    return ":\n" + out


def boot_id() -> str:
    """This boot's id (Linux), "" elsewhere: a pid recorded under another boot is gone."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def proc_stat(pid: int) -> list[int] | None:
    """Fields 3.. of /proc/PID/stat as ints after the state (index 0 = ppid, 1 = pgrp,
    2 = session, 18 = starttime), or None for a process that is gone or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    try:
        return [int(x) for x in fields[1:21]]
    except ValueError:
        return None


def _start_time(pid: int) -> int | None:
    fields = proc_stat(pid)
    return None if fields is None else fields[18]


def process_identity() -> dict[str, object]:
    """Who this process is (pid, its start time, boot, host): recorded beside what it runs."""
    pid = os.getpid()
    return {"pid": pid, "start": _start_time(pid), "boot": boot_id(), "host": socket.gethostname()}


def process_alive(owner: Mapping[str, Any]) -> bool:
    """Is the process recorded in an owner.json still the one running? Unknown: yes."""
    if owner.get("host") != socket.gethostname():
        return True  # another host's folder (a shared disk): not ours to judge
    if owner.get("boot") and owner.get("boot") != boot_id():
        return False
    try:
        pid = int(owner["pid"])
    except (KeyError, TypeError, ValueError):
        return True
    start = _start_time(pid)
    if start is not None:
        return owner.get("start") in (None, start)
    if Path("/proc").is_dir():
        return False
    return pid_exists(pid)


def pid_exists(pid: int) -> bool:
    """Whether a process numbered `pid` exists (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
