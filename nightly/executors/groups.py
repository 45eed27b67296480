"""The record of a running recipe's process group, and the reap of what a run that died left
running of a build (its cgroup, its process group), which never kills a process that merely
reuses a recorded number.

A process group's number is never given to a new process while any member of the group
lives. So when the process numbered like the recorded group exists but did not start at the
recorded time (exactly: a later start is another process), the recorded group is gone and
nothing is killed; each member is also checked to be of the users the record names, and is
killed through a pidfd opened and checked again first (a number freed and reused between the
check and the kill is never hit).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from nightly.executors import confine
from nightly.executors.base import Job
from nightly.files import boot_id, proc_stat
from nightly.hardening import BuildUser
from nightly.jsonvalues import as_int, opt_int, read_json_object


def _ours(path: Path) -> bool:
    """A regular file (not a link) of this process's user, that no one else can write."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()
            and not st.st_mode & 0o022)


# The record of a running recipe's process group. Not in the build's own folder
# (work_dir.parent), which a build user owns while its recipe runs: a record planted there
# would make the next run's reap kill a group of the user's choosing. One level up is
# nightly's (the day's or the stable build folder's work/).
def group_record_path(job: Job) -> Path:
    return job.work_dir.parent.parent / f".{job.work_dir.parent.name}.pgid"


def record_group(job: Job, pid: int, user: BuildUser | None = None) -> Path:
    """Record the new recipe's group (pid = pgid), its start time, boot and users."""
    path = group_record_path(job)
    fields = proc_stat(pid)
    # Who its processes may be: nightly's user (the gate) and the build user.
    uids = sorted({os.geteuid(), *([user.uid] if user is not None else [])})
    info = {"pgid": pid, "start": fields[18] if fields else 0, "boot": boot_id(), "uids": uids}
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    # 0644 whatever the umask: reap acts only on a record no one else could have written.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as f:
        os.fchmod(fd, 0o644)
        f.write(json.dumps(info))
    os.replace(tmp, path)
    return path


def _member(pid: int, pgid: int, start: int, uids: set[int] | None) -> bool:
    st = proc_stat(pid)
    if not st or st[1] != pgid or st[2] != pgid or st[18] < start:
        return False
    if uids is None:
        return True
    who = confine.describe_process(pid)
    return who is not None and who.uid in uids


def group_members(pgid: int, start: int, uids: set[int] | None = None) -> list[int]:
    """Live processes of the recorded session/group `pgid` (of `uids`, when given), or none
    when the number now names another process than the recorded leader."""
    leader = proc_stat(pgid)
    if leader is not None and leader[18] != start:
        return []  # the number was reused: an unrelated process, never killed
    return [int(e) for e in os.listdir("/proc")
            if e.isdigit() and _member(int(e), pgid, start, uids)]


def kill_members(members: list[int], pgid: int, start: int, uids: set[int] | None) -> int:
    """SIGKILL each member through a pidfd, checked again once the pidfd holds it; wait up
    to 5 s for them to be gone. How many were killed."""
    return len(confine.kill_checked(members, lambda pid: _member(pid, pgid, start, uids)))


def reap_recorded(job: Job) -> list[str]:
    """Kill what a run that died left running of `job`'s build: its recipe's cgroup and
    process group, and those of every other process nightly boxed for it (its smoke and GPU
    tests, recorded beside their folders inside the build's folder). Notes for the log."""
    notes = _reap_record(group_record_path(job), job.build_id)
    folder = job.work_dir.parent
    try:
        inner = [folder / n for n in os.listdir(folder) if n.startswith(".") and n.endswith(".pgid")]
    except OSError:
        inner = []
    for record in inner:
        notes += _reap_record(record, job.build_id)
    return notes


def reap_helpers(folder: Path) -> list[str]:
    """Kill the helpers (uploads, notify commands...) a run that died left running, recorded
    in `folder` by nightly.procs.box_helpers; notes for the night's log."""
    try:
        records = [folder / n for n in os.listdir(folder) if n.endswith(".pgid")]
    except OSError:
        return []
    notes = []
    for record in records:
        notes += _reap_record(record, "the night's helpers (uploads, notify)")
    return notes


def _reap_record(record: Path, build_id: str) -> list[str]:
    notes = []
    for box in confine.shared().existing(str(record)):
        left = box.end()
        if left:
            notes.append(f"killed {len(left)} process(es) of {build_id} left running by a "
                         f"run that died (its cgroup): "
                         + "; ".join(p.describe() for p in left))
    try:
        if not _ours(record):  # only a record nightly wrote is ever acted on
            return notes
        info = read_json_object(record)
        pgid_, start_ = opt_int(info.get("pgid")), opt_int(info.get("start"))
        if pgid_ is None or start_ is None:  # `true` is no pid: never a process group 1
            return notes
        pgid, start = pgid_, start_
        boot = str(info.get("boot", ""))
        uids_ = info.get("uids")
        uids = {as_int(u) for u in uids_ if opt_int(u) is not None} if isinstance(
            uids_, list) else None
    except (OSError, ValueError, KeyError, TypeError):
        return notes
    if boot == boot_id() and pgid > 1:
        members = group_members(pgid, start, uids)
        n = kill_members(members, pgid, start, uids) if members else 0
        if n:
            notes.append(f"killed {n} process(es) of {build_id} left running by a run "
                         f"that died (process group {pgid})")
    record.unlink(missing_ok=True)
    return notes


__all__ = ["group_members", "group_record_path", "kill_members", "reap_helpers", "reap_recorded",
           "record_group"]
