"""Regenerating the index pages of published folders (what they look like: `pages.py`).

Per folder (e.g. `whl/nightly/cu126`) the pages of `pages.py` are written, and
`<folder>/.index.json`, the manifest (`manifest.py`): what is known of each file, the pages'
only input besides the manifests of the folders they also list (a shared dependency folder,
or an aggregate root's accelerator folders).

How a folder is regenerated
    Incremental (the default): 1 GET of the manifest, merge the records of the upload, write
    the manifest back, write the pages, 1 HEAD of the manifest. No request per object (but one
    GET of `<wheel>.metadata` for a new wheel the caller gave only a sha256 for).
    A folder without a (valid) manifest is rebuilt in full instead, never from a partial one.
    Full (`--full`): list the folder; take each file's record from the caller or the manifest,
    HEAD only the objects whose sha256 is still unknown (the sha256 a writer left in
    x-amz-meta-sha256 or x-amz-meta-checksum-sha256, or S3's own checksum) and GET only
    the `.metadata` files not yet recorded; write the manifest and the pages. So a first full
    run on a bucket nightly did not write records everything, and later runs ask nothing.
    Pages are rendered completely in memory from complete manifests before anything is
    written, so a failed listing or GET raises before a single page is touched; pages are
    replaced in place (one PUT each), and pages of projects that have gone are deleted only
    after every page of the run is written: no page is ever missing while a run goes on.

Why several machines may regenerate at once without losing entries
    1. A manifest is only changed by compare-and-swap: a conditional PUT (If-Match on the
       ETag read, or If-None-Match: * when creating it; S3 has supported both since 2024,
       and the file:// store does the same under a flock). The loser of a race gets
       PreconditionFailed, re-reads and re-merges, so no recorded upload is ever dropped.
       An upload writes its object before it records it, and a full rebuild that loses the
       swap lists again, so a rebuild cannot drop a concurrent upload either.
    2. Pages are a pure function of manifests, and each page is one whole-object PUT.
    3. After writing all of a folder's pages, a writer HEADs every manifest they came from;
       if an ETag is no longer the one the pages were rendered from, it renders and writes
       them again. A writer that changes a manifest then renders every folder whose pages
       depend on it. So the last write of any page was followed by a check that saw the
       manifests it came from, and once writers finish every page matches them.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone

from packaging.version import Version

from nightly.errors import PublishError
from nightly.publish import caching
from nightly.publish.layout import INDEX_PREFIXES, channel_of, channel_root
from nightly.publish.manifest import (
    MANIFEST_NAME,
    FileRecord,
    Manifest,
    Records,
    as_record,
    encode_manifest,
    read_manifest,
)
from nightly.publish.metadata import METADATA_SUFFIX, describe
from nightly.publish.names import is_package, parse_package, project_of
from nightly.publish.pages import DEFAULT_FIND_LINKS, HTML_TYPE, Source, render_folder
from nightly.publish.stores import ObjectInfo, PreconditionFailed, Store

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_FIND_LINKS",
    "HTML_TYPE",
    "MANIFEST_NAME",
    "FolderReport",
    "IndexOptions",
    "discover_folders",
    "is_package",
    "list_index_prefixes",
    "parse_package",
    "project_of",
    "read_manifest",
    "regenerate",
    "render_folder",
]

MAX_ROUNDS = 12  # rounds of "write pages, find a manifest changed" before giving up
BACKOFF_S = 0.05  # first pause between rounds; doubles, jittered, so racing writers spread out
HEAD_THREADS = 16

Known = Mapping[str, "str | FileRecord"]


@dataclass(frozen=True, kw_only=True)
class IndexOptions:
    """How pages are made. `find_links_name` is one name or a function of the channel;
    `shared` folders (e.g. `whl/nightly`) are listed in the pages of every accelerator folder
    of their channel; `aggregate` makes a channel root's pages list every accelerator
    folder's files too; `versions` (> 0) shows only each project's newest N versions."""

    find_links_name: str | Callable[[str], str] = DEFAULT_FIND_LINKS
    shared: tuple[str, ...] = ()
    aggregate: bool = False
    versions: int = 0

    def flat_name(self, folder: str) -> str:
        name = self.find_links_name
        return name if isinstance(name, str) else name(channel_of(folder))


@dataclass
class FolderReport:
    folder: str
    full: bool  # rebuilt from a listing (asked for, or no usable manifest)
    files: int = 0
    pages_written: int = 0
    pages_deleted: int = 0
    heads: int = 0  # objects whose sha256 had to be asked for
    metadata_reads: int = 0  # `.metadata` files read for their sha256 and Requires-Python
    rounds: int = 0  # >1 when another writer changed the folder meanwhile
    missing_sha256: list[str] = field(default_factory=list)


def _pause(rounds: int) -> None:
    if rounds > 1:
        time.sleep(min(BACKOFF_S * 2 ** (rounds - 2), 2.0) * random.uniform(0.5, 1.5))


def regenerate(
    store: Store,
    folders: Iterable[str],
    *,
    full: bool,
    known: Mapping[str, Known] | None = None,
    removed: Mapping[str, Iterable[str]] | None = None,
    find_links_name: str | Callable[[str], str] = DEFAULT_FIND_LINKS,
    options: IndexOptions | None = None,
    listing: Sequence[ObjectInfo] | None = None,
) -> list[FolderReport]:
    """Rewrite the pages of `folders` and of the folders whose pages show them.

    `known[folder]` maps file name -> sha256 (or a whole record) recorded at upload,
    `removed[folder]` names files deleted by retention; `listing` (full runs) is a listing
    that covers the folders, so that they need not be listed again. Raises PublishError; a
    folder that failed keeps its previous pages."""
    opts = options or IndexOptions(find_links_name=find_links_name)
    known = {k.strip("/"): v for k, v in (known or {}).items()}
    gone = {k.strip("/"): set(v) for k, v in (removed or {}).items()}
    asked = list(dict.fromkeys(f.strip("/") for f in folders))
    reports: dict[str, FolderReport] = {}
    merged: dict[str, Manifest] = {}
    candidates: dict[str, set[str]] = {}  # folder -> project pages that may have gone
    for folder in asked:
        report = reports[folder] = FolderReport(folder, full)
        below = _below(listing, folder) if listing is not None else None
        merged[folder], candidates[folder] = _merge(
            store, folder, full=full, known=known.get(folder) or {}, removed=gone.get(folder, set()),
            report=report, listing=below, versions=opts.versions,
        )
    order = list(asked)
    for folder in asked:
        for dep in _dependents(store, folder, merged, opts):
            if dep in reports:
                continue
            reports[dep] = FolderReport(dep, False)
            order.append(dep)
            manifest = read_manifest(store, dep)
            if manifest.files is None:  # never listed (a new channel root): list it once
                below = _below(listing, dep) if listing is not None else None
                manifest, candidates[dep] = _merge(
                    store, dep, full=True, known={}, removed=set(), report=reports[dep], listing=below,
                    versions=opts.versions,
                )
            merged[dep] = manifest
    stale: list[tuple[FolderReport, str]] = []
    for folder in order:
        pages = _write_pages(store, folder, merged.get(folder), opts, reports[folder])
        stale += [(reports[folder], f"{folder}/{p}") for p in sorted(candidates.get(folder, set()) - pages)]
    # Only now, with every page of the run in place, do pages of vanished projects go.
    for report, key in stale:
        store.delete(key)
        report.pages_deleted += 1
    return [reports[f] for f in order]


def list_index_prefixes(store: Store, prefixes: Iterable[str] = INDEX_PREFIXES) -> list[ObjectInfo]:
    """One listing of everything under the index prefixes (what a full run works from)."""
    return [obj for prefix in prefixes for obj in store.list(prefix)]


def discover_folders(
    store: Store, prefixes: Iterable[str] = INDEX_PREFIXES, *, listing: Sequence[ObjectInfo] | None = None
) -> list[str]:
    """Every folder under `prefixes` that directly holds a package (one full listing)."""
    objects = listing if listing is not None else list_index_prefixes(store, prefixes)
    found: set[str] = set()
    for obj in objects:
        folder, _, name = obj.key.rpartition("/")
        if folder and is_package(name):
            found.add(folder)
    return sorted(found)


def _below(listing: Sequence[ObjectInfo], folder: str) -> list[ObjectInfo]:
    prefix = folder + "/"
    return [o for o in listing if o.key.startswith(prefix)]


# --------------------------------------------------------------------------- manifests


def _merge(
    store: Store,
    folder: str,
    *,
    full: bool,
    known: Known,
    removed: set[str],
    report: FolderReport,
    listing: list[ObjectInfo] | None,
    versions: int = 0,
) -> tuple[Manifest, set[str]]:
    """Bring the folder's manifest up to date (compare-and-swap, retried); returns it and,
    after a listing, the project pages found in the folder."""
    manifest_key = f"{folder}/{MANIFEST_NAME}"
    resolved: Records | None = None
    for report.rounds in range(1, MAX_ROUNDS + 1):
        _pause(report.rounds)
        base = read_manifest(store, folder)
        pages: set[str] = set()
        folders = base.folders
        if full or base.files is None:
            report.full = True
            records = {n: as_record(v) for n, v in known.items()}
            objects = listing if listing is not None and report.rounds == 1 else None
            files, pages, folders = _from_listing(
                store, folder, base.files or {}, records, report, objects, versions
            )
        else:
            if resolved is None:
                resolved = _resolve_known(store, folder, known, report)
            files = dict(base.files)
            for name, record in resolved.items():
                files[name] = files[name].merged(record) if name in files else record
            for name in removed:
                files.pop(name, None)
        etag = base.etag
        if files != base.files or folders != base.folders:
            try:
                etag = store.put_bytes(
                    manifest_key,
                    encode_manifest(files, folders),
                    "application/json",
                    if_match=base.etag,
                    if_none_match=base.etag is None,
                )
            except PreconditionFailed:
                continue  # someone else changed it after we read it: read and merge again
            if base.files is None:
                _register(store, folder)
        report.files = len(files)
        report.missing_sha256 = sorted(n for n, r in files.items() if r.sha256 is None)
        return Manifest(files, etag, folders), pages
    raise PublishError(
        f"index of {store.url}/{folder}: the folder kept changing during {MAX_ROUNDS} rounds; "
        "run `nightly index` again"
    )


def _register(store: Store, folder: str) -> None:
    """Record a new accelerator folder in its channel root's manifest (compare-and-swap)."""
    root = channel_root(folder)
    if root == folder or folder.rpartition("/")[0] != root:
        return
    name = folder.rpartition("/")[2]
    for rounds in range(1, MAX_ROUNDS + 1):
        _pause(rounds)
        base = read_manifest(store, root)
        if name in base.folders:
            return
        # Files None: nobody listed the root yet; its next run lists it, so that what it
        # holds from before (an adopted bucket) is never hidden by an empty record.
        body = encode_manifest(base.files, (*base.folders, name))
        try:
            store.put_bytes(
                f"{root}/{MANIFEST_NAME}", body, "application/json",
                if_match=base.etag, if_none_match=base.etag is None,
            )
            return
        except PreconditionFailed:
            continue
    raise PublishError(f"index of {store.url}/{root}: could not record {name}/; run `nightly index --full`")


def _resolve_known(store: Store, folder: str, known: Known, report: FolderReport) -> Records:
    """Records of what the caller knows; for a wheel known only by its sha256, its
    `.metadata` file is read (one small GET) so that its pages can offer PEP 658 metadata."""
    out = {n: as_record(v) for n, v in known.items()}
    wheels = [n for n, v in known.items() if isinstance(v, str) and n.endswith(".whl")]
    for name, extra in zip(wheels, _read_metadata(store, folder, wheels, report), strict=True):
        out[name] = out[name].merged(extra)
    return out


def _read_metadata(store: Store, folder: str, names: list[str], report: FolderReport) -> list[FileRecord]:
    def one(name: str) -> FileRecord:
        got = store.get_bytes(f"{folder}/{name}{METADATA_SUFFIX}")
        if got is None:
            return FileRecord()
        try:
            md = describe(got[0])
        except ValueError:
            log.warning("%s/%s/%s%s is not core metadata", store.url, folder, name, METADATA_SUFFIX)
            return FileRecord()
        return FileRecord(metadata_sha256=md.sha256, requires_python=md.requires_python)

    if not names:
        return []
    report.metadata_reads += len(names)
    with ThreadPoolExecutor(HEAD_THREADS) as pool:
        return list(pool.map(one, names))


def _rfc3339(when: datetime | None) -> str | None:
    if when is None:
        return None
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _from_listing(
    store: Store,
    folder: str,
    recorded: Mapping[str, FileRecord],
    known: Mapping[str, FileRecord],
    report: FolderReport,
    objects: list[ObjectInfo] | None,
    versions: int = 0,
) -> tuple[Records, set[str], tuple[str, ...]]:
    """The folder's files from a listing (records from the caller and the manifest, else a
    HEAD per unknown sha256 and a GET per unrecorded `.metadata`), the project pages found
    (sub-folders holding nothing but an index.html) and the accelerator sub-folders.

    With a version cap, only files the pages can show (their project's newest `versions`
    versions in this folder) are asked about; the others are recorded as they are, and a
    later full run asks about them if they ever come into view."""
    if objects is None:
        objects = list(store.list(folder + "/"))
    files: Records = {}
    siblings: set[str] = set()
    below: dict[str, set[str]] = {}
    for obj in objects:
        rel = obj.key[len(folder) + 1 :]
        if "/" in rel:
            sub, _, rest = rel.partition("/")
            below.setdefault(sub, set()).add(rest)
        elif is_package(rel):
            record = recorded.get(rel, FileRecord()).merged(known.get(rel, FileRecord()))
            if record.sha256 is None and obj.sha256:
                record = record.with_sha256(obj.sha256)
            if record.upload_time is None and obj.last_modified is not None:
                record = record.merged(FileRecord(upload_time=_rfc3339(obj.last_modified)))
            files[rel] = record
        elif rel.endswith(METADATA_SUFFIX) and is_package(rel[: -len(METADATA_SUFFIX)]):
            siblings.add(rel[: -len(METADATA_SUFFIX)])
    pages = {f"{sub}/index.html" for sub, rest in below.items() if rest == {"index.html"}}
    channel = channel_of(folder)
    folders = tuple(
        sorted(
            sub for sub, rest in below.items()
            if channel_root(folder) == folder and channel_of(f"{folder}/{sub}") == channel
            and any("/" not in r and is_package(r) for r in rest)
        )
    )
    shown = _in_view(files, versions)
    _fill_sha256(store, folder, files, report, shown)
    for name in list(files):
        if name not in siblings and files[name].metadata_sha256:
            files[name] = FileRecord(sha256=files[name].sha256, upload_time=files[name].upload_time)
    unread = sorted(n for n in files if n in shown and n in siblings and not files[n].metadata_sha256)
    for name, extra in zip(unread, _read_metadata(store, folder, unread, report), strict=True):
        files[name] = files[name].merged(extra)
    return files, pages, folders


def _in_view(files: Mapping[str, FileRecord], versions: int) -> set[str]:
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


def _fill_sha256(
    store: Store, folder: str, files: Records, report: FolderReport, shown: set[str]
) -> None:
    unknown = [n for n, r in files.items() if r.sha256 is None and n in shown]
    if not unknown:
        return
    with ThreadPoolExecutor(HEAD_THREADS) as pool:
        infos = list(pool.map(lambda n: store.head(f"{folder}/{n}"), unknown))
    report.heads += len(unknown)
    for name, info in zip(unknown, infos, strict=True):
        if info is None:
            del files[name]  # deleted since the listing
        else:
            files[name] = files[name].with_sha256(info.sha256)


# --------------------------------------------------------------------------- pages


def _dependents(store: Store, folder: str, merged: Mapping[str, Manifest], opts: IndexOptions) -> list[str]:
    """Folders whose pages show this folder's files: the accelerator folders of a shared
    folder, and the channel root of an accelerator folder when roots aggregate."""
    out: list[str] = []
    root = channel_root(folder)
    if folder in opts.shared:
        manifest = merged.get(folder) or read_manifest(store, folder)
        out += [f"{folder}/{sub}" for sub in manifest.folders]
    if opts.aggregate and root != folder and folder.rpartition("/")[0] == root:
        out.append(root)
    return out


def _sources(store: Store, folder: str, own: Manifest, opts: IndexOptions) -> list[tuple[str, str, Manifest]]:
    """(relative prefix, folder, manifest) of the other folders this folder's pages list."""
    out: list[tuple[str, str, Manifest]] = []
    root = channel_root(folder)
    if root != folder and folder.rpartition("/")[0] == root and root in opts.shared:
        out.append(("../", root, read_manifest(store, root)))
    if opts.aggregate and root == folder:
        for sub in own.folders:
            out.append((f"{sub}/", f"{folder}/{sub}", read_manifest(store, f"{folder}/{sub}")))
    return out


def _write_pages(
    store: Store, folder: str, first: Manifest | None, opts: IndexOptions, report: FolderReport
) -> set[str]:
    """Render and write the folder's pages until the manifests they came from held still;
    returns the pages' paths (relative to the folder)."""
    for rounds in range(1, MAX_ROUNDS + 1):
        _pause(rounds)
        if rounds > 1:
            report.rounds += 1
        own = first if first is not None and rounds == 1 else read_manifest(store, folder)
        if own.files is None:
            # Never render pages from an unknown folder: they would hide what it holds.
            log.warning("%s/%s has no index manifest; run `nightly index --full`", store.url, folder)
            return set()
        sources = _sources(store, folder, own, opts)
        pages = render_folder(
            own.files or {},
            find_links_name=opts.flat_name(folder),
            sources=[Source(prefix, m.files or {}) for prefix, _, m in sources],
            versions=opts.versions,
        )
        # Project pages first, so the root never links to a page that does not exist yet.
        for rel in sorted(pages, key=lambda p: (p.count("/") == 0, p)):
            store.put_bytes(f"{folder}/{rel}", pages[rel], HTML_TYPE,
                            cache_control=caching.for_key(folder))
            report.pages_written += 1
        checks = [(folder, own.etag), *((f, m.etag) for _, f, m in sources)]
        if all(_current_etag(store, f"{f}/{MANIFEST_NAME}") == etag for f, etag in checks):
            return set(pages)
    raise PublishError(
        f"index of {store.url}/{folder}: the folder kept changing during {MAX_ROUNDS} rounds; "
        "run `nightly index` again"
    )


def _current_etag(store: Store, key: str) -> str | None:
    info = store.head(key)
    if info is not None and info.etag is not None:
        return info.etag
    got = store.get_bytes(key)  # a store that keeps no ETag in its metadata
    return got[1] if got else None
