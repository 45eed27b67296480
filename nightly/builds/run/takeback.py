"""Taking a finished build's packages back: the bytes tested are the bytes signed and
published.

When a recipe (and everything it started: nightly.executors.confine) has ended, each package
in its OUTPUT_DIR becomes nightly's own file in a folder nightly creates and only nightly's
user can write. Where that is as safe as a copy, its inode is adopted without copying a byte:
one link, on the same file system, no open file description with write access anywhere (the
kernel grants a write lease only then), made nightly's (chown, 0644, no ACL) before that is
checked, and checked again after the one read that hashes it. Anywhere else (another open
writer, a second link, a file system without leases, nightly not root and the file not its
own) it is copied into a new file nightly writes itself, hashed as it is written. Either
way it is read without following a link, never blocks on a FIFO, and is bounded
(`MAX_PACKAGE_BYTES`). Those files are normalised and hashed once: each is a `Taken`, its
sha256 carried from here to filing, signing and upload. Nothing re-reads them before that:
the folder and the files are nightly's own, nothing but nightly writes them (the smoke test
copies them), filing links the same inode, signing signs the carried sha256, and the
upload's own read, the copy it sends, is the check that they are still the bytes tested
(nightly.publish.sending). Only a copy made on the way (another file system) is hashed again.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import signal
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nightly.builds.repro.reproducible import normalise_packages
from nightly.executors.base import ExecResult, Job
from nightly.files import remove_tree, sha256_file

TAKEN = "taken"  # the folder, in the build's own folder, nightly takes the packages into
MAX_PACKAGE_BYTES = 64 << 30  # one package larger than this is not taken
_BLOCK = 4 << 20  # the copy's buffer, reused for every block


class NotTaken(ValueError):
    """A package that could not be taken back (the message names it and why)."""


@dataclass(frozen=True, kw_only=True)
class Taken:
    """A package taken back: nightly's own file, and the sha256 and size of its bytes as
    they were hashed once (what is tested, filed, signed and uploaded)."""

    path: Path
    sha256: str
    size: int

    @property
    def name(self) -> str:
        return self.path.name


def taken_folder(build_folder: Path) -> Path:
    """A fresh folder of nightly's own (0755, nightly's user) for the taken packages."""
    folder = build_folder / TAKEN
    remove_tree(folder)  # whatever is there (a link is removed, never followed)
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    return folder


def take_one(src: Path, dest_dir: Path, limit: int = MAX_PACKAGE_BYTES) -> Path:
    """`src` made a file of nightly's in `dest_dir`, adopted or copied (bounded, no link
    followed, no FIFO waited on); that file's path."""
    return take_hashed(src, dest_dir, limit)[0]


def take_hashed(src: Path, dest_dir: Path, limit: int = MAX_PACKAGE_BYTES) -> tuple[Path, str]:
    """take_one, and the sha256 of the bytes kept, hashed in the one read nightly makes of
    them: the package's own inode adopted where that is as safe as a copy (_adopt), else a
    copy hashed as it is written."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        raise NotTaken(f"{src.name}: cannot be taken from OUTPUT_DIR: {e.strerror}") from e
    dest = dest_dir / src.name
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotTaken(f"{src.name} in OUTPUT_DIR is not a regular file")
        if st.st_size > limit:
            raise NotTaken(f"{src.name} is {st.st_size} bytes, more than the {limit} a package "
                           "may have")
        if _adopt(fd, st, src, dest):
            digest = _hash_fd(fd, src.name, limit)
            if _no_writer(fd):  # still none after the read: the bytes hashed are the bytes kept
                return dest, digest
            dest.unlink()  # an opener raced the hand-over: a copy of nightly's after all
            os.lseek(fd, 0, os.SEEK_SET)
        out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            digest = _copy_hashing(fd, out, src.name, limit)
            os.fchmod(out, 0o644)
        except BaseException:
            dest.unlink(missing_ok=True)
            raise
        finally:
            os.close(out)
    finally:
        os.close(fd)
    return dest, digest


def _adopt(fd: int, st: os.stat_result, src: Path, dest: Path) -> bool:
    """The package's inode made nightly's own file at `dest`, without copying its bytes,
    where that is as safe as a copy; False (nothing changed at `dest`) where it is not.

    Safe means nothing but nightly can change those bytes from now on: one name (no other
    link the account could write through), on the taken folder's file system, owned by
    nightly's user (or root, which makes it so), mode 0644 with no ACL, and no open file
    description with write access anywhere (_no_writer: a descriptor a build passed to a
    process that outlived it, over a socket, keeps write access a chown does not take
    away). The build's own processes have ended (confine, box): only such a descriptor
    could still write."""
    me = os.geteuid()
    if st.st_nlink != 1 or (st.st_uid != me and me != 0):
        return False
    try:
        if os.stat(dest.parent).st_dev != st.st_dev or not _no_writer(fd):
            return False
        # The open descriptor's inode linked in (never the name in OUTPUT_DIR, which could
        # name another file by now), then the build's name removed.
        procfd = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY)
        try:  # linkat(..., AT_SYMLINK_FOLLOW) of the descriptor's magic link
            os.link(str(fd), dest, src_dir_fd=procfd, follow_symlinks=True)
        finally:
            os.close(procfd)
    except OSError:
        return False
    try:
        os.unlink(src)
        if st.st_uid != me or st.st_gid != os.getegid():
            os.fchown(fd, me, os.getegid())  # also clears setuid bits and file capabilities
        os.fchmod(fd, 0o644)
        _drop_acl(fd)
        now = os.fstat(fd)
        if now.st_nlink == 1 and now.st_uid == me and _no_writer(fd):
            return True
    except OSError:
        pass
    dest.unlink(missing_ok=True)
    return False


def _no_writer(fd: int) -> bool:
    """No open file description but `fd`'s has the file open for writing (or, where the
    kernel counts them, reading): the kernel grants a write lease only then. Released at
    once. A process that opens the file meanwhile waits on the lease; its break is signalled
    with SIGURG, whose default is to be ignored (the default SIGIO would end nightly)."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
    except OSError:  # EAGAIN: another opener; EINVAL, EACCES: no leases on this file system
        return False
    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    return True


def _drop_acl(fd: int) -> None:
    """An access ACL the account set (a named user's write) removed: mode bits only."""
    try:
        os.removexattr(fd, "system.posix_acl_access")
    except OSError as e:
        if e.errno not in (errno.ENODATA, errno.EOPNOTSUPP):
            raise


def _hash_fd(fd: int, name: str, limit: int) -> str:
    """The sha256 of `fd`'s bytes from the start, through one reused buffer (bounded)."""
    h = hashlib.sha256()
    buf = bytearray(_BLOCK)
    view = memoryview(buf)
    read = 0
    while n := os.preadv(fd, [buf], read):
        read += n
        if read > limit:
            raise NotTaken(f"{name} grew past {limit} bytes while it was taken")
        h.update(view[:n])
    return h.hexdigest()


def _copy_hashing(fd: int, out: int, name: str, limit: int) -> str:
    """The bytes of `fd` written to `out` and hashed in the same pass, through one reused
    buffer (no bytes object per block: the copy costs little more than the hash alone)."""
    h = hashlib.sha256()
    buf = bytearray(_BLOCK)
    view = memoryview(buf)
    copied = 0
    while n := os.readv(fd, [buf]):
        copied += n
        if copied > limit:
            raise NotTaken(f"{name} grew past {limit} bytes while it was taken")
        h.update(view[:n])
        written = 0
        while written < n:
            written += os.write(out, view[written:n])
    return h.hexdigest()


def _identity(path: Path) -> tuple[int, int, int]:
    st = os.stat(path, follow_symlinks=False)
    return st.st_ino, st.st_size, st.st_mtime_ns


def take_build(
    produced: Sequence[Path], build_folder: Path, env: Mapping[str, str],
    sink: Callable[[bytes], None],
) -> tuple[list[Taken], str | None]:
    """A finished recipe's packages taken back, normalised (SOURCE_DATE_EPOCH) and hashed
    once: (the taken packages, None) or ([], the reason none is)."""
    try:
        folder = taken_folder(build_folder)
        pairs = [take_hashed(f, folder) for f in produced]
        before = [_identity(p) for p, _ in pairs]
        for note in normalise_packages([p for p, _ in pairs], env):
            sink(f"[nightly] {note}\n".encode())
        # Hashed as copied; a package the normalising rewrote is hashed once, as rewritten.
        taken = [Taken(path=p, sha256=d, size=os.stat(p).st_size) if _identity(p) == was
                 else Taken(path=p, sha256=sha256_file(p), size=os.stat(p).st_size)
                 for (p, d), was in zip(pairs, before, strict=True)]
    except (NotTaken, OSError) as e:
        return [], f"taking the packages back failed: {e}"
    listed = ", ".join(f"{t.name} sha256 {t.sha256}" for t in taken)
    sink(f"[nightly] packages taken back as nightly's own files: {listed}\n".encode())
    return taken, None


def take_result(produced: list[Path], job: Job, result: ExecResult, sink: Callable[[bytes], None],
                ) -> tuple[list[Path], list[Taken], ExecResult]:
    """A recipe that succeeded: its packages taken back as nightly's own files, hashed once
    (take_build); what is tested, filed, signed and published from here on, each with the
    sha256 it carries there. (the packages, the taken ones, the result: failed if not taken)"""
    if result.exit_status != 0 or not produced:
        return produced, [], result
    taken, why = take_build(produced, job.work_dir.parent, job.env, sink)
    if why is not None:
        return produced, [], ExecResult(exit_status=None, reason=why, notes=result.notes)
    return [t.path for t in taken], taken, result


__all__ = [
    "MAX_PACKAGE_BYTES",
    "NotTaken",
    "Taken",
    "take_build",
    "take_hashed",
    "take_one",
    "take_result",
    "taken_folder",
]
