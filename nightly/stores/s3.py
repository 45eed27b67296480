"""An S3 bucket (or any S3-compatible server: MinIO, moto) as a Store, through boto3.

boto3 is imported inside the constructor so that `nightly --help` never pays for it.
"""

from __future__ import annotations

import base64
import builtins
import hashlib
import mimetypes
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from nightly.config.retry import Backoffs
from nightly.config.timeouts import ExternalTimeouts, default_timeouts
from nightly.errors import ConfigError, ObjectTooLarge, PublishError, require
from nightly.stores.base import (
    SHA256_RE,
    ObjectInfo,
    ObjectNotFound,
    PreconditionFailed,
    Store,
    check_key,
)
from nightly.stores.s3answers import SECRET_IN_URL, as_head_object, head_info, timestamp
from nightly.stores.s3reads import SignedReads

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CopySourceTypeDef

T = TypeVar("T")

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
        attempts: int | None = None,
        backoff: float | None = None,
        botocore_attempts: int = 3,
        checksum: bool = True,
        connections: int = 0,
        signed_reads: bool = True,
        backoffs: Backoffs | None = None,
        timeouts: ExternalTimeouts | None = None,
    ) -> None:
        super().__init__(backoffs)
        require("boto3", what="an s3:// store")
        import boto3
        import botocore.exceptions
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        self.bucket, self.prefix, self.acl = bucket, prefix.strip("/"), acl
        # Connection-level retries: [backoff.s3] (config/retry.py) unless the caller says.
        self.retry = self.backoffs.s3.replace(attempts=attempts, first_s=backoff)
        self.checksum = checksum
        self.multipart_threshold = multipart_threshold
        try:
            self._session = boto3.session.Session(profile_name=profile, region_name=region)
        except botocore.exceptions.ProfileNotFound:
            raise ConfigError(f"AWS profile {profile!r} not found", key="s3.profile") from None
        waits = timeouts or default_timeouts()
        options: dict[str, Any] = {
            "retries": {"max_attempts": max(1, botocore_attempts), "mode": "standard"},
            "connect_timeout": waits.s3_connect,
            "parameter_validation": False,
            "read_timeout": waits.s3_read,
            # Enough kept-alive connections for the index's reading pool (`connections`): a
            # pool smaller than the threads using it opens a new connection per request.
            "max_pool_connections": max(10, 2 * max_concurrency, connections),
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
        # botocore parses every LastModified of a listing with dateutil, most of the client's
        # time on a 1,000-key page; S3 writes ISO 8601, which datetime reads directly.
        self._session._session.get_component("response_parser_factory").set_parser_defaults(
            timestamp_parser=timestamp
        )
        self._client: S3Client = self._session.client("s3", endpoint_url=endpoint_url, config=config)
        self._client.meta.events.register("before-send.s3", self._on_send)
        # HEADs and small GETs signed and sent without boto3's per-call cost (s3reads.py);
        # anything but a 200 or a 404 is asked again through boto3.
        self._reads = SignedReads.of(self._client, self._session, bucket) if signed_reads else None
        self._transfer = TransferConfig(
            multipart_threshold=multipart_threshold,
            multipart_chunksize=multipart_chunksize,
            max_concurrency=max_concurrency,
        )

    def _on_send(self, event_name: str = "", **_: object) -> None:
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
        text = SECRET_IN_URL.sub(lambda m: (m.group(1) or m.group(2) or "") + "***", text)
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
        """Run `fn`, retrying connection-level failures with nightly's retry policy.

        botocore's standard mode already retries throttling and 5xx answers; this outer loop
        covers a server that is unreachable for a little while (restart, network blip).
        """
        import botocore.exceptions as bex

        transient = (bex.ConnectionError, bex.HTTPClientError)
        for attempt in self.retry.tries():
            try:
                return fn()
            except transient as exc:
                if attempt == self.retry.attempts:
                    raise self._error(action, key, exc) from None
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
        extra: dict[str, object] = {
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
        reply = self._reads.head(full) if self._reads is not None else None
        if reply is not None:
            self._count("HeadObject")
            return None if reply.status == 404 else head_info(key, as_head_object(reply.headers))
        try:
            r = self._call(
                "head",
                key,
                lambda: self._client.head_object(Bucket=self.bucket, Key=full, ChecksumMode="ENABLED"),
            )
        except ObjectNotFound:
            return None
        return head_info(key, r)

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

    def list_level(self, prefix: str) -> tuple[builtins.list[ObjectInfo], builtins.list[str]]:
        full = f"{self.prefix}/{prefix}" if self.prefix else prefix
        objects: builtins.list[ObjectInfo] = []
        subs: builtins.list[str] = []
        token: str | None = None
        while True:
            def fetch(token: str | None = token) -> Any:
                if token is None:
                    return self._client.list_objects_v2(Bucket=self.bucket, Prefix=full, Delimiter="/")
                return self._client.list_objects_v2(
                    Bucket=self.bucket, Prefix=full, Delimiter="/", ContinuationToken=token
                )

            page = self._call("list", prefix, fetch)
            objects += [
                ObjectInfo(key=self._rel(o["Key"]), size=int(o["Size"]), etag=o.get("ETag"),
                           last_modified=o.get("LastModified"))
                for o in page.get("Contents", [])
            ]
            subs += [self._rel(p["Prefix"]) for p in page.get("CommonPrefixes", [])]
            if not page.get("IsTruncated"):
                return objects, subs
            token = page["NextContinuationToken"]

    def get(self, key: str, local_path: Path, *, max_bytes: int | None = None) -> None:
        full = self._full(key)
        if max_bytes is not None:
            info = self.head(key)
            if info is not None and info.size > max_bytes:
                raise ObjectTooLarge(f"{self.url}/{key} holds {info.size} bytes, more than the "
                                     f"{max_bytes} expected: not downloaded", size=info.size)
        local_path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".download-", dir=local_path.parent)
        os.close(fd)
        try:
            self._call(
                "download",
                key,
                lambda: self._client.download_file(self.bucket, full, tmp, Config=self._transfer),
            )
            size = os.path.getsize(tmp)
            if max_bytes is not None and size > max_bytes:  # replaced since the head
                raise ObjectTooLarge(f"{self.url}/{key} holds {size} bytes, more than the "
                                     f"{max_bytes} expected", size=size)
            os.replace(tmp, local_path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def read_range(self, key: str, start: int, length: int) -> bytes:
        full = self._full(key)
        rng = f"bytes={start}-{start + max(length, 1) - 1}"

        def fetch() -> bytes:
            data: bytes = self._client.get_object(Bucket=self.bucket, Key=full, Range=rng)["Body"].read()
            return data

        return self._call("get", key, fetch)

    def read_prefix(self, key: str, length: int) -> tuple[bytes, int] | None:
        full = self._full(key)

        def fetch() -> tuple[bytes, int]:
            r = self._client.get_object(Bucket=self.bucket, Key=full)
            body = r["Body"]
            try:
                data: bytes = body.read(length) if length > 0 else b""
            finally:
                body.close()  # the rest is never read
            return data, int(r["ContentLength"])

        try:
            return self._call("get", key, fetch)
        except ObjectNotFound:
            return None

    def get_bytes(self, key: str, *, max_bytes: int | None = None) -> tuple[bytes, str] | None:
        full = self._full(key)
        reply = self._reads.get(full, max_bytes) if self._reads is not None else None
        if reply is not None:
            self._count("GetObject")
            if reply.status == 404:
                return None
            self._check_size(key, reply.body, max_bytes)
            return reply.body, reply.headers.get("etag", "")

        def fetch() -> tuple[bytes, str]:
            r = self._client.get_object(Bucket=self.bucket, Key=full)
            body = r["Body"]
            try:
                data: bytes = body.read() if max_bytes is None else body.read(max_bytes + 1)
            finally:
                body.close()
            self._check_size(key, data, max_bytes)
            return data, r["ETag"]

        try:
            return self._call("get", key, fetch)
        except ObjectNotFound:
            return None

    def _check_size(self, key: str, data: bytes, max_bytes: int | None) -> None:
        if max_bytes is not None and len(data) > max_bytes:
            raise ObjectTooLarge(f"{self.url}/{key} holds more than the {max_bytes} bytes "
                                 "expected: not read", size=len(data))

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
        if cache_control:
            kwargs["CacheControl"] = cache_control
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
