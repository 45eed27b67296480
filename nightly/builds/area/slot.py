"""The stable build folder: host builds at paths that are the same every night.

The recipes map the work and source folders out of what compilers write
(`-ffile-prefix-map=<folder>=/nightly/work`, recipes/common/lib.sh), and sccache hashes that
flag's text. In the day folder those paths name the date, so no compile of one night could hit
an object of another. So a night of local builds claims its nightlies root's *slot*, a folder
outside every day folder whose path never changes:

    .builds/locks/night  held (flock) by the night that uses the slot; released when it ends,
                         also when it is killed. Only nightly's user can open it (0600 in a
                         0700 folder): no other local user can hold it and push every later
                         night out of the slot
    .builds/source/      the night's source, copied (never hard-linked: no inode shared with
                         the day's copy or the original repository) fresh each night
    .builds/work/<id>/   each build's folder (scratch, output, compiler cache tools), removed
                         when the build starts; a failed build's is moved into the day
                         (`<day>/work/<id>`) afterwards, as before

A second night of the same root running at the same time finds the slot taken and builds in
its day folder (no sharing, never a shared folder). For a build user the slot is in its build
area (`nights/<project>-<hash>/.builds`), root's like the rest of it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Callable
from pathlib import Path

from nightly.files.copy import copy_tree
from nightly.workspace import remove_tree

NAME = ".builds"
LOCKS = "locks"  # .builds/locks/ (0700): the lock file, which no other user may open
LOCK = "night"


def claim(base: Path, stack: contextlib.ExitStack) -> Path | None:
    """The slot of `base` (made if missing), locked until `stack` closes; None when another
    night holds it or it is not a plain folder of ours (a link, another owner)."""
    slot = base / NAME
    try:
        slot.mkdir(mode=0o755, parents=True, exist_ok=True)
        if not _ours(slot):
            return None
        os.chmod(slot, 0o755)
        locks = slot / LOCKS
        locks.mkdir(mode=0o700, exist_ok=True)
        if not _ours(locks):
            return None
        os.chmod(locks, 0o700)  # no other user reaches the lock file, whatever its mode
        fd = os.open(locks / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        os.fchmod(fd, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    stack.callback(os.close, fd)  # closing the file releases the lock
    return slot


def _ours(folder: Path) -> bool:
    st = os.lstat(folder)
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()


def fill(slot: Path, source: Path) -> None:
    """The slot's source: a fresh copy of `source` (links copied as links, never followed;
    never a hard link, so a build that writes a file in place reaches neither the day's copy
    nor the repository it was cloned from), and an empty work folder."""
    dest = slot / "source"
    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    elif dest.exists():
        remove_tree(dest)
    copy_tree(source, dest)  # any depth (nightly.files.copy)
    work = slot / "work"
    work.mkdir(mode=0o755, exist_ok=True)
    os.chmod(work, 0o755)


def in_slot(folder: Path) -> bool:
    """True for a build's folder in a slot (`.builds/work/<id>`)."""
    return folder.parent.name == "work" and folder.parent.parent.name == NAME


def slot_of(folder: Path) -> Path:
    """The slot (`.builds/`) a build's folder in it (`.builds/work/<id>`) belongs to."""
    return folder.parent.parent


def park(folder: Path, dest: Path, note: Callable[[str], None]) -> None:
    """A failed build's folder from the slot into the day (`dest`), where it would have been
    built before: kept for a post-mortem, and out of the next night's way."""
    try:
        if os.path.lexists(dest):
            remove_tree(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.rename(folder, dest)
    except OSError as e:  # another file system: it stays in the slot until the build's next start
        note(f"the failed build's folder stays in {folder} ({e.strerror or e})")


__all__ = ["NAME", "claim", "fill", "in_slot", "park", "slot_of"]
