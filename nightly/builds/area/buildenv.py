"""The build environment kept from night to night in the stable build folder.

A build's environment (WORK_DIR/build-venv: its venv and build requirements,
recipes/common/buildenv.sh) costs seconds to make and fill, and is the same every night
until the interpreter, the requirements or where they come from change. Its path must stay
`WORK_DIR/build-venv` (the compiler cache hashes the include paths into it), and the
slot's `work/<id>/` is removed when a build starts. So in a slot (builds/slot.py) each
build's environment is kept beside the work folders between nights:

    .builds/locks/env.<id>         held (flock) by the build that uses the environment (0700
                                   folder, builds/slot.py: no other user opens it)
    .builds/envs/<id>/build-venv   the environment, between nights (envs/ 0700: nightly's)

and moved into the build's WORK_DIR when it starts (a rename: no copy), back when it
succeeds. The recipe checks it against its key before use (envkey.py: the interpreter, the
requirement lines, their sources, the isolation mode, the installer; the key file written
last, after a successful fill) and rebuilds it, saying why in one log line, when anything
differs or is missing. One per build id, locked: two builds running at once never share one.
A night outside the slot (building in its day folder) gets a fresh one, as a failed build
does the next night (its environment stays in its folder, parked for a post-mortem).
Deleting `.builds/envs/` (or `[build] reuse_env = false`) forces fresh ones.
"""

from __future__ import annotations

import fcntl
import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from nightly.builds.area.slot import LOCKS, in_slot, slot_of
from nightly.executors.base import Job
from nightly.files import remove_tree

ENVS = "envs"
VENV = "build-venv"
# What the recipe reads: a kept environment may be in WORK_DIR (buildenv.sh, kept_build_venv).
REUSE_ENV = "NIGHTLY_BUILD_ENV_REUSE"


@dataclass(frozen=True, kw_only=True)
class Kept:
    """A build's kept environment, locked by this process while the build runs."""

    home: Path  # .builds/envs/<id>: where it lies between nights
    fd: int  # the lock (.builds/envs/<id>.lock), held until put_back


def take(slot: Path, build_id: str, work_dir: Path) -> Kept | None:
    """The build's kept environment (if any) moved into `work_dir` and locked; None when it
    cannot be locked (another process uses it: the build then makes a fresh one)."""
    envs, locks = slot / ENVS, slot / LOCKS
    try:
        envs.mkdir(mode=0o700, exist_ok=True)
        if envs.is_symlink() or not envs.is_dir() or locks.is_symlink() or not locks.is_dir():
            return None
        fd = os.open(locks / f"env.{build_id}",
                     os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    home = envs / build_id
    kept = home / VENV
    try:
        if kept.is_dir() and not kept.is_symlink():
            os.rename(kept, work_dir / VENV)
    except OSError:  # another file system, a leftover in the way: the recipe makes a fresh one
        pass
    return Kept(home=home, fd=fd)


def put_back(kept: Kept, work_dir: Path, *, succeeded: bool) -> None:
    """After the build: a succeeded build's environment kept for the next night (only a
    complete one: the recipe wrote its key last); the lock released."""
    try:
        venv = work_dir / VENV
        if succeeded and not venv.is_symlink() and (venv / ".nightly-env-key").is_file():
            if os.path.lexists(kept.home):
                remove_tree(kept.home)
            kept.home.mkdir(mode=0o755)
            os.rename(venv, kept.home / VENV)
    except OSError:
        pass  # not kept: the next night makes a fresh one
    finally:
        os.close(kept.fd)


class Keeper:
    """The runner's kept environments (builds outside a slot always make a fresh one)."""

    def __init__(self) -> None:
        self._kept: dict[str, Kept] = {}
        self._lock = threading.Lock()  # builds of several queues start and end at once

    def attach(self, job: Job, *, enabled: bool) -> Job:
        """The build's environment of an earlier night put into its (fresh) WORK_DIR and
        locked until `release`; the job told so (REUSE_ENV) for the recipe to check it.
        `enabled`: [build] reuse_env."""
        if not enabled or not in_slot(job.work_dir.parent):
            return job
        self.release(job, succeeded=False)  # an earlier attempt's, if any
        kept = take(slot_of(job.work_dir.parent), job.build_id, job.work_dir)
        if kept is None:
            return job
        with self._lock:
            self._kept[job.build_id] = kept
        return replace(job, env={**job.env, REUSE_ENV: "1"})

    def release(self, job: Job, *, succeeded: bool) -> None:
        with self._lock:
            kept = self._kept.pop(job.build_id, None)
        if kept is not None:
            put_back(kept, job.work_dir, succeeded=succeeded)


__all__ = ["ENVS", "REUSE_ENV", "VENV", "Keeper", "Kept", "put_back", "take"]
