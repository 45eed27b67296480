"""The index manifest of one folder (`<folder>/.index.json`): what is known about each of its
files, the only input of the folder's pages.

Format 2 keeps, per file, its sha256, the sha256 and `Requires-Python` of its PEP 658 core
metadata file (`<wheel>.metadata`, when there is one) and its upload time (PEP 700, when the
store gave it). Format 1 (file name -> sha256) is still read, so a bucket indexed by an older
nightly is upgraded in place by the next run.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace

from nightly.index.names import is_package
from nightly.jsonvalues import json_object
from nightly.stores import SHA256_RE, Store

log = logging.getLogger(__name__)

MANIFEST_NAME = ".index.json"
# A manifest holds a few hundred bytes per file of its folder: this bounds what a reader
# parses of an object anyone with write access to the bucket may have replaced.
MANIFEST_MAX_BYTES = 256 << 20


@dataclass(frozen=True)
class FileRecord:
    sha256: str | None = None  # lowercase hex, None when unknown
    metadata_sha256: str | None = None  # of `<file>.metadata`; None: no metadata file known
    requires_python: str | None = None  # the metadata's Requires-Python, verbatim
    upload_time: str | None = None  # RFC 3339, UTC, "Z"
    provenance_sha256: str | None = None  # of `<file>.provenance.json`; None: none known

    def merged(self, newer: FileRecord) -> FileRecord:
        """`newer` where it knows something, else what we knew; a new sha256 is another file,
        whose old metadata and upload time no longer apply."""
        if newer.sha256 and self.sha256 and newer.sha256 != self.sha256:
            return newer
        return FileRecord(
            sha256=newer.sha256 or self.sha256,
            metadata_sha256=newer.metadata_sha256 or self.metadata_sha256,
            requires_python=newer.requires_python or self.requires_python,
            upload_time=newer.upload_time or self.upload_time,
            provenance_sha256=newer.provenance_sha256 or self.provenance_sha256,
        )

    def with_sha256(self, sha256: str | None) -> FileRecord:
        return replace(self, sha256=sha256)


Records = dict[str, FileRecord]  # file name -> what is known about it
Known = Mapping[str, "str | FileRecord"]  # what a caller knows: a sha256 or a whole record


def as_record(value: str | FileRecord | None) -> FileRecord:
    if isinstance(value, FileRecord):
        return value
    return FileRecord(sha256=value)


@dataclass(frozen=True)
class Manifest:
    files: Records | None  # None: absent or unreadable (then a full rebuild is needed)
    etag: str | None  # None: absent
    # Of a channel root: its accelerator folders (direct sub-folders holding packages), which
    # its aggregate pages list and which show its files when it is a shared folder.
    folders: tuple[str, ...] = ()

    def digests(self) -> dict[str, str | None]:
        return {n: r.sha256 for n, r in (self.files or {}).items()}


def _hex(value: object) -> str | None:
    return value if isinstance(value, str) and SHA256_RE.fullmatch(value) else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def encode_manifest(files: Mapping[str, FileRecord] | None, folders: Iterable[str] = ()) -> bytes:
    """The manifest's bytes; `files=None` records only sub-folders of a folder whose own
    files nobody has listed yet (its next run then rebuilds it from a listing)."""
    body: dict[str, object] = {
        "format": 2,
        "files": None
        if files is None
        else {n: {k: v for k, v in asdict(r).items() if v} for n, r in sorted(files.items())},
    }
    if folders:
        body["folders"] = sorted(set(folders))
    return json.dumps(body, separators=(",", ":")).encode()


def _folders(raw: object) -> tuple[str, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(sorted({f for f in raw if isinstance(f, str) and f and "/" not in f and f[0] != "."}))


def _record(version: int, value: object) -> FileRecord:
    if version == 1 or not isinstance(value, dict):
        return FileRecord(sha256=_hex(value))
    return FileRecord(
        sha256=_hex(value.get("sha256")),
        metadata_sha256=_hex(value.get("metadata_sha256")),
        requires_python=_text(value.get("requires_python")),
        upload_time=_text(value.get("upload_time")),
        provenance_sha256=_hex(value.get("provenance_sha256")),
    )


def decode_manifest(data: bytes) -> Manifest | None:
    """The manifest in `data` (without ETag), or None when it is not one."""
    body = json_object(data, max_bytes=MANIFEST_MAX_BYTES)
    if body is None or "files" not in body:
        return None
    raw, version = body["files"], body.get("format")
    if version == 2 and raw is None:
        return Manifest(None, None, _folders(body.get("folders")))
    if version not in (1, 2) or not isinstance(raw, dict):
        return None
    files: Records = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not is_package(name):
            return None
        files[name] = _record(version, value)
    return Manifest(files, None, _folders(body.get("folders")) if version == 2 else ())


def read_manifest(store: Store, folder: str) -> Manifest:
    got = store.get_bytes(f"{folder}/{MANIFEST_NAME}")
    if got is None:
        return Manifest(None, None)
    manifest = decode_manifest(got[0])
    if manifest is None:
        log.warning("%s/%s/%s is unreadable; rebuilding it", store.url, folder, MANIFEST_NAME)
        return Manifest(None, got[1])
    return replace(manifest, etag=got[1])
