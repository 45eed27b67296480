"""A full index run's reads (`index/coldread.py`): the concurrent path against the serial one
on a store with slow and failing requests, no page from a partial listing or a failed read,
resuming after an interruption, progress."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nightly.config.retry import default_backoffs
from nightly.errors import PublishError
from nightly.index import MANIFEST_NAME, IndexOptions, coldread, list_index_prefixes, read_manifest
from nightly.index.coldread import CHECKPOINT_NAME, Progress
from nightly.index.rebuild import rebuild_all
from nightly.stores import FileStore, ObjectInfo
from nightly.stores.layout import INDEX_PREFIXES

ACCELERATORS = ("cpu", "cu126", "rocm6.4")
DAYS = 6
VERSIONS = 4  # pages show each project's newest 4 of 6 versions: hidden ones are never read


def metadata(project: str, version: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\nRequires-Python: >=3.10\n\n".encode()


def put(store: FileStore, tmp_path: Path, key: str, data: bytes) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    store.put(key, src, hashlib.sha256(data).hexdigest())


def populate(store: FileStore, tmp_path: Path) -> int:
    """PyTorch's layout: pytorch-triton in the channel root, torch and torchvision in
    accelerator folders, a `.metadata` beside every wheel but one; returns the wheels."""
    n = 0
    for day in range(DAYS):
        stamp = f"2026110{day + 1}"
        keys = [(f"whl/nightly/pytorch_triton-3.5.0+git{stamp}-py3-none-any.whl", "pytorch-triton",
                 f"3.5.0+git{stamp}")]
        for acc in ACCELERATORS:
            for project in ("torch", "torchvision"):
                version = f"2.10.0.dev{stamp}+{acc}"
                keys.append((f"whl/nightly/{acc}/{project}-{version}-cp312-cp312-linux_x86_64.whl",
                             project, version))
        for key, project, version in keys:
            put(store, tmp_path, key, key.encode())
            if not (day == DAYS - 1 and project == "torchvision" and "cpu" in key):
                put(store, tmp_path, key + ".metadata", metadata(project, version))
            n += 1
    return n


def options(workers: int) -> IndexOptions:
    return IndexOptions(find_links_name="torch_nightly.html", shared=("whl/nightly",), aggregate=True,
                        versions=VERSIONS, workers=workers)


def written(store: FileStore) -> dict[str, bytes]:
    """Every page and manifest under the store's root."""
    return {p.relative_to(store.root).as_posix(): p.read_bytes()
            for p in sorted(store.root.rglob("*"))
            if p.is_file() and (p.suffix == ".html" or p.name == MANIFEST_NAME)}


def forget(store: FileStore) -> None:
    """Back to a bucket nightly never indexed: no manifest, no page."""
    for key in written(store):
        store.delete(key)


class FaultyStore(FileStore):
    """The same folder, with slow reads, reads that fail before they succeed (a 503 on the
    first attempt at every third object), objects that always fail, and a listing that can
    break; records how many reads were in flight at once."""

    def __init__(self, root: Path, *, seed: int = 7, company: bool = True) -> None:
        # The index reader's retries as nightly makes them (4 attempts), 1 ms apart: its
        # 0.2 s first wait, doubled, only made these tests seconds longer.
        defaults = default_backoffs()
        super().__init__(root, backoffs=dataclasses.replace(
            defaults, index=defaults.index.replace(first_s=0.001)))
        self.company = company
        self.slow = 0.0  # seconds added to every read
        self.terminate_at: int | None = None  # SIGTERM this process at that many reads
        self.rng = random.Random(seed)
        self.always_fail: set[str] = set()
        self.fail_list_after: int | None = None
        self.failures = 0
        self.reads: list[str] = []
        self.inflight = self.most_inflight = 0
        self.lock = threading.Lock()
        self.seen: set[str] = set()

    def _fault(self, key: str) -> None:
        with self.lock:
            self.inflight += 1
            self.most_inflight = max(self.most_inflight, self.inflight)
            first = key not in self.seen
            self.seen.add(key)
            delay = self.rng.uniform(0, 0.004)
            flaky = first and int(hashlib.sha256(key.encode()).hexdigest(), 16) % 3 == 0
        try:
            # Slow: hold the request until another one is in flight too (or 1 s): a pool
            # that reads one object at a time shows as most_inflight == 1.
            deadline = time.monotonic() + 1.0
            while self.company and self.most_inflight < 2 and time.monotonic() < deadline:
                time.sleep(0.001)
            time.sleep(delay + self.slow)
            if key in self.always_fail or flaky:
                with self.lock:
                    self.failures += 1
                raise PublishError(f"read {key}: 503 Slow Down")
        finally:
            with self.lock:
                self.inflight -= 1

    def _note(self, key: str) -> None:
        """Record a read; SIGTERM this process once `terminate_at` reads are done (counted
        under the lock: two threads between an append and a len() would both miss it)."""
        with self.lock:
            self.reads.append(key)
            terminate = len(self.reads) == self.terminate_at
        if terminate:
            os.kill(os.getpid(), signal.SIGTERM)

    def head(self, key: str) -> ObjectInfo | None:
        if key.endswith(".whl"):
            self._fault(key)
            self._note(key)
        return super().head(key)

    def get_bytes(self, key: str, *, max_bytes: int | None = None) -> tuple[bytes, str] | None:
        if key.endswith(".metadata"):
            self._fault(key)
            self._note(key)
        return super().get_bytes(key, max_bytes=max_bytes)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        for n, obj in enumerate(super().list(prefix)):
            if self.fail_list_after is not None and n >= self.fail_list_after:
                raise PublishError("list: connection reset")
            yield obj


@pytest.fixture
def root(tmp_path: Path) -> Path:
    populate(FileStore(tmp_path / "mirror"), tmp_path)
    return tmp_path / "mirror"


@pytest.fixture
def serial(root: Path) -> dict[str, bytes]:
    """Pages and manifests of the serial path on a store without faults; then forgotten."""
    store = FileStore(root)
    rebuild_all(store, options(workers=1), backfill=False, log=lambda _: None)
    out = written(store)
    forget(store)
    return out


def test_concurrent_reads_on_a_faulty_store_give_the_serial_pages(
    root: Path, serial: dict[str, bytes]
) -> None:
    store = FaultyStore(root)
    lines: list[str] = []
    reports = rebuild_all(store, options(workers=8), backfill=False, log=lines.append)
    assert written(store) == serial
    assert store.failures > 0
    assert store.most_inflight > 1
    # Only what the pages show was read, each object once (the faulted ones twice).
    shown = (1 + len(ACCELERATORS) * 2) * VERSIONS
    assert sum(r.heads for r in reports) == shown
    assert sum(r.metadata_reads for r in reports) == shown - 1  # one wheel has no .metadata
    assert len(store.reads) == len(set(store.reads)) == 2 * shown - 1
    manifest = read_manifest(store, "whl/nightly/cpu")
    assert manifest.files is not None
    assert len(manifest.files) == 2 * DAYS
    assert not list(root.rglob(CHECKPOINT_NAME))


def test_a_read_that_keeps_failing_writes_nothing_and_the_next_run_resumes(
    root: Path, serial: dict[str, bytes]
) -> None:
    store = FaultyStore(root)
    bad = "whl/nightly/cu126/torch-2.10.0.dev20261106+cu126-cp312-cp312-linux_x86_64.whl"
    store.always_fail.add(bad)
    with pytest.raises(PublishError, match=r"HEAD .*cu126/torch-2\.10\.0\.dev20261106.* failed 4 times"):
        rebuild_all(store, options(workers=8), backfill=False, log=lambda _: None)
    assert written(store) == {}  # no page, no manifest
    recorded = {  # but what was read is: folder/name -> what was read about it
        f"{path.parent.relative_to(root).as_posix()}/{name}": set(entry["read"])
        for path in root.rglob(CHECKPOINT_NAME)
        for name, entry in json.loads(path.read_bytes())["files"].items()
    }
    assert recorded
    assert bad not in recorded

    again = FaultyStore(root, seed=8)
    again.seen = set(store.seen)  # the store's 503s were first attempts; they are over
    rebuild_all(again, options(workers=8), backfill=False, log=lambda _: None)
    assert written(again) == serial
    assert bad in again.reads
    # Only what was not recorded was read again.
    done = {key for key, read in recorded.items() if "sha256" in read}
    done |= {key + ".metadata" for key, read in recorded.items() if "metadata" in read}
    shown = (1 + len(ACCELERATORS) * 2) * VERSIONS
    assert not done & set(again.reads)
    assert len(again.reads) == 2 * shown - 1 - len(done)
    assert not list(root.rglob(CHECKPOINT_NAME))


def test_a_checkpoint_of_a_replaced_object_is_not_used(root: Path, serial: dict[str, bytes], tmp_path: Path
                                                        ) -> None:
    store = FaultyStore(root, company=False)
    store.always_fail.add("whl/nightly/cpu/torch-2.10.0.dev20261106+cpu-cp312-cp312-linux_x86_64.whl.metadata")
    with pytest.raises(PublishError):
        rebuild_all(store, options(workers=1), backfill=False, log=lambda _: None)
    replaced = "whl/nightly/cpu/torch-2.10.0.dev20261105+cpu-cp312-cp312-linux_x86_64.whl"
    assert replaced in store.reads  # read (and recorded) before the failure: serial order
    put(FileStore(root), tmp_path, replaced, b"another build of the same wheel")
    again = FaultyStore(root)
    again.seen = set(store.seen)
    rebuild_all(again, options(workers=4), backfill=False, log=lambda _: None)
    assert replaced in again.reads
    files = read_manifest(again, "whl/nightly/cpu").files
    assert files is not None
    new_sha = hashlib.sha256(b"another build of the same wheel").hexdigest()
    assert files[replaced.rpartition("/")[2]].sha256 == new_sha


def test_a_listing_that_breaks_writes_no_page(root: Path, serial: dict[str, bytes], tmp_path: Path) -> None:
    store = FaultyStore(root)
    rebuild_all(store, options(workers=8), backfill=False, log=lambda _: None)
    before = written(store)
    put(store, tmp_path, "whl/nightly/cpu/torch-2.10.0.dev20261130+cpu-cp312-cp312-linux_x86_64.whl", b"new")
    store.fail_list_after = 10  # within the listing of one accelerator folder
    with pytest.raises(PublishError, match="connection reset"):
        rebuild_all(store, options(workers=8), backfill=False, log=lambda _: None)
    assert written(store) == before


def test_progress_is_logged_in_cron_and_live_on_a_terminal(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(coldread, "PROGRESS_MIN", 1)
    monkeypatch.setattr(coldread, "PROGRESS_EVERY_S", 0.0)
    lines: list[str] = []
    rebuild_all(FileStore(root), options(workers=4), backfill=False, log=lines.append)
    progress = [line for line in lines if line.startswith("index: read ")]
    total = (1 + len(ACCELERATORS) * 2) * VERSIONS  # wheels read about
    assert progress[-1].startswith(f"index: read {total}/{total} objects (100%), ")
    assert len(progress) > 1
    assert all("/s, " in line and "left" in line for line in progress)

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    term = Terminal()
    live = Progress(3, lines.append, term)
    for _ in range(3):
        live.advance()
    live.finish()
    out = term.getvalue()
    assert out.startswith("\rindex: read ")
    assert out.endswith("\x1b[K\n")
    assert "\rindex: read 3/3 objects (100%), " in out


def test_read_pool_retries_then_reports_one_clear_error(tmp_path: Path) -> None:
    store = FaultyStore(tmp_path / "s", company=False)  # one read: no company to wait for
    put(store, tmp_path, "whl/a/x-1.0-py3-none-any.whl", b"x")
    store.always_fail.add("whl/a/x-1.0-py3-none-any.whl")
    pool = coldread.ReadPool(store, workers=2, attempts=3, backoff=0.001)
    want = coldread.Want("whl/a", "x-1.0-py3-none-any.whl", sha256=True, metadata=False)
    with pytest.raises(PublishError, match="failed 3 times") as exc:
        pool.read([want])
    assert "run `nightly index --full` again" in str(exc.value)
    assert store.failures == 3
    store.always_fail.clear()
    got: Any = pool.read([want])
    assert got[("whl/a", "x-1.0-py3-none-any.whl")].sha256 == hashlib.sha256(b"x").hexdigest()


def test_split_listing_is_the_whole_listing(root: Path, serial: dict[str, bytes]) -> None:
    store = FileStore(root)
    rebuild_all(store, options(workers=4), backfill=False, log=lambda _: None)  # pages in sub-folders too
    whole = sorted((o.key for p in INDEX_PREFIXES for o in store.list(p)), key=str.encode)
    assert any(k.endswith("/torch/index.html") for k in whole)
    assert [o.key for o in list_index_prefixes(store, workers=3)] == whole
    objects, subs = store.list_level("whl/nightly/")
    assert {o.key for o in objects} == {k for k in whole if k.count("/") == 2}
    assert "whl/nightly/cpu/" in subs
    assert "whl/nightly/pytorch-triton/" in subs


def test_sigterm_records_what_was_read_and_writes_no_page(root: Path) -> None:
    store = FaultyStore(root, company=False)
    store.slow, store.terminate_at = 0.01, 9
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        rebuild_all(store, options(workers=2), backfill=False, log=lambda _: None)
    assert signal.getsignal(signal.SIGTERM) == before  # put back as it was
    assert written(store) == {}
    recorded = sum(len(json.loads(p.read_bytes())["files"]) for p in root.rglob(CHECKPOINT_NAME))
    assert 0 < recorded < (1 + len(ACCELERATORS) * 2) * VERSIONS
