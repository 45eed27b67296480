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
    the `.metadata` files not yet recorded (one of those with the same bytes by the listing:
    `etags.py`); write the manifest and the pages. So a first full run on a bucket nightly
    did not write records everything, and later runs ask nothing.
    With a version cap only files the pages show are asked about. Given the whole listing
    (`nightly index --full`), what every folder needs is read first, by one bounded pool
    (`coldread.py`: `[publish] index_workers`, retries, progress, a checkpoint that an
    interrupted run resumes from), before any folder's manifest is touched.
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from nightly.index import caching, coldread
from nightly.index.coldread import CHECKPOINT_NAME, DEFAULT_WORKERS, Learned, ReadPool, Want
from nightly.index.folders import LIST_WORKERS, discover_folders, list_index_prefixes
from nightly.index.listing import scan_folder, wants_of
from nightly.index.manifest import (
    MANIFEST_NAME,
    FileRecord,
    Manifest,
    Records,
    as_record,
    decode_manifest,
    encode_manifest,
    read_manifest,
)
from nightly.index.names import is_package, parse_package, project_of
from nightly.index.pages import DEFAULT_FIND_LINKS, HTML_TYPE, Source, render_folder
from nightly.stores import ObjectInfo, PreconditionFailed, Store
from nightly.stores.base import cas_rounds
from nightly.stores.layout import channel_of, channel_root

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_FIND_LINKS",
    "HTML_TYPE",
    "LIST_WORKERS",
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

PAGE_WORKERS = 8  # a folder's project pages written at once

Known = Mapping[str, "str | FileRecord"]


@dataclass(frozen=True, kw_only=True)
class IndexOptions:
    """How pages are made. `find_links_name` is one name or a function of the channel;
    `shared` folders (e.g. `whl/nightly`) are listed in the pages of every accelerator folder
    of their channel; `aggregate` makes a channel root's pages list every accelerator
    folder's files too; `versions` (> 0) shows only each project's newest N versions;
    `workers` bounds the requests a full run makes at once (1: one after another)."""

    find_links_name: str | Callable[[str], str] = DEFAULT_FIND_LINKS
    shared: tuple[str, ...] = ()
    aggregate: bool = False
    versions: int = 0
    workers: int = DEFAULT_WORKERS

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
    metadata_shared: int = 0  # `.metadata` files not read: one with the same bytes was
    rounds: int = 0  # >1 when another writer changed the folder meanwhile
    missing_sha256: list[str] = field(default_factory=list)


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
    log_line: Callable[[str], None] | None = None,
) -> list[FolderReport]:
    """Rewrite the pages of `folders` and of the folders whose pages show them.

    `known[folder]` maps file name -> sha256 (or a whole record) recorded at upload,
    `removed[folder]` names files deleted by retention; `listing` (full runs) is a listing
    that covers the folders, so that they need not be listed again (and what they need is
    read at once, with progress to `log_line`). Raises PublishError; a folder that failed
    keeps its previous pages."""
    opts = options or IndexOptions(find_links_name=find_links_name)
    known = {k.strip("/"): v for k, v in (known or {}).items()}
    gone = {k.strip("/"): set(v) for k, v in (removed or {}).items()}
    asked = list(dict.fromkeys(f.strip("/") for f in folders))
    reports = {folder: FolderReport(folder, full) for folder in asked}
    pool = ReadPool(store, workers=opts.workers, log_line=log_line)
    bases: dict[str, Manifest] = {}
    learned: dict[str, dict[str, Learned]] = {}
    if full and listing is not None:
        bases, learned = _prefetch(store, asked, listing, known, opts.versions, pool)
    merged: dict[str, Manifest] = {}
    candidates: dict[str, set[str]] = {}  # folder -> project pages that may have gone
    for folder in asked:
        below = _below(listing, folder) if listing is not None else None
        merged[folder], candidates[folder] = _merge(
            store, folder, full=full, known=known.get(folder) or {}, removed=gone.get(folder, set()),
            report=reports[folder], listing=below, versions=opts.versions, pool=pool,
            base=bases.get(folder), learned=learned.get(folder, {}),
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
                    versions=opts.versions, pool=pool,
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
    for folder, report in reports.items():
        report.heads, report.metadata_reads = pool.reads[(folder, "sha256")], pool.reads[(folder, "metadata")]
        report.metadata_shared = pool.shared[folder]
    return [reports[f] for f in order]


def _prefetch(
    store: Store, folders: list[str], listing: Sequence[ObjectInfo], known: Mapping[str, Known],
    versions: int, pool: ReadPool,
) -> tuple[dict[str, Manifest], dict[str, dict[str, Learned]]]:
    """Before any folder is merged, read what every folder's pages need and nothing records
    (one pool for all of them, so a run's progress and concurrency span the whole bucket);
    returns the manifests read and what was learned, per folder."""
    bases: dict[str, Manifest] = {}
    learned: dict[str, dict[str, Learned]] = {}
    wants: list[Want] = []
    for folder in folders:
        bases[folder] = base = read_manifest(store, folder)
        objects = _below(listing, folder)
        saved: dict[str, Learned] = {}
        if any(o.key == f"{folder}/{CHECKPOINT_NAME}" for o in objects):
            saved = pool.load(folder, objects)  # what an interrupted run read
        records = {n: as_record(v) for n, v in (known.get(folder) or {}).items()}
        scan = scan_folder(folder, objects, base.files or {}, records, saved)
        learned[folder] = saved
        wants += wants_of(folder, scan, versions, saved)
    results = pool.read(wants)
    for folder, got in pool.learned(wants, results).items():
        learned[folder] = {**learned[folder], **got}
    return bases, learned


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
    pool: ReadPool,
    base: Manifest | None = None,
    learned: Mapping[str, Learned] | None = None,
) -> tuple[Manifest, set[str]]:
    """Bring the folder's manifest up to date (compare-and-swap, retried); returns it and,
    after a listing, the project pages found in the folder. `base` is the manifest as just
    read, `learned` what `_prefetch` read about the folder's objects."""
    manifest_key = f"{folder}/{MANIFEST_NAME}"
    resolved: Records | None = None
    # Compare-and-swap rounds with the stores' one backoff (cas_rounds raises when exhausted).
    for report.rounds in cas_rounds(f"index of {store.url}/{folder}", store.backoffs.store,
                                    retry="run `nightly index` again"):
        if base is None or report.rounds > 1:
            base = read_manifest(store, folder)
        pages: set[str] = set()
        folders = base.folders
        if full or base.files is None:
            report.full = True
            records = {n: as_record(v) for n, v in known.items()}
            objects = listing if listing is not None and report.rounds == 1 else None
            files, pages, folders = _from_listing(
                store, folder, base.files or {}, records, objects, versions, pool, learned or {}
            )
        else:
            if resolved is None:
                resolved = _resolve_known(folder, known, pool)
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
        pool.done(folder)
        report.files = len(files)
        report.missing_sha256 = sorted(n for n, r in files.items() if r.sha256 is None)
        return Manifest(files, etag, folders), pages
    raise AssertionError("unreachable: cas_rounds raises when exhausted")


def _register(store: Store, folder: str) -> None:
    """Record a new accelerator folder in its channel root's manifest (compare-and-swap)."""
    root = channel_root(folder)
    if root == folder or folder.rpartition("/")[0] != root:
        return
    name = folder.rpartition("/")[2]

    def add(current: bytes | None) -> bytes | None:
        base = decode_manifest(current) if current is not None else None
        files, folders = (base.files, base.folders) if base is not None else (None, ())
        if name in folders:
            return None
        # Files None: nobody listed the root yet; its next run lists it, so that what it
        # holds from before (an adopted bucket) is never hidden by an empty record.
        return encode_manifest(files, (*folders, name))

    store.update(f"{root}/{MANIFEST_NAME}", add, "application/json",
                 what=f"index of {store.url}/{root}: recording {name}/")


def _resolve_known(folder: str, known: Known, pool: ReadPool) -> Records:
    """Records of what the caller knows; for a wheel known only by its sha256, its
    `.metadata` file is read (one small GET) so that its pages can offer PEP 658 metadata."""
    out = {n: as_record(v) for n, v in known.items()}
    wheels = [n for n, v in known.items() if isinstance(v, str) and n.endswith(".whl")]
    wants = [Want(folder, n, sha256=False, metadata=True) for n in wheels]
    coldread.apply(out, folder, pool.read(wants))
    return out


def _from_listing(
    store: Store,
    folder: str,
    recorded: Mapping[str, FileRecord],
    known: Mapping[str, FileRecord],
    objects: list[ObjectInfo] | None,
    versions: int,
    pool: ReadPool,
    learned: Mapping[str, Learned],
) -> tuple[Records, set[str], tuple[str, ...]]:
    """The folder's files from a listing, with what is still unknown about the ones in view
    read now; the project pages found and the accelerator sub-folders."""
    if objects is None:
        objects = list(store.list(folder + "/"))
    scan = scan_folder(folder, objects, recorded, known, learned)
    wants = wants_of(folder, scan, versions, learned)
    coldread.apply(scan.files, folder, pool.read(wants))
    return scan.files, scan.pages, scan.folders


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
    for rounds in cas_rounds(f"index of {store.url}/{folder}", store.backoffs.store,
                             retry="run `nightly index` again"):
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
        _put_pages(store, folder, pages, opts.workers)
        report.pages_written += len(pages)
        checks = [(folder, own.etag), *((f, m.etag) for _, f, m in sources)]
        if all(_current_etag(store, f"{f}/{MANIFEST_NAME}") == etag for f, etag in checks):
            return set(pages)
    raise AssertionError("unreachable: cas_rounds raises when exhausted")


def _put_pages(store: Store, folder: str, pages: Mapping[str, bytes], workers: int) -> None:
    """Project pages first (side by side), so that the root never links to a page that does
    not exist yet; then the folder's own."""

    def put(rel: str) -> None:
        store.put_bytes(f"{folder}/{rel}", pages[rel], HTML_TYPE, cache_control=caching.for_key(folder))

    projects = sorted(p for p in pages if "/" in p)
    with ThreadPoolExecutor(max(1, min(workers, PAGE_WORKERS, len(projects)))) as pool:
        list(pool.map(put, projects))
    for rel in sorted(set(pages) - set(projects)):
        put(rel)


def _current_etag(store: Store, key: str) -> str | None:
    info = store.head(key)
    if info is not None and info.etag is not None:
        return info.etag
    got = store.get_bytes(key)  # a store that keeps no ETag in its metadata
    return got[1] if got else None
