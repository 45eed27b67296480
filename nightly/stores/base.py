"""The store interface: object storage with S3 semantics, and what every store shares.

Keys are relative to the destination (`s3://bucket/prefix` or `file:///abs/path`) and follow
the bucket layout of `nightly.stores.layout`. Everything that can fail remotely raises
PublishError with a message that never contains credentials.
"""

from __future__ import annotations

import builtins
import re
import threading
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from nightly.config.retry import Backoff, Backoffs, default_backoffs
from nightly.errors import PublishError
from nightly.files import confined, sha256_file

file_sha256 = sha256_file  # the stores' name for nightly.files.sha256_file

SHA256_RE = re.compile(r"[0-9a-f]{64}")

def cas_rounds(what: str, backoff: Backoff, *, rounds: int | None = None,
               retry: str = "run the command again") -> Iterator[int]:
    """Rounds 1..N of a compare-and-swap (or write-then-check) loop, pausing before each
    retry with nightly's one retry policy (config/retry.py; a store's `backoffs.store`,
    [backoff.store]: N rounds unless `rounds` says). Exhausted, it raises PublishError naming
    `what` and what to do."""
    backoff = backoff.replace(attempts=rounds)
    yield from backoff.tries()
    raise PublishError(f"{what}: it kept changing during {backoff.attempts} rounds; {retry}")


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
    if confined(key) is None:
        raise PublishError(f"invalid object key {key!r}")
    return key



class Store(ABC):
    """Object storage with S3 semantics.

    `requests` counts the requests made, `requests_by_op` by operation (on S3 every HTTP
    request, retries and multipart parts included), for benchmarks and the run summary.
    """

    def __init__(self, backoffs: Backoffs | None = None) -> None:
        # The retry policies of the configuration that opened the store (defaults.toml's
        # when none did): its compare-and-swap rounds, S3 requests and index reads.
        self.backoffs = backoffs or default_backoffs()
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

    def list_level(self, prefix: str) -> tuple[builtins.list[ObjectInfo], builtins.list[str]]:
        """One level below `prefix` (which ends in "/"): the objects directly in it, and the
        prefixes of its sub-folders ("whl/nightly/cpu/"), as S3 lists with a "/" delimiter."""
        objects: builtins.list[ObjectInfo] = []
        subs: set[str] = set()
        for obj in self.list(prefix):
            rest = obj.key[len(prefix) :]
            if "/" in rest:
                subs.add(prefix + rest.partition("/")[0] + "/")
            else:
                objects.append(obj)
        return objects, sorted(subs)

    @abstractmethod
    def read_range(self, key: str, start: int, length: int) -> bytes:
        """`length` bytes of an object from offset `start` (fewer at its end)."""

    @abstractmethod
    def read_prefix(self, key: str, length: int) -> tuple[bytes, int] | None:
        """The first `length` bytes of an object (never more) and its whole size; None when
        it does not exist."""

    @abstractmethod
    def get(self, key: str, local_path: Path, *, max_bytes: int | None = None) -> None:
        """Download one object to a file (atomically); ObjectTooLarge, and nothing written,
        when it holds more than `max_bytes`."""

    @abstractmethod
    def get_bytes(self, key: str, *, max_bytes: int | None = None) -> tuple[bytes, str] | None:
        """A small object's content and ETag, or None when it does not exist; ObjectTooLarge
        when it holds more than `max_bytes` (not read past that)."""

    @abstractmethod
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
        """Write a small object whole and atomically; returns its new ETag.

        `if_match=etag` writes only if the object still has that ETag, `if_none_match=True`
        only if it does not exist; otherwise PreconditionFailed. `cache_control`: the
        object's Cache-Control header where the store serves HTTP (S3); a folder has none.
        """

    @abstractmethod
    def copy(self, src_key: str, dst_key: str) -> None:
        """Copy an object with its metadata (server-side on S3)."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Delete an object; deleting a missing object is not an error (as on S3)."""

    def update(
        self,
        key: str,
        change: Callable[[bytes | None], bytes | None],
        content_type: str,
        *,
        what: str,
        rounds: int | None = None,
    ) -> str | None:
        """Read-change-write a small object by compare-and-swap: `change` gets its current
        content (None: it does not exist) and returns the new content, or None when nothing
        needs writing. Another writer's change in between (PreconditionFailed) means read
        and change again, so no writer's change is ever lost. Returns the object's ETag
        (None when it does not exist and nothing was written)."""
        for _ in cas_rounds(what, self.backoffs.store, rounds=rounds):
            current = self.get_bytes(key)
            new = change(None if current is None else current[0])
            if new is None:
                return None if current is None else current[1]
            try:
                return self.put_bytes(
                    key, new, content_type,
                    if_match=None if current is None else current[1],
                    if_none_match=current is None,
                )
            except PreconditionFailed:
                continue
        raise AssertionError("unreachable: cas_rounds raises when exhausted")

    def ensure(self, key: str, local_path: Path, sha256: str) -> bool:
        """Upload unless the object already exists with this sha256. True if it uploaded."""
        info = self.head(key)
        if info is not None and info.sha256 == sha256:
            return False
        self.put(key, local_path, sha256)
        return True
