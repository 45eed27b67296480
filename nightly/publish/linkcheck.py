"""`nightly validate`'s check of the index against the bytes: every link to a package in its
folder's pages (the find-links page and the project's PEP 503 page) carries `#sha256=<hex>`,
and that must be the sha256 of the bytes the store serves for it. A link that promises other
bytes is named as a sha256 mismatch, with both hashes.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Sequence
from html.parser import HTMLParser
from urllib.parse import unquote, urljoin

from nightly.index.names import project_of

PAGE_MAX = 64 << 20  # an index page is never bigger than this


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v]


def listed(page_url: str, name: str, timeout_s: float) -> list[str]:
    """The `#sha256=` of each link to `name` on the page at `page_url` ([] when the page
    cannot be read within `timeout_s`: whether it links the file at all is pip's check)."""
    try:
        with urllib.request.urlopen(page_url, timeout=timeout_s) as r:
            data = r.read(PAGE_MAX + 1)
    except (urllib.error.URLError, OSError, ValueError):
        return []
    if len(data) > PAGE_MAX:
        return []
    parser = _Links()
    parser.feed(data.decode("utf-8", errors="replace"))
    out = []
    for href in parser.hrefs:
        path, _, fragment = urljoin(page_url, href).partition("#")
        if unquote(path.rsplit("/", 1)[-1]) == name and fragment.startswith("sha256="):
            out.append(fragment.removeprefix("sha256=").lower())
    return out


def mismatch(base: str, key: str, name: str, got: str, find_links: Sequence[str], *,
             timeout_s: float) -> str | None:
    """A sha256 mismatch between a link to `name` (store key `key`, read under `base`) and
    `got`, the sha256 of the bytes downloaded from it; None when every link agrees. Each
    page may take `timeout_s` ([external_timeouts] page_fetch)."""
    folder = key.rpartition("/")[0]
    pages = [f"{folder}/{flat}" for flat in find_links]  # the channels' find-links pages
    project = project_of(name)
    if project is not None:
        pages.append(f"{folder}/{project}/index.html")
    for page in pages:
        for sha in listed(f"{base}/{page}", name, timeout_s):
            if sha != got:
                return (f"sha256 mismatch: {page} links {name} with sha256 {sha[:16]}..., the "
                        f"bytes it serves hash to {got[:16]}...")
    return None


__all__ = ["listed", "mismatch"]
