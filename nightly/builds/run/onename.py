"""One file name, one set of bytes: how a build's package goes into the day's `packages/`.

Two builds of a night may deliver the same file name (a limited-API wheel built for several
Pythons, two libtorch variants, a project naming its own outputs). The day folder, the store
and every index page hold one file per name, so:

- the first build to file a name gets it: the file is *linked* into place (`os.link` fails
  when the name exists: atomic against the other queues, and nothing is ever overwritten);
- a later build with identical bytes files nothing new: the one package is recorded for both;
- a later build with other bytes fails (`NameTaken`), naming the other build and the file,
  before anything of it is published.

Who holds a name is what state.json's entries record, and, for the moment between a build's
link and its state entry, the claims of this process (every queue of a night, and the
cluster's collector, file through one State in one process: the day's lock says so). A file
no build records (left by a run killed between filing and its state entry) is replaced, and
so is a build's own earlier package when the same build is built again (`--rebuild`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from nightly.files import sha256_file
from nightly.workspace import Day, State

_lock = threading.Lock()
_inflight: dict[str, str] = {}  # absolute path in packages/ -> the build filing it now


class NameTaken(ValueError):
    """Another build of the night filed this file name with other bytes."""


@dataclass(frozen=True)
class Placed:
    dest: Path
    new: bool  # linked by this build (False: identical bytes another build filed first)


def holders(day: Day, state: State, dest: Path, build_id: str) -> list[str]:
    """The other builds that hold `dest`: filing it now (this process) or recorded in state.json."""
    rel = str(dest.relative_to(day.path))
    found = {bid for bid, entry in state.builds.items() if bid != build_id
             and any(p.path == rel for p in entry.packages)}
    now = _inflight.get(str(dest))
    if now is not None and now != build_id:
        found.add(now)
    return sorted(found)


def place(day: Day, state: State, build_id: str, src: Path, dest: Path, digest: str) -> Placed:
    """Put `src` (whose bytes hash to `digest`) at `dest` in the day's packages/, never over
    another build's file: Placed(new=True) when linked, new=False when `dest` already held
    these very bytes (one package for both builds); NameTaken when it holds other bytes of
    another build. The claim stays until `release(dest)` (after the state entry is written)."""
    staged = _staged(src, dest, digest)
    try:
        while True:
            with _lock:
                try:
                    os.link(staged, dest, follow_symlinks=False)
                except FileExistsError:
                    others = holders(day, state, dest, build_id)
                else:
                    _inflight[str(dest)] = build_id
                    _drop(src)
                    return Placed(dest, True)
            theirs = _hash_existing(dest)
            if theirs is None:
                continue  # gone (an orphan replaced and taken back): try again
            if theirs == digest:
                with _lock:
                    _inflight.setdefault(str(dest), build_id)
                _drop(src)
                return Placed(dest, False)
            if others:
                raise NameTaken(
                    f"{dest.name}: build {others[0]} of this night already filed this file "
                    f"name with other bytes (its sha256 {theirs[:16]}..., this build's "
                    f"{digest[:16]}...); one file name holds one set of bytes, so "
                    f"{dest.relative_to(day.path)} stays {others[0]}'s and this build's is not "
                    "filed: give each build its own file name (a Python or variant tag)")
            with _lock:  # no build holds it: a dead run's leftover or this build's own old one
                if holders(day, state, dest, build_id):
                    continue  # taken meanwhile: decide again
                os.replace(staged, dest)
                _inflight[str(dest)] = build_id
                _drop(src)
                return Placed(dest, True)
    finally:
        if staged != src:
            _drop(staged)


def _drop(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def release(dests: list[Path]) -> None:
    """Forget this process's claims on `dests` (their state entry now records them, or they
    were taken back)."""
    with _lock:
        for d in dests:
            _inflight.pop(str(d), None)


def take_back(placed: list[Placed]) -> None:
    """A build that failed while filing: the files it linked itself are removed again."""
    for p in placed:
        if p.new:
            with contextlib.suppress(OSError):
                p.dest.unlink()
    release([p.dest for p in placed])


def _hash_existing(dest: Path) -> str | None:
    try:
        fd = os.open(dest, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    os.close(fd)
    return sha256_file(dest)


def _staged(src: Path, dest: Path, digest: str) -> Path:
    """`src` itself when it can be linked into `dest`'s folder (same file system); else a
    copy beside `dest` (never through a symlink), checked against `digest`."""
    st = os.lstat(src)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{src.name} is not a regular file")
    if st.st_dev == os.stat(dest.parent).st_dev:
        return src
    fd_out, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as s, os.fdopen(fd_out, "wb") as out:
        shutil.copyfileobj(s, out)
    if sha256_file(Path(tmp)) != digest:
        os.unlink(tmp)
        raise ValueError(f"{src.name} changed while it was filed")
    os.chmod(tmp, 0o644)
    return Path(tmp)


__all__ = ["NameTaken", "Placed", "holders", "place", "release", "take_back"]
