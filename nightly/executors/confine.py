"""No process of a build outlives it: each recipe (and each smoke test) of the local executor
runs in a cgroup of its own that nightly creates, reads and kills (cgroup v2, `cgroup.kill`).

A process the recipe starts in its own session (`setsid`, a daemon) leaves the recipe's
process group but never its cgroup: when the recipe ends, whatever is still in the cgroup is
named in the build's log and killed, all at once and without a race on process numbers
(`cgroup.kill`), before nightly takes the packages back.

With a build account (`[executor.local] user`), every process of that account is checked
before and after each build: one outside nightly's cgroups (left by an earlier night, a run
that died, or started by anyone else as the account) is killed and named before the build
starts, so no build starts while such a process remains.

Where nightly cannot create cgroups (not root, no cgroup v2 mounted, a kernel without
`cgroup.kill`), `Confinement.unavailable` says why and the executor writes that in the log:
only the recipe's process group is killed then.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nightly.files import proc_stat

PARENT = "nightly.builds"  # nightly's folder in the cgroup v2 hierarchy
_KILL_WAIT_S = 5.0  # how long a killed build's processes get to go (SIGKILL: the kernel's)
_CMDLINE_MAX = 200  # characters of a leftover's command line in the log


def _cgroup2_mount() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or .../unified on a hybrid
    system), or None."""
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "cgroup2":
            return Path(parts[1])
    return None


@dataclass(frozen=True)
class Process:
    pid: int
    uid: int
    command: str

    def describe(self) -> str:
        return f"pid {self.pid} (uid {self.uid}): {self.command}"


def describe_process(pid: int) -> Process | None:
    """pid, real uid and command line of a live process (None when it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()[:4096]
    except OSError:
        return None
    uid = -1
    for line in status.splitlines():
        if line.startswith("Uid:"):
            uid = int(line.split()[1])
            break
    command = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
    if not command:
        command = f"[{status.splitlines()[0].partition(':')[2].strip()}]"
    return Process(pid, uid, command[:_CMDLINE_MAX])


class Box:
    """One build's cgroup: processes put in it stay in it, with everything they start."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(f"{pid}\n")

    def members(self) -> list[int]:
        try:
            text = (self.path / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(x) for x in text.split()]

    def leftovers(self) -> list[Process]:
        return [p for p in map(describe_process, self.members()) if p is not None]

    def kill(self) -> None:
        """Every process in the box killed (cgroup.kill), waited for, the box removed."""
        if not self.path.is_dir():
            return
        with contextlib.suppress(OSError):
            (self.path / "cgroup.kill").write_text("1\n")
        end = time.monotonic() + _KILL_WAIT_S
        while self.members() and time.monotonic() < end:
            time.sleep(0.01)
        with contextlib.suppress(OSError):
            self.path.rmdir()

    def end(self) -> list[Process]:
        """What was still running in the box (named before it was killed); the box gone."""
        left = self.leftovers()
        self.kill()
        return left


class Confinement:
    """Makes boxes under nightly's folder of the cgroup v2 hierarchy, when it can."""

    def __init__(self, base: Path | None = None) -> None:
        self.unavailable: str | None = None
        self.base: Path | None = None
        mount = _cgroup2_mount() if base is None else base
        if os.geteuid() != 0 and base is None:
            self.unavailable = (f"nightly runs as uid {os.geteuid()}, not root: it cannot "
                                "create a cgroup per build")
        elif mount is None:
            self.unavailable = "no cgroup v2 hierarchy is mounted (/proc/self/mounts)"
        else:
            parent = mount / PARENT
            try:
                parent.mkdir(mode=0o755, exist_ok=True)
                probe = parent / f".probe-{os.getpid()}"
                probe.mkdir(exist_ok=True)
                try:
                    if not (probe / "cgroup.kill").exists():
                        self.unavailable = "this kernel has no cgroup.kill (Linux 5.14+ has)"
                finally:
                    probe.rmdir()
            except OSError as e:
                self.unavailable = f"cannot create a cgroup under {parent}: {e.strerror}"
            if self.unavailable is None:
                self.base = parent

    def name_for(self, key: str) -> str:
        return "b-" + hashlib.sha256(key.encode()).hexdigest()[:24]

    def open(self, key: str) -> Box | None:
        """A fresh box for `key` (one per build folder), named after it and after this
        nightly process (pid and start time: a box whose nightly is gone holds leftovers);
        a box of that key left by a run that died is killed first. None where boxes are
        unavailable."""
        if self.base is None:
            return None
        for old in self.existing(key):
            old.kill()
        box = Box(self.base / f"{self.name_for(key)}-{_OWNER}")
        box.path.mkdir(mode=0o755)
        return box

    def existing(self, key: str) -> list[Box]:
        if self.base is None:
            return []
        try:
            names = os.listdir(self.base)
        except OSError:
            return []
        prefix = self.name_for(key) + "-"
        return [Box(self.base / n) for n in names if n.startswith(prefix)]

    def holds(self, pid: int) -> bool:
        """`pid` is in the box of a build running now (of a nightly process still alive)."""
        try:
            text = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            return True  # gone: nothing to do about it
        for line in text.splitlines():
            if not line.startswith("0::"):
                continue
            parts = line[3:].strip().rsplit("/", 2)
            if len(parts) == 3 and parts[1] == PARENT:
                return _owner_alive(parts[2])
        return False


def _owner() -> str:
    stat = proc_stat(os.getpid())
    return f"{os.getpid()}-{stat[18] if stat else 0}"


_OWNER = _owner()


def _owner_alive(box: str) -> bool:
    """The nightly process that made box `b-<key>-<pid>-<start>` is still running."""
    parts = box.split("-")
    if len(parts) != 4 or not (parts[2].isdigit() and parts[3].isdigit()):
        return False
    stat = proc_stat(int(parts[2]))
    return stat is not None and stat[18] == int(parts[3])


def real_uid(pid: int) -> int | None:
    """The real uid of a live process (its status's `Uid:` line), None when it is gone.
    One small read: the sweep before and after each build reads every process's, and a
    process whose uid is not the account's is never read further. (Not the owner of
    /proc/PID's files: those of a process that made itself non-dumpable are root's.)"""
    try:
        fd = os.open(f"/proc/{pid}/status", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        head = os.read(fd, 1024)
    except OSError:
        return None
    finally:
        os.close(fd)
    at = head.find(b"\nUid:")
    fields = head[at + 5:].split(None, 1) if at >= 0 else []
    if not fields or not fields[0].isdigit():  # not in the first KiB: read it all
        p = describe_process(pid)
        return None if p is None else p.uid
    return int(fields[0])


def strays(uid: int, confinement: Confinement) -> list[Process]:
    """The live processes of account `uid` outside nightly's boxes: left behind by an
    earlier build, or started as the account by anyone."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        if real_uid(int(entry)) != uid:
            continue
        p = describe_process(int(entry))
        if p is None or p.uid != uid or proc_stat(p.pid) is None:
            continue
        if not confinement.holds(p.pid):
            found.append(p)
    return found


def kill_strays(uid: int, confinement: Confinement) -> list[Process]:
    """Kill the account's processes outside nightly's boxes (SIGKILL through a pidfd, so a
    number reused meanwhile is never hit); the ones killed. Only with boxes: without them
    the account's running builds could not be told from leftovers."""
    if confinement.base is None:
        return []
    def still_a_stray(pid: int) -> bool:
        again = describe_process(pid)
        return again is not None and again.uid == uid and not confinement.holds(pid)

    found = strays(uid, confinement)
    killed = set(kill_checked([p.pid for p in found], still_a_stray))
    return [p for p in found if p.pid in killed]


def kill_checked(pids: list[int], still_ours: Callable[[int], bool]) -> list[int]:
    """SIGKILL each of `pids` through a pidfd, and only when `still_ours(pid)` holds once the
    pidfd pins the process (a number reused meanwhile is never hit); then wait up to 5 s for
    them to be gone. The pids killed."""
    killed = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            if still_ours(pid):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
                killed.append(pid)
        except OSError:
            continue
        finally:
            os.close(fd)
    end = time.monotonic() + _KILL_WAIT_S
    while time.monotonic() < end and any(proc_stat(p) is not None for p in killed):
        time.sleep(0.01)
    return killed


_SHARED: Confinement | None = None


def shared() -> Confinement:
    """This process's Confinement (the probe is made once)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = Confinement()
    return _SHARED


__all__ = ["Box", "Confinement", "Process", "describe_process", "kill_checked", "kill_strays",
           "real_uid", "shared", "strays"]
