"""A local folder that behaves like an S3 prefix (a `file://` mirror) as a Store.

The same keys, the same listing order, whole-object atomic writes, sha256 kept as metadata
and conditional writes (If-Match / If-None-Match) for the index manifest.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from nightly.config.retry import Backoffs
from nightly.errors import PublishError
from nightly.jsonvalues import json_object
from nightly.stores.base import ObjectInfo, PreconditionFailed, Store, check_key
from nightly.stores.nofollow import Tree, read_fd, write_all

T = TypeVar("T")

_RESERVED = ".nightly-store"  # metadata, locks and temporary files; never listed
_TMP = (_RESERVED, "tmp")
_LOCKS = (_RESERVED, "locks")
_META_MAX = 64 * 1024  # an object's metadata is a few hundred bytes
STALE_TMP_S = 6 * 3600  # a temporary file untouched this long belongs to a writer that died


class FileStore(Store):
    """A folder that behaves like an S3 prefix.

    Object `k` is the file `root/k`; its metadata (sha256, ETag, and a stamp of the file it
    describes) lives in `root/.nightly-store/meta/k.json`. Writers replace files with
    os.replace from a temporary file in the same file system, and take a per-key flock so
    that conditional writes are compare-and-swap and data and metadata change together.

    Other hosts may write the folder (the cluster's staging store), so nothing below the root
    is reached through a symlink (nightly.stores.nofollow): a symlink, FIFO or device
    where an object or folder should be is refused with UnsafeEntry ("symlink in <label>"),
    and reads can be capped (`max_bytes`: ObjectTooLarge past it).
    """

    def __init__(self, root: Path, label: str = "", *, backoffs: Backoffs | None = None) -> None:
        super().__init__(backoffs)
        self.root = root
        self.tree = Tree(root, label or f"the folder store {root.as_uri()}")
        self._swept = False

    @property
    def label(self) -> str:
        return self.tree.label

    @label.setter
    def label(self, value: str) -> None:
        self.tree.label = value

    @property
    def url(self) -> str:
        return self.root.as_uri()

    def _path(self, key: str) -> Path:
        check_key(key)
        if key.split("/", 1)[0] == _RESERVED:
            raise PublishError(f"invalid object key {key!r} (reserved)")
        return self.root / key

    @staticmethod
    def _meta_key(key: str) -> str:
        return f"{_RESERVED}/meta/{key}.json"

    def _new_tmp(self) -> tuple[int, str]:
        """A new temporary file in root/.nightly-store/tmp: (descriptor, name)."""
        if not self._swept:
            # What a writer killed mid-copy left (up to a whole package): once per store
            # object, remove temporary files no live writer can still be using.
            self._swept = True
            cutoff = time.time() - STALE_TMP_S
            with contextlib.suppress(OSError), self.tree.folder(_TMP, create=True) as d, \
                    os.scandir(d) as entries:
                for e in entries:
                    with contextlib.suppress(OSError):
                        if e.stat(follow_symlinks=False).st_mtime < cutoff:
                            os.unlink(e.name, dir_fd=d)
        return self.tree.create_temp(_TMP)

    def _discard_tmp(self, name: str) -> None:
        with contextlib.suppress(OSError):
            self.tree.unlink(f"{_RESERVED}/tmp/{name}")

    def _lock(self, key: str, exclusive: bool) -> _FileLock:
        # 256 striped lock files: bounded, and unrelated keys rarely wait for each other.
        stripe = hashlib.sha1(key.encode()).hexdigest()[:2]
        return _FileLock(self.tree, f"{stripe}.lock", exclusive)

    @staticmethod
    def _stamp(st: os.stat_result) -> list[int]:
        return [st.st_ino, st.st_size, st.st_mtime_ns]

    def _read_meta(self, key: str, st: os.stat_result) -> dict[str, Any]:
        try:
            meta = json_object(self.tree.read(self._meta_key(key), _META_MAX)) or {}
        except (OSError, PublishError):
            return {}
        # A crash between the data and the metadata rename leaves stale metadata: ignore it.
        return meta if meta.get("stamp") == self._stamp(st) else {}

    def _install(self, key: str, tmp: str, meta: dict[str, Any]) -> str:
        """Move a finished temporary file into place with its metadata; caller holds the lock."""
        self._path(key)
        meta["stamp"] = self._stamp(self.tree.rename_in(_TMP, tmp, key))
        fd, mtmp = self._new_tmp()
        with os.fdopen(fd, "w") as f:
            json.dump(meta, f)
        self.tree.rename_in(_TMP, mtmp, self._meta_key(key))
        return str(meta["etag"])

    def _io(self, action: str, key: str, fn: Callable[[], T]) -> T:
        self._count(action)
        try:
            return fn()
        except PublishError:
            raise
        except OSError as exc:
            raise PublishError(f"{action} {self.url}/{key} failed: {exc}") from None

    def _write_tmp(self, fill: Callable[[int], object]) -> str:
        """A temporary file filled by `fill(fd)`; its name (removed again if `fill` fails)."""
        fd, tmp = self._new_tmp()
        try:
            fill(fd)
        except BaseException:
            os.close(fd)
            self._discard_tmp(tmp)
            raise
        os.close(fd)
        return tmp

    def put(self, key: str, local_path: Path, sha256: str) -> None:
        self._path(key)

        def fill(fd: int) -> None:
            # The sha256 recorded is that of the bytes the store now holds (hashed as they
            # are written), never only the caller's word: other bytes are not stored.
            h = hashlib.sha256()
            with open(local_path, "rb") as src:  # the caller's own file
                while chunk := src.read(1 << 20):
                    h.update(chunk)
                    write_all(fd, chunk)
            got = h.hexdigest()
            if got != sha256:
                raise PublishError(f"upload {self.url}/{key}: the bytes copied hash to sha256 "
                                   f"{got[:16]}..., not {sha256[:16]}... (the file changed?)")

        def run() -> None:
            tmp = self._write_tmp(fill)
            try:
                with self._lock(key, True):
                    self._install(key, tmp, {"sha256": sha256, "etag": f'"{sha256}"'})
            finally:
                self._discard_tmp(tmp)

        self._io("upload", key, run)

    def head(self, key: str) -> ObjectInfo | None:
        self._path(key)

        def run() -> ObjectInfo | None:
            with self._lock(key, False):
                st = self.tree.lstat(key)
                if st is None or not stat.S_ISREG(st.st_mode):
                    return None
                meta = self._read_meta(key, st)
            return ObjectInfo(key, st.st_size, meta.get("sha256"), meta.get("etag"), _mtime(st))

        return self._io("head", key, run)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        self._count("list")
        # Walk only the directory the prefix points into, then filter by string prefix
        # exactly like S3 does (a prefix need not end at a '/').
        parts = prefix.rpartition("/")[0].split("/") if "/" in prefix else []
        found = [(k, st) for k, st in self.tree.walk(parts, skip_top=_RESERVED)
                 if k.startswith(prefix)]
        found.sort(key=lambda kv: kv[0].encode())  # S3 lists in UTF-8 byte order
        for key, st in found:
            yield ObjectInfo(key, st.st_size, None, None, _mtime(st))

    def get(self, key: str, local_path: Path, *, max_bytes: int | None = None) -> None:
        self._path(key)

        def run() -> None:
            local_path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".download-", dir=local_path.parent)
            try:
                try:
                    self.tree.copy_to(key, fd, max_bytes)
                finally:
                    os.close(fd)
                os.replace(tmp, local_path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)

        self._io("download", key, run)

    def read_range(self, key: str, start: int, length: int) -> bytes:
        self._path(key)

        def run() -> bytes:
            with self.tree.open(key) as (fd, _):
                return os.pread(fd, max(length, 0), start)

        return self._io("get", key, run)

    def read_prefix(self, key: str, length: int) -> tuple[bytes, int] | None:
        self._path(key)

        def run() -> tuple[bytes, int] | None:
            try:
                with self.tree.open(key) as (fd, st):
                    return read_fd(fd, length), st.st_size
            except FileNotFoundError:
                return None

        return self._io("get", key, run)

    def get_bytes(self, key: str, *, max_bytes: int | None = None) -> tuple[bytes, str] | None:
        self._path(key)

        def run() -> tuple[bytes, str] | None:
            try:
                data = self.tree.read(key, max_bytes)
            except FileNotFoundError:
                return None
            return data, f'"{hashlib.sha256(data).hexdigest()}"'

        return self._io("get", key, run)

    def _current_etag(self, key: str) -> str | None:
        h = hashlib.sha256()
        try:
            with self.tree.open(key) as (fd, _):
                while buf := os.read(fd, 1 << 20):
                    h.update(buf)
        except FileNotFoundError:
            return None
        return f'"{h.hexdigest()}"'

    def put_bytes(
        self,
        key: str,
        data: bytes,
        content_type: str,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
        cache_control: str | None = None,
    ) -> str:
        self._path(key)
        sha = hashlib.sha256(data).hexdigest()

        def run() -> str:
            tmp = self._write_tmp(lambda fd: write_all(fd, data))
            try:
                with self._lock(key, True):
                    # The ETag is the content hash, computed from the bytes on disk, so a
                    # compare-and-swap cannot be fooled by a recycled inode or a coarse mtime.
                    current = self._current_etag(key)
                    if if_match is not None and current != if_match:
                        raise PreconditionFailed(f"{self.url}/{key} changed meanwhile")
                    if if_none_match and current is not None:
                        raise PreconditionFailed(f"{self.url}/{key} exists already")
                    meta = {"sha256": sha, "etag": f'"{sha}"', "content_type": content_type}
                    return self._install(key, tmp, meta)
            finally:
                self._discard_tmp(tmp)

        return self._io("write", key, run)

    def copy(self, src_key: str, dst_key: str) -> None:
        self._path(src_key)
        self._path(dst_key)

        def run() -> None:
            with self._lock(src_key, False):
                st = self.tree.lstat(src_key)
                if st is None:
                    raise FileNotFoundError(errno.ENOENT, "no such object", src_key)
                meta = self._read_meta(src_key, st)
                tmp = self._write_tmp(lambda fd: self.tree.copy_to(src_key, fd))
            try:
                meta.pop("stamp", None)
                if "etag" not in meta:
                    with self.tree.open(f"{_RESERVED}/tmp/{tmp}") as (fd, _):
                        meta["etag"] = f'"{_sha256_fd(fd)}"'
                with self._lock(dst_key, True):
                    self._install(dst_key, tmp, meta)
            finally:
                self._discard_tmp(tmp)

        self._io("copy", src_key, run)

    def delete(self, key: str) -> None:
        self._path(key)

        def run() -> None:
            with self._lock(key, True):
                for k in (key, self._meta_key(key)):
                    self.tree.unlink(k)

        self._io("delete", key, run)


def _sha256_fd(fd: int) -> str:
    h = hashlib.sha256()
    while buf := os.read(fd, 1 << 20):
        h.update(buf)
    return h.hexdigest()


def _mtime(st: os.stat_result) -> datetime:
    return datetime.fromtimestamp(st.st_mtime, tz=timezone.utc)


class _FileLock:
    def __init__(self, tree: Tree, name: str, exclusive: bool) -> None:
        self.tree, self.name, self.exclusive = tree, name, exclusive
        self._fd = -1

    def __enter__(self) -> _FileLock:
        import fcntl

        with self.tree.folder(_LOCKS, create=True) as d:
            self._fd = os.open(self.name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                               0o644, dir_fd=d)
        fcntl.flock(self._fd, fcntl.LOCK_EX if self.exclusive else fcntl.LOCK_SH)
        return self

    def __exit__(self, *_: object) -> None:
        os.close(self._fd)  # closing releases the flock
