"""Checks of a published tree: a file:// store after a night, or a download of a bucket.

- `check_published`: exactly the expected package objects, each whole (sha256 of the bytes,
  and of the store's metadata), the folder manifests, and the index pages parsed link by
  link against the objects.
- `check_tree`: the same on a folder holding a published tree.
- `page_links`, `html_problems`: an index page's links, and its strict well-formedness.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote

# The flat page of every folder these nights publish: `{project}_{channel}.html` (the default)
# for the project "demo" of tests/support/projects.py's configuration.
FIND_LINKS = "demo_nightly.html"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------------------- pages


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href") or ""
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._href, "".join(self._text)))
            self._href = None


def page_links(data: bytes) -> list[tuple[str, str]]:
    """(href, text) of every <a> of a page, entities decoded."""
    p = _Links()
    p.feed(data.decode("utf-8"))
    p.close()
    return p.links


_TAG = re.compile(r'<(/?)([a-z][a-z0-9]*)((?:\s+[a-z:-]+="[^"<>]*")*)\s*(/?)>')
_ENTITY = re.compile(r"&(?:amp|lt|gt|quot|#x27|#39|#\d+|#x[0-9a-fA-F]+);")
_VOID = {"meta", "br", "link", "img", "hr", "input"}


def html_problems(data: bytes) -> list[str]:
    """Strict well-formedness of an index page: every tag matched, attributes double-quoted,
    no raw `<`, `>` or stray `&` in text or attribute values (only entities), UTF-8."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return [f"not UTF-8: {e}"]
    problems: list[str] = []
    if not text.startswith("<!DOCTYPE html>"):
        problems.append("no <!DOCTYPE html>")
    text = text.removeprefix("<!DOCTYPE html>")
    stack: list[str] = []
    pos = 0
    for m in _TAG.finditer(text):
        problems += _text_problems(text[pos : m.start()], where=f"text before offset {m.start()}")
        closing, name, attrs, _ = m.groups()
        for value in re.findall(r'="([^"]*)"', attrs):
            problems += _text_problems(value, where=f"attribute of <{name}>")
        if closing:
            if not stack or stack[-1] != name:
                problems.append(f"</{name}> closes {stack[-1] if stack else 'nothing'}")
            else:
                stack.pop()
        elif name not in _VOID:
            stack.append(name)
        pos = m.end()
    problems += _text_problems(text[pos:], where="trailing text")
    if stack:
        problems.append(f"unclosed tags: {stack}")
    return problems


def _text_problems(chunk: str, *, where: str) -> list[str]:
    out = []
    for ch in "<>\"":
        if ch in chunk and not (ch == '"' and where.startswith("text")):
            out.append(f"raw {ch!r} in {where}: {chunk[:80]!r}")
    if "&" in _ENTITY.sub("", chunk):
        out.append(f"stray '&' in {where}: {chunk[:80]!r}")
    return out


# ---------------------------------------------------------------------------- the store


def store_objects(root: Path) -> dict[str, Path]:
    """Every object of a file:// store (key -> file), its reserved folder left out."""
    out = {}
    for p in root.rglob("*"):
        rel = p.relative_to(root).as_posix()
        if rel.split("/", 1)[0] == ".nightly-store" or not p.is_file():
            continue
        out[rel] = p
    return out


def is_package(name: str) -> bool:
    return name.endswith((".whl", ".zip", ".tar.gz", ".tar.bz2")) and not name.startswith(".")


def check_published(
    root: Path, expected: Mapping[str, str], *, find_links: str = FIND_LINKS
) -> None:
    """The file:// store at `root` holds exactly the package objects `expected` (key ->
    sha256), each whole (its bytes and the store's sha256 metadata), and every folder's
    manifest and pages agree with them."""
    from nightly.stores import FileStore

    objects = store_objects(root)
    packages = {k: p for k, p in objects.items() if is_package(k.rpartition("/")[2])}
    assert sorted(packages) == sorted(expected), "package objects differ from the builds' packages"
    store = FileStore(root)
    for key in packages:
        info = store.head(key)
        assert info is not None, key
        assert info.sha256 == expected[key], f"{key}: metadata {info}"
    check_tree(root, expected, find_links=find_links)


def check_tree(root: Path, expected: Mapping[str, str], *, find_links: str = FIND_LINKS) -> None:
    """A published tree on disk (a file:// store, or a download of a bucket): exactly the
    package objects `expected`, each whole, and per folder a manifest and pages that are
    the pages of exactly those files, parsed link by link."""
    from nightly.index import project_of, render_folder
    from nightly.index.manifest import decode_manifest

    objects = store_objects(root)
    packages = {k: p for k, p in objects.items() if is_package(k.rpartition("/")[2])}
    assert sorted(packages) == sorted(expected), "package objects differ from the builds' packages"
    for key, path in packages.items():
        assert sha256_of(path) == expected[key], f"{key}: partial or foreign bytes"
    folders: dict[str, dict[str, str]] = {}
    for key, sha in expected.items():
        folder, _, name = key.rpartition("/")
        folders.setdefault(folder, {})[name] = sha
    for folder, files in folders.items():
        manifest = decode_manifest((root / folder / ".index.json").read_bytes())
        assert manifest is not None, f"{folder}/.index.json is unreadable"
        assert manifest.digests() == files, f"{folder}/.index.json does not list the objects"
        pages = render_folder(manifest.files or {}, find_links_name=find_links)
        for rel, content in pages.items():
            page = root / folder / rel
            assert page.read_bytes() == content, f"{folder}/{rel} is not the manifest's page"
            assert not html_problems(content), (rel, html_problems(content))
        # Parsed, link by link: every listed file exists with the listed sha256, every
        # package object is listed, on the flat page and on its project's page.
        flat = _listed(root / folder / find_links, root / folder)
        assert flat == files, f"{folder}/{find_links} lists {flat}"
        projects = {href for href, _ in page_links((root / folder / "index.html").read_bytes())}
        listed: dict[str, str] = {}
        for href in projects:
            assert href.endswith("/"), href
            page = root / folder / unquote(href) / "index.html"
            listed.update(_listed(page, page.parent))
        with_project = {n: s for n, s in files.items() if project_of(n) is not None}
        assert listed == with_project, f"{folder}: the project pages list {listed}"
        dirs = {p.name + "/" for p in (root / folder).iterdir() if p.is_dir()}
        assert dirs == {unquote(h) for h in projects}, f"{folder}: stale project pages {dirs}"


def _listed(page: Path, base: Path) -> dict[str, str]:
    """{file name: sha256} of a page's links, each checked against the file it points at."""
    out = {}
    for href, text in page_links(page.read_bytes()):
        path, _, fragment = href.partition("#")
        target = (base / unquote(path)).resolve()
        name = target.name
        assert text == name, (href, text)
        assert fragment.startswith("sha256="), href
        sha = fragment.removeprefix("sha256=")
        assert target.is_file(), f"{page} links to {target}, which does not exist"
        assert sha256_of(target) == sha, f"{page}: {name} is listed with sha256 {sha}"
        out[name] = sha
    return out


def expected_objects(state: Mapping[str, Any], channel: str = "nightly") -> dict[str, str]:
    """key -> sha256 of every package of the succeeded builds of a state.json."""
    out = {}
    for entry in state["builds"].values():
        if entry.get("status") != "succeeded":
            continue
        for pkg in entry.get("packages", []):
            out[f"whl/{channel}/{entry['cuda']}/{pkg['name']}"] = pkg["sha256"]
    return out
