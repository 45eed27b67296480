"""copy_tree: shutil.copytree without recursion, on nightly.files' tree primitives.

What nightly copies (the project's source into the day folder, a build's slot and the build
user's area, the tree a build backend is asked about, the wheelhouse) is the project's, and
a project may hold a tree of any depth: copytree recurses (RecursionError at ~1,000 levels)
and names every entry by its full path (ENAMETOOLONG past PATH_MAX). This copy works relative
to open folders, one folder of each side open at any depth, and follows no link.

What each kind of entry becomes in the copy:
- a folder: a folder, its mode and times set once its content is in;
- a regular file: a regular file of the same bytes, mode bits and times (as copy2);
  read up to the size it had when opened (a file that grows meanwhile cannot make the copy
  endless);
- a symbolic link: the same link (its target text as it is, never followed or resolved),
  as copytree(symlinks=True) made it;
- a FIFO, socket or device: left out (no build reads data from one, and reading one may
  hang or never end); copytree failed on FIFOs and sockets and read devices.
Hard links become separate files. Owners and extended attributes are not copied.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# The same primitives as walk_tree and remove_tree (one definition each).
from nightly.files import _DIR_FLAGS, _ident, _listing, _up

_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20


@dataclass
class _Pair:
    src: tuple[int, int]  # (st_dev, st_ino) of the source folder
    dest: tuple[int, int]  # and of its copy: the way back up must lead to both
    st: os.stat_result  # the source folder's, given to its copy once it is filled
    pending: list[str] = field(default_factory=list)
    listed: bool = False


def copy_tree(src: Path, dest: Path, *, ignore: Callable[[str], bool] | None = None) -> None:
    """Copy the folder `src` to `dest` (which must not exist; its parents are made), any
    depth, no link followed (module docstring: what each kind of entry becomes). An entry
    whose name `ignore` accepts is left out with all it holds. Raises OSError: `src` is not
    a folder (or is a link), an entry cannot be read, a folder moved while it was copied
    (nightly.files.TreeChanged); what was copied until then stays in `dest` (callers copy
    into a ".partial" folder)."""
    sfd = os.open(src, _DIR_FLAGS)
    dfd = -1
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(dest, 0o700)
        dfd = os.open(dest, _DIR_FLAGS)
        levels = [_Pair(_ident(sfd), _ident(dfd), os.fstat(sfd))]
        while True:
            level = levels[-1]
            if not level.listed:
                level.listed = True
                level.pending = _copy_listing(sfd, dfd, ignore)
            if level.pending:
                name = level.pending.pop()
                child = _open_source_dir(name, sfd)
                if child is None:
                    continue
                dchild = os.open(name, _DIR_FLAGS, dir_fd=dfd)
                os.close(sfd)
                sfd = child
                os.close(dfd)
                dfd = dchild
                levels.append(_Pair(_ident(sfd), _ident(dfd), os.fstat(sfd)))
                continue
            _finish_dir(dfd, level.st)
            if len(levels) == 1:
                return
            levels.pop()
            sfd, dfd = _both_up(sfd, dfd, levels[-1])
    finally:
        for fd in (sfd, dfd):
            if fd >= 0:
                os.close(fd)


def _both_up(sfd: int, dfd: int, above: _Pair) -> tuple[int, int]:
    """Both sides one folder up (each checked to be the folder we came down from); the
    folders left are closed. On an error both stay open (the caller closes them)."""
    sup = _up(sfd, above.src)
    try:
        dup = _up(dfd, above.dest)
    except BaseException:
        os.close(sup)
        raise
    os.close(sfd)
    os.close(dfd)
    return sup, dup


def _copy_listing(sfd: int, dfd: int, ignore: Callable[[str], bool] | None) -> list[str]:
    """The entries of folder `sfd` copied into `dfd`, folders made empty; their names (to
    enter next), in reverse name order so that they are popped in name order."""
    folders: list[str] = []
    for name, st in sorted(_listing(sfd), key=lambda e: e[0]):
        if st is None or (ignore is not None and ignore(name)):
            continue  # gone meanwhile, or not wanted
        if stat.S_ISDIR(st.st_mode):
            os.mkdir(name, 0o700, dir_fd=dfd)
            folders.append(name)
        elif stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(name, dir_fd=sfd), name, dir_fd=dfd)
            os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=dfd,
                     follow_symlinks=False)
        elif stat.S_ISREG(st.st_mode):
            _copy_file(name, sfd, dfd)
    folders.reverse()
    return folders


def _open_source_dir(name: str, sfd: int) -> int | None:
    """Sub-folder `name` of `sfd`, or None when it went or became something else meanwhile
    (its copy then stays empty)."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=sfd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:  # replaced by a link meanwhile
            return None
        raise


def _copy_file(name: str, sfd: int, dfd: int) -> None:
    """Regular file `name` of `sfd` into `dfd`: its bytes up to its size when opened, its
    mode bits and times. Opened without following a link or waiting (a FIFO swapped in
    meanwhile is left out, not read)."""
    try:
        src = os.open(name, _FILE_FLAGS, dir_fd=sfd)
    except FileNotFoundError:
        return
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO):  # a link or a socket now
            return
        raise
    try:
        st = os.fstat(src)
        if not stat.S_ISREG(st.st_mode):
            return
        out = os.open(name, _NEW_FILE, 0o600, dir_fd=dfd)
        try:
            _copy_bytes(src, out, st.st_size)
            os.fchmod(out, stat.S_IMODE(st.st_mode))
            os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(out)
    finally:
        os.close(src)


def _copy_bytes(src: int, out: int, size: int) -> None:
    """`size` bytes of `src` (fewer when it shrank) into `out`: in the kernel where it can."""
    left = size
    kernel = hasattr(os, "copy_file_range")
    while left > 0:
        want = min(left, _CHUNK * 8)
        if kernel:
            try:
                n = os.copy_file_range(src, out, want)
            except OSError:  # not between these file systems: plain reads from here on
                kernel = False
                continue
        else:
            data = os.read(src, min(want, _CHUNK))
            n = len(data)
            view = memoryview(data)
            while view:
                view = view[os.write(out, view):]
        if n == 0:
            return
        left -= n


def _finish_dir(dfd: int, st: os.stat_result) -> None:
    """A copied folder gets its source's mode bits and times once its content is in (a
    read-only folder could not have been filled, and filling it changed its times)."""
    os.fchmod(dfd, stat.S_IMODE(st.st_mode))
    os.utime(dfd, ns=(st.st_atime_ns, st.st_mtime_ns))


__all__ = ["copy_tree"]
