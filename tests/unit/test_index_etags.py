"""`.metadata` files with the same bytes, told by their listing's ETag, are read once in a first
full run (`index/etags.py`, `index/coldread.py`): never when the ETag is multipart or turns
out not to be the digest of the bytes, and a body that changed is read on its own."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from nightly.index import MANIFEST_NAME, IndexOptions, etags
from nightly.index.manifest import read_manifest
from nightly.index.rebuild import rebuild_all
from nightly.stores import FileStore, ObjectInfo

PYTHONS = ("cp310", "cp311", "cp312", "cp313")
DAYS = ("20261120", "20261121")
ACCELERATORS = ("cpu", "cu126")


def md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def core(project: str, version: str, requires: str = ">=3.10") -> bytes:
    lines = ["Metadata-Version: 2.1", f"Name: {project}", f"Version: {version}",
             f"Requires-Python: {requires}"]
    return ("\n".join(lines) + "\n\n").encode()


class S3LikeStore(FileStore):
    """A folder that lists and reads the ETags of `.metadata` files as S3 does: the MD5 of
    the bytes, quoted; `opaque` ones have that shape without being the digest (as under
    SSE-KMS), `multipart` ones end in `-<parts>`. Counts the `.metadata` reads; `on_read` runs before each."""

    def __init__(self, root: Path, *, opaque: bool = False) -> None:
        super().__init__(root)
        self.opaque, self.multipart = opaque, set[str]()
        self.metadata_reads: list[str] = []
        self.on_read: dict[str, bytes] = {}  # key -> bytes it is replaced with before its first read
        self.lock = threading.Lock()

    def etag(self, key: str, data: bytes) -> str:
        # Opaque: the same for the same bytes, yet not their MD5 (a store's own scheme).
        digest = md5(b"not the body: " + data) if self.opaque else md5(data)
        return f'"{digest}-1"' if key in self.multipart else f'"{digest}"'

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        for obj in super().list(prefix):
            if obj.key.endswith(".metadata"):  # (the folder store's own ETags elsewhere)
                etag = self.etag(obj.key, (self.root / obj.key).read_bytes())
                obj = ObjectInfo(obj.key, obj.size, obj.sha256, etag, obj.last_modified)
            yield obj

    def get_bytes(self, key: str, *, max_bytes: int | None = None) -> tuple[bytes, str] | None:
        if not key.endswith(".metadata"):
            return super().get_bytes(key, max_bytes=max_bytes)
        with self.lock:
            self.metadata_reads.append(key)
            replacement = self.on_read.pop(key, None)
        if replacement is not None:  # another writer, between the listing and this read
            (self.root / key).write_bytes(replacement)
        got = super().get_bytes(key, max_bytes=max_bytes)
        return None if got is None else (got[0], self.etag(key, got[0]))


def populate(store: FileStore, tmp_path: Path) -> list[str]:
    """Per day and accelerator one torch version for four Pythons, one METADATA for all four
    (as PyTorch's wheels have); returns the wheels' keys."""
    keys = []
    for day in DAYS:
        for acc in ACCELERATORS:
            version = f"2.10.0.dev{day}+{acc}"
            for py in PYTHONS:
                key = f"whl/nightly/{acc}/torch-{version}-{py}-{py}-linux_x86_64.whl"
                for k, data in ((key, key.encode()), (key + ".metadata", core("torch", version))):
                    src = tmp_path / "src.bin"
                    src.write_bytes(data)
                    store.put(k, src, hashlib.sha256(data).hexdigest())
                keys.append(key)
    return keys


OPTIONS = IndexOptions(find_links_name="torch_nightly.html", aggregate=True, workers=8)


def written(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and (p.suffix == ".html" or p.name == MANIFEST_NAME)}


@pytest.fixture
def keys(tmp_path: Path) -> list[str]:
    return populate(FileStore(tmp_path / "mirror"), tmp_path)


@pytest.fixture
def every_read(tmp_path: Path, keys: list[str]) -> dict[str, bytes]:
    """Pages and manifests of a run that reads every `.metadata` (ETags it cannot trust);
    then the bucket is again one that was never indexed."""
    store = S3LikeStore(tmp_path / "mirror", opaque=True)
    reports = rebuild_all(store, OPTIONS, backfill=False, log=lambda _: None)
    assert len(store.metadata_reads) == len(set(store.metadata_reads)) == len(keys)
    assert sum(r.metadata_shared for r in reports) == 0
    out = written(store.root)
    for key in out:
        store.delete(key)
    return out


def test_the_etag_stands_for_the_bytes_only_when_it_is_their_digest() -> None:
    body = b"Metadata-Version: 2.1\n"
    obj = ObjectInfo("a.whl.metadata", len(body), etag=f'"{md5(body)}"')
    assert etags.body_key(obj) == (md5(body), len(body))
    assert etags.matches(obj, obj.etag, body)
    assert not etags.matches(obj, obj.etag, body + b"x")  # other bytes
    assert not etags.matches(obj, '"0123"', body)  # replaced since the listing
    sha = hashlib.sha256(body).hexdigest()
    assert etags.matches(ObjectInfo("k", len(body), etag=f'"{sha}"'), f'"{sha}"', body)
    for etag in (f'"{md5(body)}-2"', None, "", '"W/abc"', f'"{md5(body).upper()}"'):
        assert etags.body_key(ObjectInfo("k", len(body), etag=etag)) is None
    opaque = ObjectInfo("k", len(body), etag=f'"{md5(b"not the body: " + body)}"')
    assert etags.body_key(opaque) is not None
    assert not etags.matches(opaque, opaque.etag, body)


def test_same_bytes_are_read_once_and_give_the_pages_of_reading_each(
    tmp_path: Path, keys: list[str], every_read: dict[str, bytes]
) -> None:
    store = S3LikeStore(tmp_path / "mirror")
    reports = rebuild_all(store, OPTIONS, backfill=False, log=lambda _: None)
    versions = len(DAYS) * len(ACCELERATORS)
    assert len(store.metadata_reads) == sum(r.metadata_reads for r in reports) == versions
    assert sum(r.metadata_shared for r in reports) == len(keys) - versions
    assert sum(r.heads for r in reports) == len(keys)  # every wheel's own sha256
    assert written(store.root) == every_read


def test_etags_that_are_not_the_digest_or_multipart_are_never_trusted(
    tmp_path: Path, keys: list[str], every_read: dict[str, bytes]
) -> None:
    store = S3LikeStore(tmp_path / "mirror")
    multipart = {k + ".metadata" for k in keys if "dev20261121+cpu" in k}
    store.multipart |= multipart
    reports = rebuild_all(store, OPTIONS, backfill=False, log=lambda _: None)
    assert multipart <= set(store.metadata_reads)  # each read on its own
    others = len(DAYS) * len(ACCELERATORS) - 1
    assert len(store.metadata_reads) == len(multipart) + others
    assert sum(r.metadata_shared for r in reports) == len(keys) - len(store.metadata_reads)
    assert written(store.root) == every_read


def test_a_body_replaced_after_the_listing_is_not_shared(tmp_path: Path, keys: list[str]) -> None:
    store = S3LikeStore(tmp_path / "mirror")
    group = sorted(k for k in keys if "dev20261120+cu126" in k)
    leader = group[0] + ".metadata"  # read first: names sort
    store.on_read[leader] = core("torch", "2.10.0.dev20261120+cu126", ">=3.11")
    rebuild_all(store, IndexOptions(find_links_name="torch_nightly.html", workers=1),
                backfill=False, log=lambda _: None)
    assert {k + ".metadata" for k in group} <= set(store.metadata_reads)  # the rest read on their own
    files = read_manifest(store, "whl/nightly/cu126").files
    assert files is not None
    got = {files[k.rpartition("/")[2]].requires_python for k in group}
    assert files[group[0].rpartition("/")[2]].requires_python == ">=3.11"
    assert got == {">=3.11", ">=3.10"}
    for key in group:
        digest = hashlib.sha256((store.root / (key + ".metadata")).read_bytes()).hexdigest()
        assert files[key.rpartition("/")[2]].metadata_sha256 == digest


def test_a_changed_metadata_has_a_new_etag_and_is_read_on_its_own(tmp_path: Path, keys: list[str]) -> None:
    changed = sorted(k for k in keys if "dev20261121+cpu" in k)[2] + ".metadata"
    (tmp_path / "mirror" / changed).write_bytes(core("torch", "2.10.0.dev20261121+cpu", ">=3.12"))
    store = S3LikeStore(tmp_path / "mirror")
    rebuild_all(store, OPTIONS, backfill=False, log=lambda _: None)
    assert changed in store.metadata_reads
    assert len(store.metadata_reads) == len(DAYS) * len(ACCELERATORS) + 1
    page = (store.root / "whl/nightly/cpu/torch/index.html").read_text()
    link = next(line for line in page.splitlines() if changed.rpartition("/")[2][: -len(".metadata")]
                .replace("+", "%2B") in line)
    digest = hashlib.sha256((store.root / changed).read_bytes()).hexdigest()
    assert f'data-core-metadata="sha256={digest}"' in link
    assert 'data-requires-python="&gt;=3.12"' in link
