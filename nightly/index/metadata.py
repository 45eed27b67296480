"""PEP 658 core metadata: a wheel's `*.dist-info/METADATA`, kept beside it as `<wheel>.metadata`
so that pip and uv can resolve without downloading multi-gigabyte wheels.

At upload the file is read from the local wheel; for wheels already in a store
(`nightly index --backfill-metadata`) it is read with ranged GETs (the zip's central directory
and the one member), never by downloading the wheel.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from packaging.metadata import parse_email
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from nightly.errors import PublishError
from nightly.stores import Store

METADATA_SUFFIX = ".metadata"
METADATA_TYPE = "application/octet-stream"
RANGE_BLOCK = 256 * 1024  # bytes per ranged GET: the central directory usually fits in one


@dataclass(frozen=True)
class CoreMetadata:
    data: bytes
    sha256: str
    requires_python: str | None


def describe(data: bytes) -> CoreMetadata:
    """sha256 and Requires-Python of a METADATA file's bytes (packaging's parser)."""
    raw, _ = parse_email(data)
    requires = raw.get("requires_python")
    return CoreMetadata(data, hashlib.sha256(data).hexdigest(), str(requires).strip() if requires else None)


def _read_metadata(zf: zipfile.ZipFile, wheel_name: str) -> bytes:
    try:
        name, version, _, _ = parse_wheel_filename(wheel_name)
    except InvalidWheelFilename as e:
        raise PublishError(f"{wheel_name}: {e}") from None
    candidates = [
        n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
    ]
    for member in candidates:
        # The .dist-info folder is `{name}-{version}`, name escaped by whichever tool built it.
        dist_name = member.split("/")[0].removesuffix(".dist-info").rpartition("-")[0]
        if canonicalize_name(dist_name) == name:
            return zf.read(member)
    if len(candidates) == 1:
        return zf.read(candidates[0])
    raise PublishError(f"{wheel_name}: no {name}-{version}.dist-info/METADATA in the wheel")


def from_wheel(path: Path) -> CoreMetadata:
    """The core metadata of a local wheel file."""
    try:
        with zipfile.ZipFile(path) as zf:
            return describe(_read_metadata(zf, path.name))
    except (OSError, zipfile.BadZipFile, KeyError) as e:
        raise PublishError(f"{path}: cannot read its METADATA: {e}") from None


class _RangeReader(io.RawIOBase):
    """A read-only, seekable file over ranged reads of one object (what zipfile needs).

    Reads go through one cached block of at least RANGE_BLOCK bytes; a read near the end
    fetches the object's last block, so the end record, the zip64 locator and the central
    directory usually come in one GET, and the METADATA member in a second.
    """

    def __init__(self, read: Callable[[int, int], bytes], size: int) -> None:
        self._read, self._size, self._pos = read, size, 0
        self._start, self._block = 0, b""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        want = min(len(buffer), self._size - self._pos)
        if want <= 0:
            return 0
        end = self._pos + want
        if not (self._start <= self._pos and end <= self._start + len(self._block)):
            length = max(want, RANGE_BLOCK)
            start = min(self._pos, max(0, self._size - length))
            self._start, self._block = start, self._read(start, min(length, self._size - start))
        offset = self._pos - self._start
        data = self._block[offset : offset + want]
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)


def from_store(store: Store, key: str, size: int) -> CoreMetadata:
    """The core metadata of a wheel in a store, read with a few ranged GETs."""
    reader: IO[bytes] = _RangeReader(lambda start, length: store.read_range(key, start, length), size)  # type: ignore[assignment]
    try:
        with zipfile.ZipFile(reader) as zf:
            return describe(_read_metadata(zf, key.rpartition("/")[2]))
    except (zipfile.BadZipFile, KeyError, OSError, EOFError) as e:
        raise PublishError(f"{store.url}/{key}: cannot read its METADATA: {e}") from None
