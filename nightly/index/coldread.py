"""Reading what the index needs to know about objects nobody recorded: a wheel's sha256 and its
`<wheel>.metadata` (PEP 658), for a bucket nightly did not write (its first `--full` run).

What is read
    Only what the pages will show (the caller decides, `listing.wants_of`), each thing once:
    the sha256 from the cheapest place that has it (the listing, where the store returns
    checksums; else one HEAD, which gives the writer's `x-amz-meta-sha256` /
    `x-amz-meta-checksum-sha256` or S3's own checksum) and one GET of `<wheel>.metadata` —
    one for all the `.metadata` files whose listing says they have the same bytes (the
    wheels of one version for several Pythons: `etags.py`); the others wait for it.

How
    A bounded pool (`[publish] index_workers` threads; 1 is the serial path) reads them; a
    failed request is retried with jittered exponential backoff (on top of the store's own
    retries), and a read that still fails stops the run before anything is written: the
    index's pages are only ever rendered from complete manifests (see `index.py`).

Progress and resuming
    A run that reads many objects reports objects read / total, the rate and the time left:
    a live line on a terminal, a log line every PROGRESS_EVERY_S seconds otherwise (cron).
    What it learns is recorded every CHECKPOINT_EVERY_S seconds, and when it stops (a
    failure, Ctrl-C, SIGTERM), in `<folder>/.index-progress.json`: facts about objects, each tied to
    the object's size, ETag and time in the listing, so a replaced object is read again. The
    next run takes them from there and reads only the rest; a folder's record is deleted once
    its manifest is written. Any writer may replace it: it is a cache, never an input of pages.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TextIO, TypeVar

from nightly.errors import PublishError
from nightly.index import etags
from nightly.index.manifest import FileRecord, Records
from nightly.index.metadata import METADATA_SUFFIX, describe
from nightly.jsonvalues import json_object
from nightly.stores import ObjectInfo, PreconditionFailed, Store

log = logging.getLogger(__name__)

T = TypeVar("T")
Log = Callable[[str], None]

CHECKPOINT_NAME = ".index-progress.json"
CHECKPOINT_MAX_BYTES = 256 << 20  # as a manifest: a few hundred bytes per file of the folder
DEFAULT_WORKERS = 32  # S3 serves many requests at once; what a full run waits on is latency
CHECKPOINT_EVERY_S = 60.0
PROGRESS_EVERY_S = 30.0  # between log lines when not on a terminal
READ_KINDS = ("sha256", "metadata")
PROGRESS_MIN = 200  # fewer reads than this are not worth a progress report


@dataclass(frozen=True)
class Want:
    """What to read about one file of a folder; `obj` is its listing entry (ties what is
    learned to this version of the object, for the checkpoint)."""

    folder: str
    name: str
    sha256: bool  # HEAD the object
    metadata: bool  # GET `<name>.metadata`
    obj: ObjectInfo | None = None
    metadata_obj: ObjectInfo | None = None  # the `.metadata` file's listing entry (its ETag)


GONE = None  # what `read` returns for a file that was deleted since it was listed
Outcome = tuple[FileRecord | None, FileRecord | None]  # what was learned; what same bytes give


@dataclass(frozen=True)
class Learned:
    """What a run read about one object, tied to the object as it was listed (`identity`),
    so that it is never applied to another object of the same name."""

    identity: Mapping[str, object]
    record: FileRecord
    read: frozenset[str]  # "sha256", "metadata": what was asked (and need not be again)


def identity(obj: ObjectInfo) -> dict[str, object]:
    modified = obj.last_modified.isoformat() if obj.last_modified is not None else None
    return {"size": obj.size, "etag": obj.etag, "modified": modified}


def _asked(want: Want) -> frozenset[str]:
    return frozenset(k for k, on in (("sha256", want.sha256), ("metadata", want.metadata)) if on)


class Progress:
    """objects read / total, rate and time left: a live line on a terminal, else log lines."""

    def __init__(self, total: int, log_line: Log | None, stream: TextIO | None = None) -> None:
        self.total, self.done, self.log_line = total, 0, log_line
        self.stream = stream if stream is not None else sys.stderr
        self.live = self.total >= PROGRESS_MIN and self.stream.isatty()
        self.started = self.last = time.monotonic()

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = self.done / elapsed
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        eta = f"about {left:.0f}s left" if left != float("inf") else "time left unknown"
        pct = 100 * self.done // max(self.total, 1)
        return f"index: read {self.done}/{self.total} objects ({pct}%), {rate:.0f}/s, {eta}"

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self.live and (now - self.last >= 0.2 or self.done == self.total):
            self.last = now
            self.stream.write("\r" + self.line() + "\x1b[K")
            self.stream.flush()
        elif not self.live and self.total >= PROGRESS_MIN and now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            if self.log_line is not None:
                self.log_line(self.line())

    def finish(self) -> None:
        if self.total < PROGRESS_MIN:
            return
        if self.live:
            self.stream.write("\r" + self.line() + "\x1b[K\n")
            self.stream.flush()
        elif self.log_line is not None:
            self.log_line(self.line())


class ReadPool:
    """Reads sha256s and `.metadata` files with `workers` threads; see the module docstring."""

    def __init__(
        self, store: Store, *, workers: int = DEFAULT_WORKERS, log_line: Log | None = None,
        attempts: int | None = None, backoff: float | None = None,
        stream: TextIO | None = None,
    ) -> None:
        self.store, self.workers, self.log_line = store, max(1, workers), log_line
        self.retry = store.backoffs.index.replace(attempts=attempts, first_s=backoff)
        self.stream = stream
        self._learned: dict[str, dict[str, dict[str, object]]] = {}  # folder -> name -> entry
        self._dirty: set[str] = set()
        self._kept: set[str] = set()  # folders with a checkpoint object in the store
        self.requests = 0  # attempts, retries included
        self.reads: Counter[tuple[str, str]] = Counter()  # (folder, "sha256"/"metadata") -> done
        self.shared: Counter[str] = Counter()  # folder -> `.metadata` taken from one with its bytes
        self._lock = threading.Lock()

    # -- reading

    def read(self, wants: Iterable[Want]) -> dict[tuple[str, str], FileRecord | None]:
        """(folder, name) -> what was learned (GONE: the object was deleted meanwhile).
        Raises PublishError when a read still fails after its retries. Of `.metadata` files
        with the same bytes by their listing (`etags.py`) one is read, the others wait for it
        and take what it gave (or are read too, if its ETag was not the digest of its bytes)."""
        todo = list(wants)
        out: dict[tuple[str, str], FileRecord | None] = {}
        if not todo:
            return out
        now, later = _share(todo)
        progress = Progress(len(todo), self.log_line, self.stream)
        last_save = time.monotonic()
        finished: queue.SimpleQueue[tuple[Want, Future[Outcome]]] = queue.SimpleQueue()
        futures: list[Future[Outcome]] = []
        with ThreadPoolExecutor(min(self.workers, len(todo)), thread_name_prefix="index-read") as pool:

            def submit(want: Want, given: FileRecord | None = None) -> None:
                future = pool.submit(self._one, want, given)
                future.add_done_callback(lambda f: finished.put((want, f)))
                futures.append(future)

            try:
                with _terminate_as_interrupt():
                    for w in now:
                        submit(w)
                    for _ in todo:  # each want completes once, leaders before their followers
                        want, future = _next(finished)
                        record, same = future.result()
                        out[(want.folder, want.name)] = record
                        self._remember(want, record)
                        progress.advance()
                        for follower in later.pop((want.folder, want.name), ()):
                            # With its leader's metadata, or (None) to read its own.
                            self.shared[follower.folder] += same is not None
                            submit(follower, same)
                        if time.monotonic() - last_save >= CHECKPOINT_EVERY_S:
                            self.save()
                            last_save = time.monotonic()
            except BaseException:
                for f in futures:
                    f.cancel()
                self._save_quietly()
                raise
        progress.finish()
        return out

    def _one(self, want: Want, given: FileRecord | None = None) -> Outcome:
        """What was read about one file, and what of it any `.metadata` with the same bytes
        can take (None: its ETag did not turn out to name its bytes). `given`: what its
        `.metadata` says, read from another with the same bytes (then it is not read)."""
        key = f"{want.folder}/{want.name}"
        record = FileRecord()
        if want.sha256:
            info = self._retry("HEAD", key, lambda: self.store.head(key))
            self._did(want.folder, "sha256")
            if info is None:
                return GONE, None
            record = record.with_sha256(info.sha256)
        same = None
        if given is not None:
            record = record.merged(given)
        elif want.metadata:
            md_key = key + METADATA_SUFFIX
            got = self._retry("GET", md_key, lambda: self.store.get_bytes(md_key))
            self._did(want.folder, "metadata")
            if got is not None:
                md = FileRecord()
                try:
                    core = describe(got[0])
                except ValueError:
                    log.warning("%s/%s%s is not core metadata", self.store.url, key, METADATA_SUFFIX)
                else:
                    md = FileRecord(metadata_sha256=core.sha256, requires_python=core.requires_python)
                record = record.merged(md)
                listed = want.metadata_obj
                same = md if listed is not None and etags.matches(listed, got[1], got[0]) else None
        return record, same

    def _did(self, folder: str, kind: str) -> None:
        with self._lock:
            self.reads[(folder, kind)] += 1

    def _retry(self, what: str, key: str, fn: Callable[[], T]) -> T:
        for attempt in self.retry.tries():
            with self._lock:
                self.requests += 1
            try:
                return fn()
            except PreconditionFailed:
                raise
            except (PublishError, OSError) as e:
                if attempt == self.retry.attempts:
                    raise PublishError(
                        f"index of {self.store.url}: {what} {key} failed {attempt} times ({e}); "
                        "no page was written; run `nightly index --full` again: what was read "
                        "so far is kept"
                    ) from e
        raise AssertionError("unreachable")

    # -- the checkpoint

    def _remember(self, want: Want, record: FileRecord | None) -> None:
        if want.obj is None or record is None:
            return
        # vars(), not asdict(), which deep-copies: 5% of a first run's CPU in a profile
        entry = {**identity(want.obj), **{k: v for k, v in vars(record).items() if v}}
        entry["read"] = sorted(_asked(want))
        self._learned.setdefault(want.folder, {})[want.name] = entry
        self._dirty.add(want.folder)

    def learned(self, wants: Iterable[Want], results: Mapping[tuple[str, str], FileRecord | None]
                ) -> dict[str, dict[str, Learned]]:
        """folder -> name -> Learned, from the results of `read(wants)` (gone files left out)."""
        out: dict[str, dict[str, Learned]] = {}
        for w in wants:
            record = results.get((w.folder, w.name))
            if w.obj is not None and record is not None:
                out.setdefault(w.folder, {})[w.name] = Learned(identity(w.obj), record, _asked(w))
        return out

    def load(self, folder: str, objects: Iterable[ObjectInfo]) -> dict[str, Learned]:
        """What an earlier run recorded about these objects of `folder`; only entries whose
        object is unchanged."""
        key = f"{folder}/{CHECKPOINT_NAME}"
        got = self.store.get_bytes(key)
        if got is None:
            return {}
        self._kept.add(folder)
        body = json_object(got[0], max_bytes=CHECKPOINT_MAX_BYTES)
        files = body.get("files") if body is not None else None
        if not isinstance(files, dict):
            log.warning("%s/%s is unreadable; ignoring it", self.store.url, key)
            return {}
        out: dict[str, Learned] = {}
        for obj in objects:
            folder_of, _, name = obj.key.rpartition("/")
            if folder_of != folder:
                continue  # an object of a sub-folder: that folder's own record covers it
            entry = files.get(name)
            ident = identity(obj)
            if not isinstance(entry, dict) or any(entry.get(k) != v for k, v in ident.items()):
                continue
            self._learned.setdefault(folder, {})[name] = entry
            read = entry.get("read")
            asked = frozenset(r for r in read if r in READ_KINDS) if isinstance(read, list) else None
            asked = asked or frozenset()
            out[name] = Learned(ident, _record(entry), asked)
        return out

    def save(self) -> None:
        """Write what was learned since the last save (one PUT per folder)."""
        for folder in sorted(self._dirty):
            body = json.dumps({"format": 1, "files": self._learned[folder]}, separators=(",", ":"))
            self.store.put_bytes(f"{folder}/{CHECKPOINT_NAME}", body.encode(), "application/json")
            self._kept.add(folder)
        self._dirty.clear()

    def _save_quietly(self) -> None:
        try:
            self.save()
        except (PublishError, OSError) as e:  # the run is failing already; say why it cannot resume
            log.warning("could not record the index run's progress: %s", e)

    def done(self, folder: str) -> None:
        """The folder's manifest is written: its checkpoint has served."""
        self._learned.pop(folder, None)
        self._dirty.discard(folder)
        if folder in self._kept:
            self.store.delete(f"{folder}/{CHECKPOINT_NAME}")
            self._kept.discard(folder)


def _next(finished: queue.SimpleQueue[T]) -> T:
    while True:
        try:  # with a timeout, so that no platform holds a signal up while waiting
            return finished.get(timeout=1.0)
        except queue.Empty:
            continue


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (cron's `timeout`, a stopped service) as Ctrl-C while reading, so that what was
    read is recorded before the process goes; only the main thread can take signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _record(entry: Mapping[str, object]) -> FileRecord:
    def text(k: str) -> str | None:
        v = entry.get(k)
        return v if isinstance(v, str) and v else None

    return FileRecord(
        sha256=text("sha256"), metadata_sha256=text("metadata_sha256"),
        requires_python=text("requires_python"), upload_time=text("upload_time"),
    )


def _share(wants: list[Want]) -> tuple[list[Want], dict[tuple[str, str], list[Want]]]:
    """The wants to start with, and per leader (folder, name) the wants whose `.metadata` has
    the same bytes by its listing entry, which wait for the leader's."""
    now: list[Want] = []
    later: dict[tuple[str, str], list[Want]] = {}
    leaders: dict[etags.BodyKey, tuple[str, str]] = {}
    for w in wants:
        key = etags.body_key(w.metadata_obj) if w.metadata and w.metadata_obj is not None else None
        if key is None:
            now.append(w)
        elif key in leaders:
            later.setdefault(leaders[key], []).append(w)
        else:
            leaders[key] = (w.folder, w.name)
            now.append(w)
    return now, later


def apply(files: Records, folder: str, results: Mapping[tuple[str, str], FileRecord | None]) -> None:
    """Merge what was read into a folder's records; files found gone leave them."""
    for (f, name), record in results.items():
        if f != folder or name not in files:
            continue
        if record is GONE:
            del files[name]
        else:
            files[name] = files[name].merged(record)
