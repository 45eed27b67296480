"""Index pages over PyTorch's bucket layout: a channel root holding files and accelerator
folders, full runs that never leave a page missing, flat page names per channel, shared
dependency folders, aggregate channel roots and the version cap."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from nightly.index import IndexOptions, regenerate
from nightly.index.manifest import read_manifest
from nightly.index.pages import render_folder
from nightly.index.rebuild import rebuild_all
from nightly.stores import FileStore

FLAT = "demo_{channel}.html"


def flat(channel: str) -> str:
    return FLAT.format(channel=channel)


def wheel(project: str, version: str, local: str = "") -> str:
    return f"{project}-{version}{'+' + local if local else ''}-py3-none-any.whl"


def put(store: FileStore, tmp_path: Path, key: str) -> str:
    src = tmp_path / "src.bin"
    src.write_bytes(key.encode())
    digest = hashlib.sha256(key.encode()).hexdigest()
    store.put(key, src, digest)
    return digest


LAYOUT = [
    f"whl/nightly/{wheel('pytorch_triton', '3.2.0')}",
    f"whl/nightly/cpu/{wheel('torch', '2.6.0.dev20261120', 'cpu')}",
    f"whl/nightly/cpu/{wheel('torch', '2.6.0.dev20261121', 'cpu')}",
    f"whl/nightly/cu126/{wheel('torch', '2.6.0.dev20261121', 'cu126')}",
    f"whl/nightly/cu126/{wheel('torchvision', '0.21.0.dev20261121', 'cu126')}",
    f"whl/test/cpu/{wheel('torch', '2.6.0', 'cpu')}",
    f"whl/cpu/{wheel('torch', '2.5.1', 'cpu')}",
]


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    s = FileStore(tmp_path / "mirror")
    for key in LAYOUT:
        put(s, tmp_path, key)
    return s


def opts(**kw: Any) -> IndexOptions:
    return IndexOptions(find_links_name=flat, **kw)


def pages_of(store: FileStore) -> set[str]:
    return {p.relative_to(store.root).as_posix() for p in store.root.rglob("*.html")}


class ObservingStore(FileStore):
    """After every write or delete, checks that no page of `watched` is missing."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.watched: set[str] = set()
        self.missing: list[tuple[str, str]] = []

    def _check(self, op: str) -> None:
        for key in self.watched:
            if not (self.root / key).is_file():
                self.missing.append((op, key))

    def put_bytes(self, key: str, data: bytes, content_type: str, **kw: Any) -> str:
        etag = super().put_bytes(key, data, content_type, **kw)
        self._check(f"put {key}")
        return etag

    def delete(self, key: str) -> None:
        super().delete(key)
        self._check(f"delete {key}")


def write_config(tmp_path: Path, root: Path, extra: str = "") -> Path:
    path = tmp_path / "nightly.toml"
    path.write_text(
        '[project]\nname = "demo"\nsource = "."\nbase_version = "1.0.0"\n\n'
        '[matrix.linux.manywheel]\npythons = ["3.11"]\ncudas = ["cpu"]\n\n'
        '[[machines]]\nname = "a"\nplatform = "linux"\nqueues = 1\n\n'
        f'[publish]\nurl = "{root.as_uri()}"\nfind_links = "{FLAT}"\n{extra}'
    )
    return path


def test_full_run_never_leaves_a_page_missing(
    store: FileStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nightly: Any
) -> None:
    """`nightly index --full` twice on a channel root with files and accelerator folders: the
    second run must never delete a page it writes (the accelerator folders' index.html)."""
    config = write_config(tmp_path, store.root)
    assert nightly("index", "--full", "--config", str(config)).code == 0
    observed = ObservingStore(store.root)
    observed.watched = pages_of(store)
    assert "whl/nightly/cpu/index.html" in observed.watched
    monkeypatch.setattr("nightly.publish.upload.open_destination", lambda _config: observed)
    result = nightly("index", "--full", "--config", str(config))
    assert result.code == 0, result.out + result.err
    assert observed.requests > 0
    assert observed.missing == []
    assert pages_of(store) == observed.watched


def test_channel_root_flat_page_is_named_for_its_channel(store: FileStore) -> None:
    rebuild_all(store, opts(), backfill=False, log=lambda _: None)
    pages = pages_of(store)
    assert f"whl/nightly/{flat('nightly')}" in pages
    assert f"whl/nightly/{flat('release')}" not in pages
    assert f"whl/nightly/cpu/{flat('nightly')}" in pages
    assert f"whl/test/cpu/{flat('test')}" in pages
    assert f"whl/cpu/{flat('release')}" in pages


def test_stale_project_pages_go_after_everything_else(store: FileStore, tmp_path: Path) -> None:
    rebuild_all(store, opts(), backfill=False, log=lambda _: None)
    store.delete(f"whl/nightly/cu126/{wheel('torchvision', '0.21.0.dev20261121', 'cu126')}")
    [report] = [
        r for r in rebuild_all(store, opts(), backfill=False, log=lambda _: None)
        if r.folder == "whl/nightly/cu126"
    ]
    assert report.pages_deleted == 1
    assert not (store.root / "whl/nightly/cu126/torchvision/index.html").exists()
    assert (store.root / "whl/nightly/cu126/index.html").exists()  # not a project page of the root


def test_shared_folder_listed_in_every_accelerator_folder(store: FileStore, tmp_path: Path) -> None:
    options = opts(shared=("whl/nightly",))
    rebuild_all(store, options, backfill=False, log=lambda _: None)
    triton = wheel("pytorch_triton", "3.2.0")
    for acc in ("cpu", "cu126"):
        page = (store.root / f"whl/nightly/{acc}/pytorch-triton/index.html").read_text()
        assert f'href="../../{triton}#sha256=' in page
        flat_page = (store.root / f"whl/nightly/{acc}/{flat('nightly')}").read_text()
        assert f'href="../{triton}#sha256=' in flat_page
    # Not in other channels' folders.
    assert not (store.root / "whl/test/cpu/pytorch-triton").exists()
    # A new dependency uploaded to the shared folder reaches every accelerator folder's pages.
    new = wheel("pytorch_triton", "3.3.0")
    digest = put(store, tmp_path, f"whl/nightly/{new}")
    reports = regenerate(store, ["whl/nightly"], full=False, known={"whl/nightly": {new: digest}},
                         options=options)
    assert [r.folder for r in reports] == ["whl/nightly", "whl/nightly/cpu", "whl/nightly/cu126"]
    for acc in ("cpu", "cu126"):
        assert new in (store.root / f"whl/nightly/{acc}/pytorch-triton/index.html").read_text()


def test_aggregate_channel_root(store: FileStore, tmp_path: Path) -> None:
    options = opts(aggregate=True)
    rebuild_all(store, options, backfill=False, log=lambda _: None)
    page = (store.root / "whl/nightly/torch/index.html").read_text()
    for acc, local in (("cpu", "cpu"), ("cu126", "cu126")):
        name = wheel("torch", "2.6.0.dev20261121", local).replace("+", "%2B")
        assert f'href="../{acc}/{name}#sha256=' in page
    assert "pytorch-triton/" in (store.root / "whl/nightly/index.html").read_text()
    assert "whl/test/torch/index.html" in pages_of(store)  # the test channel's root too
    assert "2.5.1" not in (store.root / "whl/test/torch/index.html").read_text()  # release: not test
    # An upload to one accelerator folder updates the root's aggregate pages too.
    new = wheel("torch", "2.6.0.dev20261122", "cu126")
    digest = put(store, tmp_path, f"whl/nightly/cu126/{new}")
    reports = regenerate(store, ["whl/nightly/cu126"], full=False,
                         known={"whl/nightly/cu126": {new: digest}}, options=options)
    assert [r.folder for r in reports] == ["whl/nightly/cu126", "whl/nightly"]
    assert new.replace("+", "%2B") in (store.root / "whl/nightly/torch/index.html").read_text()


def test_a_new_accelerator_folder_joins_its_root(store: FileStore, tmp_path: Path) -> None:
    options = opts(shared=("whl/nightly",), aggregate=True)
    rebuild_all(store, options, backfill=False, log=lambda _: None)
    name = wheel("torch", "2.6.0.dev20261121", "rocm6.4")
    digest = put(store, tmp_path, f"whl/nightly/rocm6.4/{name}")
    regenerate(store, ["whl/nightly/rocm6.4"], full=False, known={"whl/nightly/rocm6.4": {name: digest}},
               options=options)
    assert "rocm6.4" in read_manifest(store, "whl/nightly").folders
    assert (store.root / "whl/nightly/rocm6.4/pytorch-triton/index.html").is_file()
    assert name.replace("+", "%2B") in (store.root / "whl/nightly/torch/index.html").read_text()


def test_version_cap_shows_newest_versions_and_keeps_files(store: FileStore, tmp_path: Path) -> None:
    files = {wheel("torch", f"2.6.0.dev202611{d}"): None for d in (18, 19, 20, 21)}
    files["torch-2.6.0.dev20261121-cp311-cp311-linux_x86_64.whl"] = None
    page = render_folder(files, versions=2)["torch/index.html"].decode()
    assert "dev20261121" in page
    assert "dev20261120" in page
    assert "dev20261119" not in page
    assert page.count("dev20261121") == 4  # both wheels of the newest version (href + text)
    options = opts(versions=1)
    rebuild_all(store, options, backfill=False, log=lambda _: None)
    page = (store.root / "whl/nightly/cpu/torch/index.html").read_text()
    assert "dev20261121" in page
    assert "dev20261120" not in page
    assert (store.root / f"whl/nightly/cpu/{wheel('torch', '2.6.0.dev20261120', 'cpu')}").is_file()


def test_version_cap_asks_only_about_files_in_view(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "mirror")
    for d in (18, 19, 20, 21):
        put(store, tmp_path, f"whl/nightly/cpu/{wheel('torch', f'2.6.0.dev202611{d}', 'cpu')}")
    [report] = regenerate(store, ["whl/nightly/cpu"], full=True, options=opts(versions=2))
    assert report.heads == 2  # the two newest; the older two stay unasked (not shown)
    assert len(report.missing_sha256) == 2
    [report] = regenerate(store, ["whl/nightly/cpu"], full=True, options=opts(versions=3))
    assert report.heads == 1  # one more came into view
