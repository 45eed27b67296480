"""A folder's listing, read for the index: each file's record from what is already known, and
what is still to be read about the files the pages will show (see `index.py`, `coldread.py`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from packaging.version import Version

from nightly.index import coldread
from nightly.index.coldread import Learned, Want
from nightly.index.manifest import FileRecord, Records
from nightly.index.metadata import METADATA_SUFFIX
from nightly.index.names import is_package, parse_package
from nightly.stores import ObjectInfo
from nightly.stores.layout import channel_of, channel_root


def _rfc3339(when: datetime | None) -> str | None:
    if when is None:
        return None
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class FolderScan:
    """A folder's listing, read: its files' records, the listing entries of the `.metadata`
    files beside them (by the file's name), its project pages (sub-folders holding nothing
    but an index.html), its accelerator sub-folders, and each file's listing entry."""

    files: Records
    siblings: dict[str, ObjectInfo]
    pages: set[str]
    folders: tuple[str, ...]
    objects: dict[str, ObjectInfo]


def scan_folder(
    folder: str, objects: Iterable[ObjectInfo], recorded: Mapping[str, FileRecord],
    known: Mapping[str, FileRecord], learned: Mapping[str, Learned],
) -> FolderScan:
    """Each file's record from, weakest first: what was read about this very object
    (`learned`), the manifest, the caller, the listing's checksum and time."""
    files: Records = {}
    siblings: dict[str, ObjectInfo] = {}
    below: dict[str, set[str]] = {}
    entries: dict[str, ObjectInfo] = {}
    for obj in objects:
        rel = obj.key[len(folder) + 1 :]
        if "/" in rel:
            sub, _, rest = rel.partition("/")
            below.setdefault(sub, set()).add(rest)
        elif is_package(rel):
            record = recorded.get(rel, FileRecord()).merged(known.get(rel, FileRecord()))
            pre = learned.get(rel)
            if pre is not None and pre.identity == coldread.identity(obj):
                record = pre.record.merged(record)
            if record.sha256 is None and obj.sha256:
                record = record.with_sha256(obj.sha256)
            if record.upload_time is None and obj.last_modified is not None:
                record = record.merged(FileRecord(upload_time=_rfc3339(obj.last_modified)))
            files[rel], entries[rel] = record, obj
        elif rel.endswith(METADATA_SUFFIX) and is_package(rel[: -len(METADATA_SUFFIX)]):
            siblings[rel[: -len(METADATA_SUFFIX)]] = obj
    for name in list(files):
        if name not in siblings and files[name].metadata_sha256:
            files[name] = FileRecord(sha256=files[name].sha256, upload_time=files[name].upload_time)
    pages = {f"{sub}/index.html" for sub, rest in below.items() if rest == {"index.html"}}
    channel = channel_of(folder)
    folders = tuple(
        sorted(
            sub for sub, rest in below.items()
            if channel_root(folder) == folder and channel_of(f"{folder}/{sub}") == channel
            and any("/" not in r and is_package(r) for r in rest)
        )
    )
    return FolderScan(files, siblings, pages, folders, entries)


def wants_of(folder: str, scan: FolderScan, versions: int, learned: Mapping[str, Learned]) -> list[Want]:
    """What to read about the files the pages can show (their project's newest `versions`
    versions in this folder): a HEAD per unknown sha256, a GET per unrecorded `.metadata`,
    neither when this object was asked about already. The others are recorded as they are;
    a later full run asks about them if they ever come into view."""
    out: list[Want] = []
    for name in sorted(in_view(scan.files, versions)):
        record, pre = scan.files[name], learned.get(name)
        asked = pre.read if pre is not None and pre.identity == coldread.identity(scan.objects[name]) else ()
        sha = record.sha256 is None and "sha256" not in asked
        md = name in scan.siblings and not record.metadata_sha256 and "metadata" not in asked
        if sha or md:
            out.append(Want(folder, name, sha, md, scan.objects[name], scan.siblings.get(name)))
    return out


def in_view(files: Mapping[str, FileRecord], versions: int) -> set[str]:
    """The files of each project's newest `versions` versions (all with 0, and every file
    whose name does not parse)."""
    if versions <= 0:
        return set(files)
    by_project: dict[str, dict[Version, list[str]]] = {}
    shown: set[str] = set()
    for name in files:
        parsed = parse_package(name)
        if parsed is None:
            shown.add(name)
        else:
            by_project.setdefault(parsed[0], {}).setdefault(parsed[1], []).append(name)
    for vs in by_project.values():
        for version in sorted(vs, reverse=True)[:versions]:
            shown.update(vs[version])
    return shown
