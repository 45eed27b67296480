"""Rendering the index pages of one folder (pure functions of what the manifests record).

Per folder three kinds of pages:

- `<folder>/index.html`            the projects (PEP 503 normalised names), linking `<project>/`
- `<folder>/<project>/index.html`  that project's files, `../<file>#sha256=<hex>`
- `<folder>/<find-links name>`     every package of the folder (`pip install -f`)

Links are relative and percent-encoded (`+` is `%2B`); names and attribute values are
HTML-escaped. A link carries, when known, `data-requires-python`, PEP 658/714's
`data-dist-info-metadata` and `data-core-metadata` (`sha256=<hex>` of `<file>.metadata`,
which clients fetch instead of the wheel to resolve) and `data-upload-time` (PEP 700).

A folder's pages may also list files of other folders (`Source`): a shared dependency folder
(`whl/nightly/` for `whl/nightly/cu126/`, linked as `../<file>`) or, for an aggregate index,
the accelerator folders below it (`cu126/<file>`). A file name listed by the folder itself
hides the same name from other sources.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote

from packaging.version import Version

from nightly.index.manifest import FileRecord, as_record
from nightly.index.names import is_package, parse_package, project_of
from nightly.stores import SHA256_RE

DEFAULT_FIND_LINKS = "torch_nightly.html"
HTML_TYPE = "text/html; charset=utf-8"


@dataclass(frozen=True)
class Source:
    """Files of another folder shown in this folder's pages; `prefix` is the relative path
    from this folder to that one, with a trailing slash (`../`, `cu126/`)."""

    prefix: str
    files: Mapping[str, FileRecord]


@dataclass(frozen=True)
class _Entry:
    path: str  # relative to the folder, not yet quoted per segment: "../x.whl", "cu126/x.whl"
    name: str
    record: FileRecord


PROVENANCE_SUFFIX = ".provenance.json"  # nightly.provenance.SUFFIX


def _href(path: str) -> str:
    return "/".join(quote(part, safe="") if part not in ("", "..") else part for part in path.split("/"))


def _link(prefix: str, entry: _Entry) -> str:
    record = entry.record
    href = prefix + _href(entry.path)
    if record.sha256 and SHA256_RE.fullmatch(record.sha256):
        href += f"#sha256={record.sha256}"
    attrs = ""
    if record.requires_python:
        attrs += f' data-requires-python="{html.escape(record.requires_python)}"'
    if record.metadata_sha256 and SHA256_RE.fullmatch(record.metadata_sha256):
        digest = f"sha256={record.metadata_sha256}"
        attrs += f' data-dist-info-metadata="{digest}" data-core-metadata="{digest}"'
    if record.upload_time:
        attrs += f' data-upload-time="{html.escape(record.upload_time)}"'
    line = f'    <a href="{html.escape(href)}"{attrs}>{html.escape(entry.name)}</a>'
    if record.provenance_sha256 and SHA256_RE.fullmatch(record.provenance_sha256):
        # Its signed provenance next to it (`nightly verify`); installers skip the .json link.
        prov = f"{prefix}{_href(entry.path)}{PROVENANCE_SUFFIX}#sha256={record.provenance_sha256}"
        line += f' <a href="{html.escape(prov)}">{html.escape(entry.name + PROVENANCE_SUFFIX)}</a>'
    return line + "<br>\n"


def _page(title: str, links: Iterable[str]) -> bytes:
    return (
        "<!DOCTYPE html>\n<html>\n  <head>\n"
        '    <meta name="pypi:repository-version" content="1.0">\n'
        f"    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n"
        f"    <h1>{html.escape(title)}</h1>\n{''.join(links)}  </body>\n</html>\n"
    ).encode()


def _entries(files: Mapping[str, str | FileRecord | None], sources: Sequence[Source]) -> list[_Entry]:
    seen: set[str] = set()
    out: list[_Entry] = []
    own = {n: as_record(v) for n, v in files.items()}
    for prefix, records in [("", own)] + [(s.prefix, s.files) for s in sources]:
        for name in sorted(records):
            if is_package(name) and name not in seen:
                seen.add(name)
                out.append(_Entry(prefix + name, name, records[name]))
    return out


def _newest(entries: list[_Entry], versions: int) -> list[_Entry]:
    """Only the files of each project's newest `versions` versions (0: all)."""
    if versions <= 0:
        return entries
    by_project: dict[str, set[Version]] = {}
    for e in entries:
        parsed = parse_package(e.name)
        if parsed is not None:
            by_project.setdefault(parsed[0], set()).add(parsed[1])
    keep = {p: set(sorted(vs, reverse=True)[:versions]) for p, vs in by_project.items()}
    out = []
    for e in entries:
        parsed = parse_package(e.name)
        if parsed is None or parsed[1] in keep[parsed[0]]:
            out.append(e)
    return out


def render_folder(
    files: Mapping[str, str | FileRecord | None],
    *,
    find_links_name: str = DEFAULT_FIND_LINKS,
    sources: Sequence[Source] = (),
    versions: int = 0,
) -> dict[str, bytes]:
    """All pages of one folder, as {path relative to the folder: content}.

    A pure function of its arguments (file name -> sha256 or record): the same listing
    always gives the same bytes, which is what makes concurrent regeneration converge.
    """
    entries = _newest(_entries(files, sources), versions)
    entries.sort(key=lambda e: (e.name, e.path))
    projects: dict[str, list[_Entry]] = {}
    for e in entries:
        project = project_of(e.name)
        if project is not None:
            projects.setdefault(project, []).append(e)
    pages: dict[str, bytes] = {}
    for project, members in sorted(projects.items()):
        pages[f"{project}/index.html"] = _page(f"Links for {project}", (_link("../", e) for e in members))
    pages["index.html"] = _page(
        "Simple index",
        (
            f'    <a href="{html.escape(quote(p, safe=""))}/">{html.escape(p)}</a><br>\n'
            for p in sorted(projects)
        ),
    )
    pages[find_links_name] = _page("Links", (_link("", e) for e in entries))
    return pages
