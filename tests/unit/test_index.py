"""Index pages: rendering (pure), and regeneration against a file:// store, including
failures that must not write a page and writers racing each other."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nightly.errors import PublishError
from nightly.index import (
    MANIFEST_NAME,
    parse_package,
    project_of,
    read_manifest,
    regenerate,
    render_folder,
)
from nightly.stores import FileStore, ObjectInfo

FOLDER = "whl/nightly/cpu"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Anchors(HTMLParser):
    """Collects (href, text) of every link, and checks tags are balanced."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[tuple[str, str]] = []
        self.stack: list[str] = []
        self._href: str | None = None
        self._text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("br", "meta"):
            return
        self.stack.append(tag)
        if tag == "a":
            self._href, self._text = dict(attrs)["href"], ""

    def handle_endtag(self, tag: str) -> None:
        assert self.stack.pop() == tag
        if tag == "a":
            assert self._href is not None
            self.links.append((self._href, self._text))

    def handle_data(self, data: str) -> None:
        self._text += data


def anchors(page: bytes) -> list[tuple[str, str]]:
    parser = Anchors()
    parser.feed(page.decode())
    parser.close()
    assert parser.stack == []
    return parser.links


FILES = {
    "demo_pkg-1.0.0.dev20261120-py3-none-any.whl": sha("a"),
    "demo_pkg-1.0.0.dev20261121+cpu-py3-none-any.whl": sha("b"),
    "Other.Project-0.1-py3-none-any.whl": sha("c"),
    "libtorch-shared-with-deps-1.0.0.dev20261121+cpu.zip": sha("d"),
    "libtorch-shared-with-deps-latest.zip": None,
}


def test_render_folder_layout() -> None:
    pages = render_folder(FILES)
    assert set(pages) == {
        "index.html",
        "demo-pkg/index.html",
        "other-project/index.html",
        "libtorch-shared-with-deps/index.html",
        "torch_nightly.html",
    }
    assert anchors(pages["index.html"]) == [
        ("demo-pkg/", "demo-pkg"),
        ("libtorch-shared-with-deps/", "libtorch-shared-with-deps"),
        ("other-project/", "other-project"),
    ]
    assert anchors(pages["demo-pkg/index.html"]) == [
        (f"../demo_pkg-1.0.0.dev20261120-py3-none-any.whl#sha256={sha('a')}",
         "demo_pkg-1.0.0.dev20261120-py3-none-any.whl"),
        (f"../demo_pkg-1.0.0.dev20261121%2Bcpu-py3-none-any.whl#sha256={sha('b')}",
         "demo_pkg-1.0.0.dev20261121+cpu-py3-none-any.whl"),
    ]  # fmt: skip
    flat = anchors(pages["torch_nightly.html"])
    assert [text for _, text in flat] == sorted(FILES)
    assert ("libtorch-shared-with-deps-latest.zip", "libtorch-shared-with-deps-latest.zip") in flat
    for _, page in pages.items():
        for href, _ in anchors(page):
            assert "://" not in href
            assert not href.startswith("/")
            assert "+" not in href


def test_find_links_name_is_configurable() -> None:
    pages = render_folder(FILES, find_links_name="demo_nightly.html")
    assert "demo_nightly.html" in pages
    assert "torch_nightly.html" not in pages


def test_render_is_a_pure_function_of_the_listing() -> None:
    reordered = dict(reversed(list(FILES.items())))
    assert render_folder(reordered) == render_folder(FILES)


def test_non_packages_and_bad_checksums() -> None:
    files = {
        "index.html": sha("x"),
        MANIFEST_NAME: sha("x"),
        "demo-1.0-py3-none-any.whl": "not-a-sha256",
        "demo-1.1-py3-none-any.whl": 'abc" onmouseover="x',
    }
    pages = render_folder(files)
    assert [h for h, _ in anchors(pages["torch_nightly.html"])] == [
        "demo-1.0-py3-none-any.whl",
        "demo-1.1-py3-none-any.whl",
    ]


def test_empty_folder_still_renders_valid_pages() -> None:
    pages = render_folder({})
    assert set(pages) == {"index.html", "torch_nightly.html"}
    assert anchors(pages["index.html"]) == []


NASTY = [
    'we<ird "&" pkg-1.0-py3-none-any.whl',
    "demo-1.0-py3-none-any <b>&amp; x'y.whl",
    "demo-2.0+local-py3-none-any.whl",
    "a%20b#c?d-1.0.tar.gz",
    "spaces in name-1.0.zip",
]


@pytest.mark.parametrize("name", NASTY)
def test_escaping_round_trips(name: str) -> None:
    pages = render_folder({name: sha(name)})
    flat = anchors(pages["torch_nightly.html"])
    assert len(flat) == 1
    href, text = flat[0]
    assert text == name
    assert href.endswith(f"#sha256={sha(name)}")
    assert unquote(href.split("#", 1)[0]) == name
    for rel, page in pages.items():
        for href, text in anchors(page):
            if rel.endswith("/index.html"):
                assert unquote(href.split("#", 1)[0]) == "../" + text


def test_nasty_name_with_valid_project_is_in_the_simple_index() -> None:
    pages = render_folder({NASTY[1]: sha("n")})
    assert [t for _, t in anchors(pages["demo/index.html"])] == [NASTY[1]]
    # An invalid project name never becomes a folder; it is only on the flat page.
    assert set(render_folder({NASTY[0]: None})) == {"index.html", "torch_nightly.html"}


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40))
def test_any_name_round_trips(stem: str) -> None:
    name = stem.replace("/", "_").lstrip(".") + "-1.0-py3-none-any.whl"
    links = anchors(render_folder({name: None})["torch_nightly.html"])
    assert links == [(links[0][0], name)]
    assert unquote(links[0][0]) == name


def test_parse_package() -> None:
    assert parse_package("demo_pkg-1.0.0.dev20261121+cpu-py3-none-any.whl") is not None
    assert str(parse_package("libtorch-shared-with-deps-2.6.0.dev20261121+cpu.zip")) == (
        "('libtorch-shared-with-deps', <Version('2.6.0.dev20261121+cpu')>)"
    )
    assert parse_package("libtorch-shared-with-deps-latest.zip") is None
    assert parse_package("index.html") is None
    assert project_of("Other.Project-0.1-py3-none-any.whl") == "other-project"
    assert project_of("demo-notaversion-py3-none-any.whl") is None


# --------------------------------------------------------------------------- regeneration


def put(store: FileStore, tmp_path: Path, name: str, folder: str = FOLDER) -> str:
    data = f"content of {name}".encode()
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    store.put(f"{folder}/{name}", src, digest)
    return digest


def wheel(n: int) -> str:
    return f"demo-1.0.0.dev202611{n:02d}-py3-none-any.whl"


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path / "mirror")


def page(store: FileStore, rel: str) -> bytes:
    return (store.root / FOLDER / rel).read_bytes()


def test_full_then_incremental(store: FileStore, tmp_path: Path) -> None:
    digests = {wheel(n): put(store, tmp_path, wheel(n)) for n in range(1, 6)}
    [report] = regenerate(store, [FOLDER], full=True)
    assert (report.full, report.files, report.heads, report.rounds) == (True, 5, 5, 1)
    assert read_manifest(store, FOLDER).digests() == digests
    records = read_manifest(store, FOLDER).files or {}
    assert page(store, "demo/index.html") == render_folder(records)["demo/index.html"]

    new = {wheel(n): put(store, tmp_path, wheel(n)) for n in (6, 7)}
    before = store.requests
    [report] = regenerate(store, [FOLDER], full=False, known={FOLDER: new})
    # 1 GET + 1 manifest PUT + 3 page PUTs + 1 HEAD: nothing per object but, for each new
    # wheel known only by its sha256, one GET of its `.metadata` (none here).
    assert store.requests - before == 6 + len(new)
    assert (report.full, report.files, report.heads, report.metadata_reads) == (False, 7, 0, 2)
    records = read_manifest(store, FOLDER).files or {}
    assert records.keys() == digests.keys() | new.keys()
    assert page(store, "torch_nightly.html") == render_folder(records)["torch_nightly.html"]

    # --full with the manifest in place asks nothing per object either.
    [report] = regenerate(store, [FOLDER], full=True)
    assert report.heads == 0
    assert report.pages_written == 3


def test_full_removes_pages_of_vanished_projects(store: FileStore, tmp_path: Path) -> None:
    put(store, tmp_path, "gone-1.0-py3-none-any.whl")
    put(store, tmp_path, wheel(1))
    regenerate(store, [FOLDER], full=True)
    assert (store.root / FOLDER / "gone" / "index.html").exists()
    store.delete(f"{FOLDER}/gone-1.0-py3-none-any.whl")
    [report] = regenerate(store, [FOLDER], full=True)
    assert report.pages_deleted == 1
    assert not (store.root / FOLDER / "gone" / "index.html").exists()


def test_incremental_without_manifest_rebuilds_in_full(store: FileStore, tmp_path: Path) -> None:
    old = {wheel(n): put(store, tmp_path, wheel(n)) for n in (1, 2)}
    new = {wheel(3): put(store, tmp_path, wheel(3))}
    [report] = regenerate(store, [FOLDER], full=False, known={FOLDER: new})
    assert report.full
    assert report.heads == 2  # only the two it had no record of
    assert read_manifest(store, FOLDER).digests() == old | new


def test_corrupt_manifest_is_rebuilt(store: FileStore, tmp_path: Path) -> None:
    digests = {wheel(n): put(store, tmp_path, wheel(n)) for n in (1, 2)}
    store.put_bytes(f"{FOLDER}/{MANIFEST_NAME}", b'{"format": 1, "files": [}', "application/json")
    [report] = regenerate(store, [FOLDER], full=False, known={})
    assert report.full
    assert read_manifest(store, FOLDER).digests() == digests


def test_removed_files_leave_the_pages(store: FileStore, tmp_path: Path) -> None:
    digests = {wheel(n): put(store, tmp_path, wheel(n)) for n in (1, 2, 3)}
    regenerate(store, [FOLDER], full=True)
    store.delete(f"{FOLDER}/{wheel(1)}")
    regenerate(store, [FOLDER], full=False, removed={FOLDER: [wheel(1)]})
    del digests[wheel(1)]
    records = read_manifest(store, FOLDER).files or {}
    assert records.keys() == digests.keys()
    assert page(store, "torch_nightly.html") == render_folder(records)["torch_nightly.html"]


class FlakyStore(FileStore):
    """A file store whose listing breaks after a few objects, or whose writes fail."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.fail_list_after: int | None = None
        self.fail_writes_to: str | None = None

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        for n, obj in enumerate(super().list(prefix)):
            if self.fail_list_after is not None and n >= self.fail_list_after:
                raise PublishError("list: connection reset")
            yield obj

    def put_bytes(self, key: str, data: bytes, content_type: str, **kw: Any) -> str:
        if self.fail_writes_to and key.endswith(self.fail_writes_to):
            raise PublishError(f"write {key}: connection reset")
        return super().put_bytes(key, data, content_type, **kw)


def test_failed_listing_writes_no_page(tmp_path: Path) -> None:
    store = FlakyStore(tmp_path / "mirror")
    for n in range(1, 6):
        put(store, tmp_path, wheel(n))
    regenerate(store, [FOLDER], full=True)
    before = {p: page(store, p) for p in ("index.html", "demo/index.html", "torch_nightly.html")}
    put(store, tmp_path, wheel(6))
    store.fail_list_after = 3
    with pytest.raises(PublishError, match="connection reset"):
        regenerate(store, [FOLDER], full=True)
    assert {p: page(store, p) for p in before} == before


def test_failed_manifest_write_writes_no_page(tmp_path: Path) -> None:
    store = FlakyStore(tmp_path / "mirror")
    put(store, tmp_path, wheel(1))
    regenerate(store, [FOLDER], full=True)
    before = page(store, "torch_nightly.html")
    store.fail_writes_to = MANIFEST_NAME
    with pytest.raises(PublishError):
        regenerate(store, [FOLDER], full=False, known={FOLDER: {wheel(2): sha("2")}})
    assert page(store, "torch_nightly.html") == before


# --------------------------------------------------------------------------- races


def test_many_writers_lose_nothing(store: FileStore, tmp_path: Path) -> None:
    put(store, tmp_path, wheel(0))
    regenerate(store, [FOLDER], full=True)
    errors: list[BaseException] = []
    uploads: dict[str, str] = {}

    def writer(n: int) -> None:
        try:
            name = f"proj{n % 3}-1.0.{n}-py3-none-any.whl"
            digest = sha(name)
            uploads[name] = digest
            regenerate(store, [FOLDER], full=n % 4 == 0, known={FOLDER: {name: digest}})
        except BaseException as exc:  # collected for the main thread
            errors.append(exc)

    for n in range(24):
        # Objects exist before their index entry, as in a real upload.
        src = tmp_path / f"s{n}"
        src.write_bytes(f"proj{n}".encode())  # a store records the sha256 of the bytes it holds
        store.put(f"{FOLDER}/proj{n % 3}-1.0.{n}-py3-none-any.whl", src, sha(f"proj{n}"))
    threads = [threading.Thread(target=writer, args=(n,)) for n in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    files = read_manifest(store, FOLDER).files
    assert files is not None
    assert set(files) == set(uploads) | {wheel(0)}
    for rel, content in render_folder(files).items():
        assert page(store, rel) == content, rel


class StallingStore(FileStore):
    """Lets a test stall one writer right before it writes a given page."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.stall: dict[str, tuple[threading.Event, threading.Event]] = {}

    def put_bytes(self, key: str, data: bytes, content_type: str, **kw: Any) -> str:
        me = threading.current_thread().name
        if key.endswith("torch_nightly.html") and me in self.stall:
            reached, go = self.stall.pop(me)
            reached.set()
            assert go.wait(10)
        return super().put_bytes(key, data, content_type, **kw)


def test_stale_page_writer_repairs_its_own_write(tmp_path: Path) -> None:
    """A renders from manifest M1 and stalls; B records M2 and finishes; A then writes its
    stale page. A's check sees the manifest moved on and writes the pages again."""
    store = StallingStore(tmp_path / "mirror")
    put(store, tmp_path, wheel(1))
    regenerate(store, [FOLDER], full=True)
    reached, go = threading.Event(), threading.Event()
    store.stall["A"] = (reached, go)
    a_reports: list[Any] = []
    a = threading.Thread(
        target=lambda: a_reports.extend(
            regenerate(store, [FOLDER], full=False, known={FOLDER: {wheel(2): sha("2")}})
        ),
        name="A",
    )
    a.start()
    assert reached.wait(10)
    regenerate(store, [FOLDER], full=False, known={FOLDER: {wheel(3): sha("3")}})
    go.set()
    a.join()
    assert a_reports[0].rounds == 2
    names = [t for _, t in anchors(page(store, "torch_nightly.html"))]
    assert names == [wheel(1), wheel(2), wheel(3)]


def test_full_rebuild_racing_an_upload_keeps_the_upload(tmp_path: Path) -> None:
    """The upload lands after the rebuild listed the folder: the rebuild's swap fails,
    it lists again and keeps the new file."""
    store = StallingStore(tmp_path / "mirror")
    put(store, tmp_path, wheel(1))
    regenerate(store, [FOLDER], full=True)
    original_list = store.list
    raced = threading.Event()

    def list_then_upload(prefix: str) -> Iterator[ObjectInfo]:
        listing = list(original_list(prefix))
        if not raced.is_set():
            raced.set()
            digest = put(store, tmp_path, wheel(2))
            regenerate(store, [FOLDER], full=False, known={FOLDER: {wheel(2): digest}})
        yield from listing

    store.list = list_then_upload  # type: ignore[method-assign]
    [report] = regenerate(store, [FOLDER], full=True)
    assert report.rounds == 2
    assert set(read_manifest(store, FOLDER).files or {}) == {wheel(1), wheel(2)}
