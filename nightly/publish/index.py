"""Index pages for published folders: a PEP 503 simple index and a flat find-links page.

Per folder (e.g. `whl/nightly/cu126`) three kinds of objects are written:

- `<folder>/index.html`            the projects (PEP 503 normalised names), linking `<project>/`
- `<folder>/<project>/index.html`  that project's files, `../<file>#sha256=<hex>`
- `<folder>/<find-links name>`     every package of the folder (`pip install -f`)
- `<folder>/.index.json`           the manifest: file name -> sha256, the pages' only input

Links are relative and percent-encoded (`+` is `%2B`); names are HTML-escaped.

How a folder is regenerated
    Incremental (the default): 1 GET of the manifest, merge the checksums recorded at upload,
    write the manifest back, write the pages, 1 HEAD of the manifest. No request per object.
    A folder without a (valid) manifest is rebuilt in full instead, never from a partial one.
    Full (`--full`): list the folder; take each file's sha256 from the caller's records or
    the manifest, HEAD only the objects whose sha256 is still unknown; write the manifest
    and the pages; delete project pages of projects that have gone.
    Pages are rendered completely in memory from a complete manifest before anything is
    written, so a failed listing or GET raises before a single page is touched.

Why several machines may regenerate at once without losing entries
    1. The manifest is only changed by compare-and-swap: a conditional PUT (If-Match on the
       ETag read, or If-None-Match: * when creating it; S3 has supported both since 2024,
       and the file:// store does the same under a flock). The loser of a race gets
       PreconditionFailed, re-reads and re-merges, so no recorded upload is ever dropped.
       An upload writes its object before it records it, and a full rebuild that loses the
       swap lists again, so a rebuild cannot drop a concurrent upload either.
    2. Pages are a pure function of the manifest, and each page is one whole-object PUT.
    3. After writing all of a folder's pages, a writer HEADs the manifest; if its ETag is no
       longer the one the pages were rendered from, it renders and writes them again.
       So the last write of any page was followed by a check that saw the manifest it came
       from; any later manifest change is followed by its writer's own page writes, so once
       writers finish, every page matches the final manifest.
"""

from __future__ import annotations

import html
import json
import logging
import random
import re
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import quote

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from nightly.errors import PublishError
from nightly.publish.layout import INDEX_PREFIXES
from nightly.publish.stores import SHA256_RE, PreconditionFailed, Store

log = logging.getLogger(__name__)

MANIFEST_NAME = ".index.json"
DEFAULT_FIND_LINKS = "torch_nightly.html"
PACKAGE_SUFFIXES = (".whl", ".zip", ".tar.gz", ".tar.bz2")
HTML_TYPE = "text/html; charset=utf-8"
MAX_ROUNDS = 12  # rounds of "write pages, find the manifest changed" before giving up
BACKOFF_S = 0.05  # first pause between rounds; doubles, jittered, so racing writers spread out
HEAD_THREADS = 16

_VALID_PROJECT = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)
_LOOSE_NAME = re.compile(r"^(?P<name>.+?)-\d")

Files = dict[str, str | None]  # file name -> sha256 hex (None when unknown)


# --------------------------------------------------------------------------- names


def is_package(name: str) -> bool:
    return "/" not in name and not name.startswith(".") and name.endswith(PACKAGE_SUFFIXES)


def parse_package(filename: str) -> tuple[str, Version] | None:
    """(normalised project, version) of a wheel, sdist or libtorch archive; None if not one."""
    try:
        if filename.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(filename)
            return str(name), version
        if filename.endswith((".zip", ".tar.gz")):
            # libtorch-shared-with-deps-2.1.0.dev20230801+cpu.zip parses like an sdist.
            name, version = parse_sdist_filename(filename)
            return str(name), version
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        pass
    return None


def project_of(filename: str) -> str | None:
    """The PEP 503 project a file belongs to, or None (then it is only on the flat page)."""
    parsed = parse_package(filename)
    if parsed is not None:
        return parsed[0]
    # Tolerate names packaging rejects (e.g. a non-PEP 440 version) when the project part is
    # a valid project name; anything else cannot be served by a simple index anyway.
    m = _LOOSE_NAME.match(filename)
    if m and _VALID_PROJECT.match(m["name"]):
        return str(canonicalize_name(m["name"]))
    return None


# --------------------------------------------------------------------------- rendering


def _link(prefix: str, name: str, sha256: str | None) -> str:
    href = prefix + quote(name, safe="")
    if sha256 and SHA256_RE.fullmatch(sha256):
        href += f"#sha256={sha256}"
    return f'    <a href="{html.escape(href)}">{html.escape(name)}</a><br>\n'


def _page(title: str, links: Iterable[str]) -> bytes:
    return (
        "<!DOCTYPE html>\n<html>\n  <head>\n"
        '    <meta name="pypi:repository-version" content="1.0">\n'
        f"    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n"
        f"    <h1>{html.escape(title)}</h1>\n{''.join(links)}  </body>\n</html>\n"
    ).encode()


def render_folder(
    files: Mapping[str, str | None], *, find_links_name: str = DEFAULT_FIND_LINKS
) -> dict[str, bytes]:
    """All pages of one folder, as {path relative to the folder: content}.

    A pure function of `files` (name -> sha256): the same listing always gives the same
    bytes, which is what makes concurrent regeneration converge.
    """
    names = sorted(n for n in files if is_package(n))
    projects: dict[str, list[str]] = {}
    for name in names:
        project = project_of(name)
        if project is not None:
            projects.setdefault(project, []).append(name)
    pages: dict[str, bytes] = {}
    for project, members in sorted(projects.items()):
        pages[f"{project}/index.html"] = _page(
            f"Links for {project}", (_link("../", n, files[n]) for n in members)
        )
    pages["index.html"] = _page(
        "Simple index",
        (
            f'    <a href="{html.escape(quote(p, safe=""))}/">{html.escape(p)}</a><br>\n'
            for p in sorted(projects)
        ),
    )
    pages[find_links_name] = _page("Links", (_link("", n, files[n]) for n in names))
    return pages


# --------------------------------------------------------------------------- manifest


@dataclass(frozen=True)
class Manifest:
    files: Files | None  # None: absent or unreadable (then a full rebuild is needed)
    etag: str | None  # None: absent


def _encode_manifest(files: Mapping[str, str | None]) -> bytes:
    body = {"format": 1, "files": dict(sorted(files.items()))}
    return json.dumps(body, separators=(",", ":")).encode()


def _decode_manifest(data: bytes) -> Files | None:
    try:
        body = json.loads(data)
        raw = body["files"]
        if body.get("format") != 1 or not isinstance(raw, dict):
            return None
    except (ValueError, KeyError, TypeError):
        return None
    files: Files = {}
    for name, sha in raw.items():
        if not isinstance(name, str) or not is_package(name):
            return None
        files[name] = sha if isinstance(sha, str) and SHA256_RE.fullmatch(sha) else None
    return files


def read_manifest(store: Store, folder: str) -> Manifest:
    got = store.get_bytes(f"{folder}/{MANIFEST_NAME}")
    if got is None:
        return Manifest(None, None)
    files = _decode_manifest(got[0])
    if files is None:
        log.warning("%s/%s/%s is unreadable; rebuilding it", store.url, folder, MANIFEST_NAME)
    return Manifest(files, got[1])


# --------------------------------------------------------------------------- regeneration


@dataclass
class FolderReport:
    folder: str
    full: bool  # rebuilt from a listing (asked for, or no usable manifest)
    files: int = 0
    pages_written: int = 0
    pages_deleted: int = 0
    heads: int = 0  # objects whose sha256 had to be asked for
    rounds: int = 0  # >1 when another writer changed the folder meanwhile
    missing_sha256: list[str] = field(default_factory=list)


def regenerate(
    store: Store,
    folders: Iterable[str],
    *,
    full: bool,
    known: Mapping[str, Mapping[str, str]] | None = None,
    removed: Mapping[str, Iterable[str]] | None = None,
    find_links_name: str = DEFAULT_FIND_LINKS,
) -> list[FolderReport]:
    """Rewrite the pages of `folders`; `known[folder]` maps file name -> sha256 recorded at
    upload, `removed[folder]` names files deleted by retention. Raises PublishError; a folder
    that failed keeps its previous pages."""
    known, removed = known or {}, removed or {}
    reports = []
    for folder in folders:
        clean = folder.strip("/")
        reports.append(
            _regenerate_folder(
                store,
                clean,
                full=full,
                known=known.get(folder) or known.get(clean) or {},
                removed=set(removed.get(folder) or removed.get(clean) or ()),
                find_links_name=find_links_name,
            )
        )
    return reports


def discover_folders(store: Store, prefixes: Iterable[str] = INDEX_PREFIXES) -> list[str]:
    """Every folder under `prefixes` that directly holds a package (one full listing)."""
    found: set[str] = set()
    for prefix in prefixes:
        for obj in store.list(prefix):
            folder, _, name = obj.key.rpartition("/")
            if folder and is_package(name):
                found.add(folder)
    return sorted(found)


def _regenerate_folder(
    store: Store,
    folder: str,
    *,
    full: bool,
    known: Mapping[str, str],
    removed: set[str],
    find_links_name: str,
) -> FolderReport:
    report = FolderReport(folder, full)
    manifest_key = f"{folder}/{MANIFEST_NAME}"
    merged = False  # once our change is in the manifest, later rounds only re-render
    for report.rounds in range(1, MAX_ROUNDS + 1):
        if report.rounds > 1:
            time.sleep(min(BACKOFF_S * 2 ** (report.rounds - 2), 2.0) * random.uniform(0.5, 1.5))
        base = read_manifest(store, folder)
        stale_pages: set[str] = set()
        if merged and base.files is not None:
            files = base.files
        elif full or base.files is None:
            report.full = True
            files, stale_pages = _from_listing(store, folder, base.files or {}, known, report)
        else:
            files = {**base.files, **known}
            for name in removed:
                files.pop(name, None)
        etag = base.etag
        if files != base.files:
            try:
                etag = store.put_bytes(
                    manifest_key,
                    _encode_manifest(files),
                    "application/json",
                    if_match=base.etag,
                    if_none_match=base.etag is None,
                )
            except PreconditionFailed:
                continue  # someone else changed it after we read it: read and merge again
        merged = True
        pages = render_folder(files, find_links_name=find_links_name)
        # Project pages first, so the root never links to a page that does not exist yet.
        for rel in sorted(pages, key=lambda p: (p.count("/") == 0, p)):
            store.put_bytes(f"{folder}/{rel}", pages[rel], HTML_TYPE)
            report.pages_written += 1
        for rel in sorted(stale_pages - set(pages)):
            store.delete(f"{folder}/{rel}")
            report.pages_deleted += 1
        if _current_etag(store, manifest_key) == etag:
            report.files = len(files)
            report.missing_sha256 = sorted(n for n, s in files.items() if s is None)
            return report
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


def _from_listing(
    store: Store,
    folder: str,
    recorded: Mapping[str, str | None],
    known: Mapping[str, str],
    report: FolderReport,
) -> tuple[Files, set[str]]:
    """The folder's files from a listing (checksums from records, else one HEAD each),
    and the project pages that exist, so that pages of vanished projects can be deleted."""
    files: Files = {}
    pages: set[str] = set()
    for obj in store.list(folder + "/"):
        rel = obj.key[len(folder) + 1 :]
        if is_package(rel):
            files[rel] = known.get(rel) or recorded.get(rel) or obj.sha256
        elif rel.count("/") == 1 and rel.endswith("/index.html"):
            pages.add(rel)
    unknown = [n for n, s in files.items() if s is None]
    if unknown:
        with ThreadPoolExecutor(HEAD_THREADS) as pool:
            infos = list(pool.map(lambda n: store.head(f"{folder}/{n}"), unknown))
        report.heads += len(unknown)
        for name, info in zip(unknown, infos, strict=True):
            if info is None:
                del files[name]  # deleted since the listing
            else:
                files[name] = info.sha256
    return files, pages
