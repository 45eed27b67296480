"""Files under a folder store's root, reached without ever following a symlink below it.

A folder store can be written by other hosts (the cluster's staging folder is shared by every
build host), so what is in it is not trusted: a file replaced by a symlink to the
orchestrator's TLS key, a day folder replaced by a symlink to somewhere else, a FIFO or a
device where a package should be. Every path below the root is therefore resolved one
component at a time, each opened with O_NOFOLLOW relative to its parent's descriptor
(openat): no symlink is followed, whether it was there before or swapped in between a check
and a use, and nothing outside the root can be reached, read, written or deleted. Only
regular files are read (checked with lstat before the open, so a FIFO or a device is never
opened, and with fstat after it); folders are walked and deleted the same way.

The root itself is the configuration's (it may be a symlink the admin made) and is followed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from nightly.errors import ObjectTooLarge, UnsafeEntry
from nightly.files import confined, walk_tree

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: were a FIFO swapped in after the lstat, opening it must not wait for a writer.
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 20


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


class Tree:
    """The files under `root`, opened relative to descriptors, never through a symlink.

    `label` names the store in errors ("staging", "the folder store file:///..."): a symlink
    found below the root is reported as "symlink in <label>: ...".
    """

    def __init__(self, root: Path, label: str) -> None:
        self.root, self.label = root, label

    # ------------------------------------------------------------------ errors

    def unsafe(self, rel: str, mode: int) -> UnsafeEntry:
        where = f"{self.root}/{rel}"
        if stat.S_ISLNK(mode):
            return UnsafeEntry(
                f"symlink in {self.label}: {where} is a symbolic link; nightly never follows "
                f"one below {self.root} (a host that can write there made it: remove it, and "
                "find out who did)")
        return UnsafeEntry(
            f"not a regular file in {self.label}: {where} is {_kind(mode)}; nightly reads only "
            "regular files there (a host that can write there made it: remove it)")

    def _refuse(self, dir_fd: int, name: str, rel: str, exc: OSError) -> None:
        """After an open refused with ELOOP/ENOTDIR/...: say why if it is a symlink or an
        odd file, else let the OSError through."""
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            raise exc from None
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise self.unsafe(rel, st.st_mode) from None
        raise exc

    # ------------------------------------------------------------------ folders

    def _open_root(self, create: bool) -> int:
        try:
            return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            if not create:
                raise
        self.root.mkdir(parents=True, exist_ok=True)
        return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    @contextlib.contextmanager
    def folder(self, parts: Sequence[str], *, create: bool = False) -> Iterator[int]:
        """A descriptor of root/parts[0]/parts[1]/..., each opened with O_NOFOLLOW below its
        parent (made when `create`). FileNotFoundError when one is missing."""
        fd = self._open_root(create)
        try:
            for i, part in enumerate(parts):
                if "/" in part or confined(part) is None:
                    raise UnsafeEntry(f"invalid path {'/'.join(parts)!r} in {self.label}")
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                try:
                    nfd = os.open(part, _DIR, dir_fd=fd)
                except OSError as e:
                    if e.errno == errno.ENOENT:
                        raise
                    self._refuse(fd, part, "/".join(parts[: i + 1]), e)
                    raise
                os.close(fd)
                fd = nfd
            yield fd
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ files

    def lstat(self, key: str) -> os.stat_result | None:
        """The object's own stat (a symlink's, not its target's); None when missing.
        UnsafeEntry for anything but a regular file or a folder."""
        *dirs, name = key.split("/")
        try:
            with self.folder(dirs) as dfd:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            raise self.unsafe(key, st.st_mode)
        return st

    @contextlib.contextmanager
    def open(self, key: str) -> Iterator[tuple[int, os.stat_result]]:
        """(descriptor, fstat) of a regular file, opened read-only without following a
        symlink. FileNotFoundError when missing; UnsafeEntry for anything else."""
        *dirs, name = key.split("/")
        with self.folder(dirs) as dfd:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):  # never open a FIFO or a device: it may block
                raise self.unsafe(key, st.st_mode)
            try:
                fd = os.open(name, _FILE, dir_fd=dfd)
            except OSError as e:
                if e.errno == errno.ENOENT:
                    raise
                self._refuse(dfd, name, key, e)
                raise
        try:
            got = os.fstat(fd)
            # Another file than the one checked (a writer's atomic replace in between) is fine
            # if it too is a regular file: it was opened below the same folder, O_NOFOLLOW.
            if not stat.S_ISREG(got.st_mode):
                raise self.unsafe(key, got.st_mode)
            yield fd, got
        finally:
            os.close(fd)

    def too_large(self, key: str, size: int, limit: int) -> ObjectTooLarge:
        return ObjectTooLarge(
            f"{self.label} {self.root}/{key} holds {size} bytes or more, more than the {limit} "
            "expected: not read", size=size)

    def read(self, key: str, limit: int | None = None) -> bytes:
        """A regular file's bytes; ObjectTooLarge past `limit` (checked before reading, and
        again while reading: the file may grow)."""
        with self.open(key) as (fd, st):
            if limit is not None and st.st_size > limit:
                raise self.too_large(key, st.st_size, limit)
            data = read_fd(fd, (st.st_size if limit is None else limit) + 1, until_eof=limit is None)
        if limit is not None and len(data) > limit:
            raise self.too_large(key, len(data), limit)
        return data

    def copy_to(self, key: str, dest_fd: int, limit: int | None = None) -> int:
        """Copy a regular file into `dest_fd`; at most `limit` bytes (ObjectTooLarge)."""
        with self.open(key) as (fd, st):
            if limit is not None and st.st_size > limit:
                raise self.too_large(key, st.st_size, limit)
            return copy_fd(fd, dest_fd, limit, lambda n: self.too_large(key, n, limit or 0))

    # ------------------------------------------------------------------ writing

    def create_temp(self, parts: Sequence[str]) -> tuple[int, str]:
        """(descriptor, name) of a new empty file in root/parts (made if missing)."""
        with self.folder(parts, create=True) as dfd:
            name = f"tmp-{secrets.token_hex(8)}"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(name, flags, 0o644, dir_fd=dfd)
            os.fchmod(fd, 0o644)  # whatever the umask: a mirror or a channel is served to others
            return fd, name

    def rename_in(self, src_parts: Sequence[str], src: str, key: str) -> os.stat_result:
        """Move root/src_parts/src to `key` (folders made as needed); the new file's stat."""
        *dirs, name = key.split("/")
        with self.folder(src_parts) as sfd, self.folder(dirs, create=True) as dfd:
            os.replace(src, name, src_dir_fd=sfd, dst_dir_fd=dfd)
            return os.stat(name, dir_fd=dfd, follow_symlinks=False)

    def unlink(self, key: str) -> None:
        """Remove a file (a symlink itself, never its target); missing is fine. A symlinked
        folder on the way is refused (UnsafeEntry): nothing outside the root is touched."""
        *dirs, name = key.split("/")
        try:
            with self.folder(dirs) as dfd:
                os.unlink(name, dir_fd=dfd)
        except FileNotFoundError:
            pass

    # ------------------------------------------------------------------ walking

    def walk(self, parts: Sequence[str], skip_top: str = "") -> Iterator[tuple[str, os.stat_result]]:
        """(key, lstat) of every entry below root/parts but folders, which are descended
        into, opened with O_NOFOLLOW: a symlink (to a file or a folder), a FIFO or a device
        is listed as itself, never followed, so that reading it fails and deleting it
        removes it alone. A symlink among `parts` raises UnsafeEntry. `skip_top`: a name not
        to descend into at the root (the store's own metadata). Any depth, one folder open
        at a time (nightly.files.walk_tree): another host may have written the tree."""
        skip = skip_top if not parts else ""
        try:
            with self.folder(parts) as fd:
                base = "".join(f"{p}/" for p in parts)
                for e in walk_tree(fd, skip=(lambda rel: rel == skip) if skip else None):
                    if not e.is_dir and not (skip and e.rel == skip):
                        yield base + e.rel, e.st
        except (FileNotFoundError, NotADirectoryError):
            return


def copy_fd(src: int, dest: int, limit: int | None,
             too_large: Callable[[int], ObjectTooLarge]) -> int:
    """Copy `src` to `dest` (in the kernel where it can: copy_file_range), never more than
    `limit` bytes plus one (ObjectTooLarge then): the file may grow while it is copied."""
    done, kernel = 0, hasattr(os, "copy_file_range")
    while True:
        want = _CHUNK * 8 if limit is None else min(_CHUNK * 8, limit + 1 - done)
        if want <= 0:
            raise too_large(done)
        n = 0
        if kernel:
            try:
                n = os.copy_file_range(src, dest, want)
            except OSError:  # not on this file system (or kernel): copy through user space
                kernel = False
        if not kernel:
            buf = os.read(src, min(want, _CHUNK))
            write_all(dest, buf)
            n = len(buf)
        if n == 0:
            return done
        done += n
        if limit is not None and done > limit:
            raise too_large(done)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_fd(fd: int, limit: int, *, until_eof: bool = False) -> bytes:
    """Up to `limit` bytes from `fd` (to its end when `until_eof`)."""
    parts, got = [], 0
    while until_eof or got < limit:
        buf = os.read(fd, _CHUNK if until_eof else min(_CHUNK, limit - got))
        if not buf:
            break
        parts.append(buf)
        got += len(buf)
    return b"".join(parts)


__all__ = ["Tree", "copy_fd", "read_fd", "write_all"]
