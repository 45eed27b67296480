"""Where published files go: one small interface over an S3 bucket and a local mirror folder.

Keys are relative to the destination (`s3://bucket/prefix` or `file:///abs/path`) and follow
the DESIGN publishing layout (see `remote_folder`). A `file://` mirror behaves like S3: the
same keys, the same listing order, whole-object atomic writes, sha256 kept as metadata and
conditional writes (If-Match / If-None-Match) for the index manifest. Everything that can
fail remotely raises PublishError with a message that never contains credentials.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import mimetypes
import os
import random
import re
import shutil
import tempfile
import threading
import time
import urllib.parse
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from nightly.errors import ConfigError, PublishError, did_you_mean

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CopySourceTypeDef

T = TypeVar("T")

SHA256_RE = re.compile(r"[0-9a-f]{64}")
_CUDA_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def remote_folder(kind: str, channel: str, cuda: str) -> str:
    """The folder (key prefix, no trailing slash) of DESIGN's layout for one kind/channel/cuda.

    nightly -> `whl/nightly/cu126`, test -> `whl/test/cu126`, release -> `whl/cu126`.
    """
    kinds, channels = ("whl", "libtorch"), ("nightly", "test", "release")
    if kind not in kinds:
        raise ConfigError(f"unknown package kind {kind!r}", hint=did_you_mean(kind, kinds))
    if channel not in channels:
        raise ConfigError(f"unknown channel {channel!r}", hint=did_you_mean(channel, channels))
    if not _CUDA_RE.fullmatch(cuda):
        raise ConfigError(f"invalid cuda tag {cuda!r}")
    return f"{kind}/{cuda}" if channel == "release" else f"{kind}/{channel}/{cuda}"


@dataclass(frozen=True)
class ObjectInfo:
    key: str  # relative to the store's root/prefix
    size: int
    sha256: str | None = None  # lowercase hex, when known (metadata or native checksum)
    etag: str | None = None
    last_modified: datetime | None = None


class ObjectNotFound(PublishError):
    """The object does not exist."""


class PreconditionFailed(PublishError):
    """A conditional write lost: the object changed since it was read. Re-read and retry."""


def check_key(key: str) -> str:
    """Reject keys that would mean different things on S3 and on a file system."""
    parts = key.split("/")
    if not key or any(p in ("", ".", "..") for p in parts) or any(ord(c) < 32 or c == "\\" for c in key):
        raise PublishError(f"invalid object key {key!r}")
    return key


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# user:password@ in URLs, and the signature parts of presigned URLs.
_SECRET_IN_URL = re.compile(r"(?i)(//)[^/@\s]+@|((?:X-Amz-)?(?:Signature|Credential|Security-Token)=)[^&\s]+")


class Store(ABC):
    """Object storage with S3 semantics.

    `requests` counts the requests made, `requests_by_op` by operation (on S3 every HTTP
    request, retries and multipart parts included), for benchmarks and the run summary.
    """

    def __init__(self) -> None:
        self.requests = 0
        self.requests_by_op: Counter[str] = Counter()
        self._count_lock = threading.Lock()

    def _count(self, op: str) -> None:
        with self._count_lock:
            self.requests += 1
            self.requests_by_op[op] += 1

    @property
    @abstractmethod
    def url(self) -> str:
        """The destination URL, safe to print."""

    @abstractmethod
    def put(self, key: str, local_path: Path, sha256: str) -> None:
        """Upload a file; `sha256` (hex) goes into the object metadata."""

    @abstractmethod
    def head(self, key: str) -> ObjectInfo | None:
        """Size and sha256 of one object, or None when it does not exist."""

    @abstractmethod
    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object whose key starts with `prefix`, in key order (sha256 not filled in)."""

    @abstractmethod
    def get(self, key: str, local_path: Path) -> None:
        """Download one object to a file (atomically)."""

    @abstractmethod
    def get_bytes(self, key: str) -> tuple[bytes, str] | None:
        """A small object's content and ETag, or None when it does not exist."""

    @abstractmethod
    def put_bytes(
        self,
        key: str,
        data: bytes,
        content_type: str,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
    ) -> str:
        """Write a small object whole and atomically; returns its new ETag.

        `if_match=etag` writes only if the object still has that ETag, `if_none_match=True`
        only if it does not exist; otherwise PreconditionFailed.
        """

    @abstractmethod
    def copy(self, src_key: str, dst_key: str) -> None:
        """Copy an object with its metadata (server-side on S3)."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Delete an object; deleting a missing object is not an error (as on S3)."""

    def ensure(self, key: str, local_path: Path, sha256: str) -> bool:
        """Upload unless the object already exists with this sha256. True if it uploaded."""
        info = self.head(key)
        if info is not None and info.sha256 == sha256:
            return False
        self.put(key, local_path, sha256)
        return True


def open_store(
    url: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    profile: str | None = None,
    acl: str | None = None,
    **tuning: Any,
) -> Store:
    """A Store for `s3://bucket[/prefix]` or `file:///absolute/path`."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.username is not None or parsed.password is not None:
        # Never echo the URL: it carries a secret.
        raise ConfigError("credentials in a destination URL are not allowed; use a profile")
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ConfigError(f"no bucket in destination {url!r}")
        return S3Store(
            parsed.netloc,
            parsed.path.strip("/"),
            endpoint_url=endpoint_url,
            region=region,
            profile=profile,
            acl=acl,
            **tuning,
        )
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ConfigError(f"file:// destination must be local: {url!r}")
        path = Path(urllib.parse.unquote(parsed.path))
        if not path.is_absolute():
            raise ConfigError(f"file:// destination must be an absolute path: {url!r}")
        return FileStore(path)
    raise ConfigError(
        f"unsupported destination {parsed.scheme or url!r}", hint="use s3://BUCKET/PREFIX or file:///PATH"
    )


# --------------------------------------------------------------------------- S3


class S3Store(Store):
    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        profile: str | None = None,
        acl: str | None = None,
        multipart_threshold: int = 64 * 1024 * 1024,
        multipart_chunksize: int = 16 * 1024 * 1024,
        max_concurrency: int = 8,
        attempts: int = 4,
        backoff: float = 0.5,
        botocore_attempts: int = 3,
        checksum: bool = True,
        connect_timeout: float = 10.0,
        read_timeout: float = 120.0,
    ) -> None:
        super().__init__()
        import boto3
        import botocore.exceptions
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        self.bucket, self.prefix, self.acl = bucket, prefix.strip("/"), acl
        self.attempts, self.backoff, self.checksum = max(1, attempts), backoff, checksum
        self.multipart_threshold = multipart_threshold
        try:
            self._session = boto3.session.Session(profile_name=profile, region_name=region)
        except botocore.exceptions.ProfileNotFound:
            raise ConfigError(f"AWS profile {profile!r} not found", key="s3.profile") from None
        options: dict[str, Any] = {
            "retries": {"max_attempts": max(1, botocore_attempts), "mode": "standard"},
            "connect_timeout": connect_timeout,
            "read_timeout": read_timeout,
            "max_pool_connections": max(10, 2 * max_concurrency),
            # Custom endpoints (MinIO, moto, ...) rarely have wildcard DNS for buckets.
            "s3": {"addressing_style": "path" if endpoint_url else "auto"},
            # botocore >= 1.36 adds a CRC32 to every request by default, which some
            # S3-compatible stores reject; we ask for SHA256 explicitly where we want it.
            "request_checksum_calculation": "when_required",
            "response_checksum_validation": "when_required",
        }
        try:
            config = Config(**options)
        except TypeError:  # botocore < 1.36 has neither option, nor the default they undo
            del options["request_checksum_calculation"], options["response_checksum_validation"]
            config = Config(**options)
        self._client: S3Client = self._session.client("s3", endpoint_url=endpoint_url, config=config)
        self._client.meta.events.register("before-send.s3", self._on_send)
        self._transfer = TransferConfig(
            multipart_threshold=multipart_threshold,
            multipart_chunksize=multipart_chunksize,
            max_concurrency=max_concurrency,
        )

    def _on_send(self, event_name: str = "", **_: Any) -> None:
        self._count(event_name.rpartition(".")[2])  # before-send.s3.HeadObject -> HeadObject

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def _full(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _rel(self, full_key: str) -> str:
        return full_key[len(self.prefix) + 1 :] if self.prefix else full_key

    # -- errors and retries

    def _mask(self, text: str) -> str:
        text = _SECRET_IN_URL.sub(lambda m: (m.group(1) or m.group(2) or "") + "***", text)
        try:
            creds = self._session.get_credentials()
            frozen = creds.get_frozen_credentials() if creds is not None else None
        except Exception:  # a failing credential provider must not hide the real error
            frozen = None
        if frozen is not None:
            for secret in (frozen.secret_key, frozen.token, frozen.access_key):
                if secret:
                    text = text.replace(secret, "***")
        return text

    def _error(self, action: str, key: str, exc: BaseException) -> PublishError:
        detail = self._mask(f"{type(exc).__name__}: {exc}")
        return PublishError(f"{action} {self.url}/{key} failed: {detail}")

    @staticmethod
    def _code(exc: BaseException) -> str:
        response = getattr(exc, "response", None) or {}
        return str(response.get("Error", {}).get("Code", ""))

    def _call(self, action: str, key: str, fn: Callable[[], T]) -> T:
        """Run `fn`, retrying connection-level failures with bounded exponential backoff.

        botocore's standard mode already retries throttling and 5xx answers; this outer loop
        covers a server that is unreachable for a little while (restart, network blip).
        """
        import botocore.exceptions as bex

        transient = (bex.ConnectionError, bex.HTTPClientError)
        for attempt in range(self.attempts):
            try:
                return fn()
            except transient as exc:
                if attempt + 1 == self.attempts:
                    raise self._error(action, key, exc) from None
                delay = min(self.backoff * 2**attempt, 10.0)
                time.sleep(delay * (0.5 + random.random() / 2))
            except bex.ClientError as exc:
                if self._code(exc) in ("404", "NoSuchKey", "NotFound"):
                    raise ObjectNotFound(f"{self.url}/{key}: no such object") from None
                if self._code(exc) in ("PreconditionFailed", "ConditionalRequestConflict"):
                    raise PreconditionFailed(f"{self.url}/{key} changed meanwhile") from None
                raise self._error(action, key, exc) from None
            except (bex.BotoCoreError, OSError) as exc:
                raise self._error(action, key, exc) from None
            except Exception as exc:  # s3transfer wraps failures in its own classes
                if type(exc).__module__.startswith(("boto3", "s3transfer")):
                    raise self._error(action, key, exc) from None
                raise
        raise AssertionError("unreachable")

    # -- operations

    def put(self, key: str, local_path: Path, sha256: str) -> None:
        extra: dict[str, Any] = {
            "Metadata": {"sha256": sha256},
            "ContentType": mimetypes.guess_type(key)[0] or "application/octet-stream",
        }
        if self.acl:
            extra["ACL"] = self.acl
        if self.checksum:
            extra["ChecksumAlgorithm"] = "SHA256"
            if local_path.stat().st_size < self.multipart_threshold and SHA256_RE.fullmatch(sha256):
                # Single-part upload: S3 verifies the body against the checksum we recorded.
                extra["ChecksumSHA256"] = base64.b64encode(bytes.fromhex(sha256)).decode()
        full = self._full(key)
        self._call(
            "upload",
            key,
            lambda: self._client.upload_file(
                str(local_path), self.bucket, full, ExtraArgs=extra, Config=self._transfer
            ),
        )

    def head(self, key: str) -> ObjectInfo | None:
        full = self._full(key)
        try:
            r = self._call(
                "head",
                key,
                lambda: self._client.head_object(Bucket=self.bucket, Key=full, ChecksumMode="ENABLED"),
            )
        except ObjectNotFound:
            return None
        sha = r.get("Metadata", {}).get("sha256") or _native_sha256(r)
        return ObjectInfo(
            key=key,
            size=int(r["ContentLength"]),
            sha256=sha.lower() if sha else None,
            etag=r.get("ETag"),
            last_modified=r.get("LastModified"),
        )

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        full = f"{self.prefix}/{prefix}" if self.prefix else prefix
        token: str | None = None
        while True:
            # One page per call, so a retry repeats one page rather than the whole listing.
            def fetch(token: str | None = token) -> Any:
                if token is None:
                    return self._client.list_objects_v2(Bucket=self.bucket, Prefix=full)
                return self._client.list_objects_v2(Bucket=self.bucket, Prefix=full, ContinuationToken=token)

            page = self._call("list", prefix, fetch)
            for obj in page.get("Contents", []):
                yield ObjectInfo(
                    key=self._rel(obj["Key"]),
                    size=int(obj["Size"]),
                    etag=obj.get("ETag"),
                    last_modified=obj.get("LastModified"),
                )
            if not page.get("IsTruncated"):
                return
            token = page["NextContinuationToken"]

    def get(self, key: str, local_path: Path) -> None:
        full = self._full(key)
        local_path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".download-", dir=local_path.parent)
        os.close(fd)
        try:
            self._call(
                "download",
                key,
                lambda: self._client.download_file(self.bucket, full, tmp, Config=self._transfer),
            )
            os.replace(tmp, local_path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def get_bytes(self, key: str) -> tuple[bytes, str] | None:
        full = self._full(key)

        def fetch() -> tuple[bytes, str]:
            r = self._client.get_object(Bucket=self.bucket, Key=full)
            return r["Body"].read(), r["ETag"]

        try:
            return self._call("get", key, fetch)
        except ObjectNotFound:
            return None

    def put_bytes(
        self,
        key: str,
        data: bytes,
        content_type: str,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
    ) -> str:
        sha = hashlib.sha256(data).digest()
        kwargs: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": self._full(key),
            "Body": data,
            "ContentType": content_type,
            "Metadata": {"sha256": sha.hex()},
        }
        if self.acl:
            kwargs["ACL"] = self.acl
        if self.checksum:
            kwargs["ChecksumSHA256"] = base64.b64encode(sha).decode()
        if if_match is not None:
            kwargs["IfMatch"] = if_match
        elif if_none_match:
            kwargs["IfNoneMatch"] = "*"
        r = self._call("write", key, lambda: self._client.put_object(**kwargs))
        return r["ETag"]

    def copy(self, src_key: str, dst_key: str) -> None:
        src: CopySourceTypeDef = {"Bucket": self.bucket, "Key": self._full(src_key)}
        dst = self._full(dst_key)
        info = self.head(src_key)
        if info is None:
            raise PublishError(f"copy {self.url}/{src_key}: no such object")
        extra: dict[str, Any] = {"ACL": self.acl} if self.acl else {}
        if info.size < 5 * 1024**3:
            # One server-side CopyObject keeps metadata and content type as they are.
            self._call(
                "copy",
                src_key,
                lambda: self._client.copy_object(
                    CopySource=src, Bucket=self.bucket, Key=dst, MetadataDirective="COPY", **extra
                ),
            )
            return
        # Multipart copy (> 5 GiB) does not carry metadata over by itself.
        extra["Metadata"] = {"sha256": info.sha256} if info.sha256 else {}
        self._call(
            "copy",
            src_key,
            lambda: self._client.copy(src, self.bucket, dst, ExtraArgs=extra, Config=self._transfer),
        )

    def delete(self, key: str) -> None:
        full = self._full(key)
        self._call("delete", key, lambda: self._client.delete_object(Bucket=self.bucket, Key=full))


def _native_sha256(head: Any) -> str | None:
    """The object's S3 SHA256 checksum as hex, when it covers the whole object."""
    value = head.get("ChecksumSHA256")
    if not value or "-" in value or head.get("ChecksumType") == "COMPOSITE":
        return None  # multipart uploads get a checksum of checksums, not the file's sha256
    try:
        return base64.b64decode(value).hex()
    except (binascii.Error, ValueError):
        return None


# --------------------------------------------------------------------------- file://

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
