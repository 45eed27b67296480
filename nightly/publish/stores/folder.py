"""A local folder that behaves like an S3 prefix (a `file://` mirror) as a Store.

The same keys, the same listing order, whole-object atomic writes, sha256 kept as metadata
and conditional writes (If-Match / If-None-Match) for the index manifest.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from nightly.errors import PublishError
from nightly.publish.stores.base import ObjectInfo, PreconditionFailed, Store, check_key, file_sha256

T = TypeVar("T")

_RESERVED = ".nightly-store"  # metadata, locks and temporary files; never listed
STALE_TMP_S = 6 * 3600  # a temporary file untouched this long belongs to a writer that died


class FileStore(Store):
    """A folder that behaves like an S3 prefix.

    Object `k` is the file `root/k`; its metadata (sha256, ETag, and a stamp of the file it
    describes) lives in `root/.nightly-store/meta/k.json`. Writers replace files with
    os.replace from a temporary file in the same file system, and take a per-key flock so
    that conditional writes are compare-and-swap and data and metadata change together.
    """

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root
        self._swept = False

    @property
    def url(self) -> str:
        return self.root.as_uri()

    def _path(self, key: str) -> Path:
        check_key(key)
        if key.split("/", 1)[0] == _RESERVED:
            raise PublishError(f"invalid object key {key!r} (reserved)")
        return self.root / key

    def _meta_path(self, key: str) -> Path:
        return self.root / _RESERVED / "meta" / f"{key}.json"

    def _tmp(self) -> Path:
        d = self.root / _RESERVED / "tmp"
        d.mkdir(parents=True, exist_ok=True)
        if not self._swept:
            # What a writer killed mid-copy left (up to a whole package): once per store
            # object, remove temporary files no live writer can still be using.
            self._swept = True
            cutoff = time.time() - STALE_TMP_S
            with os.scandir(d) as entries:
                for e in entries:
                    with contextlib.suppress(OSError):
                        stale = e.stat(follow_symlinks=False).st_mtime < cutoff
                        if stale and e.is_file(follow_symlinks=False):
                            os.unlink(e.path)
        return d

    def _lock(self, key: str, exclusive: bool) -> _FileLock:
        # 256 striped lock files: bounded, and unrelated keys rarely wait for each other.
        stripe = hashlib.sha1(key.encode()).hexdigest()[:2]
        d = self.root / _RESERVED / "locks"
        d.mkdir(parents=True, exist_ok=True)
        return _FileLock(d / f"{stripe}.lock", exclusive)

    @staticmethod
    def _stamp(st: os.stat_result) -> list[int]:
        return [st.st_ino, st.st_size, st.st_mtime_ns]

    def _read_meta(self, key: str, st: os.stat_result) -> dict[str, Any]:
        try:
            meta: dict[str, Any] = json.loads(self._meta_path(key).read_bytes())
        except (OSError, ValueError):
            return {}
        # A crash between the data and the metadata rename leaves stale metadata: ignore it.
        return meta if meta.get("stamp") == self._stamp(st) else {}

    def _install(self, key: str, tmp: Path, meta: dict[str, Any]) -> str:
        """Move a finished temporary file into place with its metadata; caller holds the lock."""
        dest = self._path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; a mirror or a channel is served to others
        os.replace(tmp, dest)
        meta["stamp"] = self._stamp(dest.stat())
        meta_path = self._meta_path(key)
        meta_path.parent.mkdir(parents=True, exist_ok=True)
        fd, mtmp = tempfile.mkstemp(dir=self._tmp())
        with os.fdopen(fd, "w") as f:
            json.dump(meta, f)
        os.replace(mtmp, meta_path)
        return str(meta["etag"])

    def _io(self, action: str, key: str, fn: Callable[[], T]) -> T:
        self._count(action)
        try:
            return fn()
        except PublishError:
            raise
        except OSError as exc:
            raise PublishError(f"{action} {self.url}/{key} failed: {exc}") from None

    def put(self, key: str, local_path: Path, sha256: str) -> None:
        def run() -> None:
            fd, tmp = tempfile.mkstemp(dir=self._tmp())
            os.close(fd)
            try:
                shutil.copyfile(local_path, tmp)
                with self._lock(key, True):
                    self._install(key, Path(tmp), {"sha256": sha256, "etag": f'"{sha256}"'})
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)

        self._io("upload", key, run)

    def head(self, key: str) -> ObjectInfo | None:
        path = self._path(key)

        def run() -> ObjectInfo | None:
            with self._lock(key, False):
                try:
                    st = path.stat()
                except FileNotFoundError:
                    return None
                if not path.is_file():
                    return None
                meta = self._read_meta(key, st)
            return ObjectInfo(key, st.st_size, meta.get("sha256"), meta.get("etag"), _mtime(st))

        return self._io("head", key, run)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        self._count("list")
        # Walk only the directory the prefix points into, then filter by string prefix
        # exactly like S3 does (a prefix need not end at a '/').
        base = self.root / prefix.rpartition("/")[0] if "/" in prefix else self.root
        found: list[tuple[str, os.stat_result]] = []
        for dirpath, dirnames, filenames in os.walk(base):
            rel_dir = os.path.relpath(dirpath, self.root).replace(os.sep, "/")
            rel_dir = "" if rel_dir == "." else rel_dir + "/"
            if rel_dir == "":
                dirnames[:] = [d for d in dirnames if d != _RESERVED]
            for name in filenames:
                key = rel_dir + name
                if key.startswith(prefix) and not key.startswith(_RESERVED + "/"):
                    try:
                        found.append((key, os.stat(os.path.join(dirpath, name))))
                    except FileNotFoundError:
                        continue  # deleted while we walked
        found.sort(key=lambda kv: kv[0].encode())  # S3 lists in UTF-8 byte order
        for key, st in found:
            yield ObjectInfo(key, st.st_size, None, None, _mtime(st))

    def list_level(self, prefix: str) -> tuple[builtins.list[ObjectInfo], builtins.list[str]]:
        if not prefix.endswith("/"):
            return super().list_level(prefix)
        self._count("list")
        base = self.root / prefix
        objects: builtins.list[ObjectInfo] = []
        subs: builtins.list[str] = []
        try:
            entries = builtins.list(os.scandir(base))
        except (FileNotFoundError, NotADirectoryError):
            return [], []
        for e in entries:
            try:  # as `list` (os.walk) sees them
                if e.is_dir():
                    subs.append(f"{prefix}{e.name}/")
                else:
                    st = os.stat(e.path)
                    objects.append(ObjectInfo(prefix + e.name, st.st_size, None, None, _mtime(st)))
            except FileNotFoundError:
                continue  # deleted while we looked
        objects.sort(key=lambda o: o.key.encode())
        return objects, sorted(subs)

    def get(self, key: str, local_path: Path) -> None:
        src = self._path(key)

        def run() -> None:
            local_path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".download-", dir=local_path.parent)
            os.close(fd)
            try:
                shutil.copyfile(src, tmp)
                os.replace(tmp, local_path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)

        self._io("download", key, run)

    def read_range(self, key: str, start: int, length: int) -> bytes:
        path = self._path(key)

        def run() -> bytes:
            with open(path, "rb") as f:
                f.seek(start)
                return f.read(length)

        return self._io("get", key, run)

    def get_bytes(self, key: str) -> tuple[bytes, str] | None:
        path = self._path(key)

        def run() -> tuple[bytes, str] | None:
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                return None
            return data, f'"{hashlib.sha256(data).hexdigest()}"'

        return self._io("get", key, run)

    def put_bytes(
        self,
        key: str,
        data: bytes,
        content_type: str,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
    ) -> str:
        path = self._path(key)
        sha = hashlib.sha256(data).hexdigest()

        def run() -> str:
            fd, tmp = tempfile.mkstemp(dir=self._tmp())
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                with self._lock(key, True):
                    # The ETag is the content hash, computed from the bytes on disk, so a
                    # compare-and-swap cannot be fooled by a recycled inode or a coarse mtime.
                    try:
                        current: str | None = f'"{file_sha256(path)}"'
                    except FileNotFoundError:
                        current = None
                    if if_match is not None and current != if_match:
                        raise PreconditionFailed(f"{self.url}/{key} changed meanwhile")
                    if if_none_match and current is not None:
                        raise PreconditionFailed(f"{self.url}/{key} exists already")
                    meta = {"sha256": sha, "etag": f'"{sha}"', "content_type": content_type}
                    return self._install(key, Path(tmp), meta)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)

        return self._io("write", key, run)

    def copy(self, src_key: str, dst_key: str) -> None:
        src = self._path(src_key)

        def run() -> None:
            with self._lock(src_key, False):
                st = src.stat()
                meta = self._read_meta(src_key, st)
                fd, tmp = tempfile.mkstemp(dir=self._tmp())
                os.close(fd)
                shutil.copyfile(src, tmp)
            try:
                meta.pop("stamp", None)
                meta.setdefault("etag", f'"{file_sha256(Path(tmp))}"')
                with self._lock(dst_key, True):
                    self._install(dst_key, Path(tmp), meta)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)

        self._io("copy", src_key, run)

    def delete(self, key: str) -> None:
        path = self._path(key)

        def run() -> None:
            with self._lock(key, True):
                for p in (path, self._meta_path(key)):
                    with contextlib.suppress(FileNotFoundError):
                        p.unlink()

        self._io("delete", key, run)


def _mtime(st: os.stat_result) -> datetime:
    return datetime.fromtimestamp(st.st_mtime, tz=timezone.utc)


class _FileLock:
    def __init__(self, path: Path, exclusive: bool) -> None:
        self.path, self.exclusive = path, exclusive
        self._fd = -1

    def __enter__(self) -> _FileLock:
        import fcntl

        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX if self.exclusive else fcntl.LOCK_SH)
        return self

    def __exit__(self, *_: object) -> None:
        os.close(self._fd)  # closing releases the flock
