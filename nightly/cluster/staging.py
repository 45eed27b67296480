"""The staging store, the cluster's shared disk: its layout and both sides of its protocol.

Nothing big travels through the Dask scheduler. The orchestrator stages the day's inputs
(source and recipes, as reproducible tarballs) and each worker fetches and unpacks them once
per host; each build attempt writes under a key prefix that is its own
(`<day>/builds/<build-id>/<token>/`):

    attempt.json        written first: worker, host, process, start time
    log/000001 ...      the log as it grows, one object per flush (every cluster.log_flush),
                        so a worker that dies leaves what it had written
    log.txt             the whole log, at the end
    packages/<name>     the packages, with their sha256
    result.json         written last, and only by an attempt that got to the end

A GPU test attempt (nightly.cluster.gputest) writes the same files under
`<day>/tests/<build-id>/<token>/`: a prefix of its own, never taken for a build attempt.

The store is a shared folder or an S3 prefix (nightly.stores). `StagingDay` is the
orchestrator's view of one day in it: the attempts of each build, their logs, and assembling
them into the build's log in the day folder. A worker host's copy of the staged inputs is
`hostinputs.py`.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import os
import stat
import tarfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from nightly.cluster.stagedlog import LOG_CHUNKS, LOG_TXT, log_check, read_staged_log
from nightly.cluster.stagingclean import prune_empty
from nightly.config.retry import Backoffs
from nightly.config.timeouts import ExternalTimeouts
from nightly.errors import ObjectTooLarge, PublishError, UnsafeEntry
from nightly.files import TreeEntry, sha256_file, walk_tree
from nightly.jsonvalues import json_object
from nightly.stores import FileStore, Store, open_store
from nightly.workspace import INTERRUPTED, Day, atomic_write

# Staging layout (keys relative to the staging store's root).
ATTEMPT_JSON = "attempt.json"
RESULT_JSON = "result.json"
PACKAGES = "packages/"
JSON_MAX = 1024 * 1024  # attempt.json, result.json: a few hundred bytes each



def builds_prefix(day: str) -> str:
    return f"{day}/builds/"


def build_prefix(day: str, build_id: str) -> str:
    return f"{day}/builds/{build_id}/"


def attempt_prefix(day: str, build_id: str, token: str) -> str:
    return f"{day}/builds/{build_id}/{token}/"


def gpu_tests_prefix(day: str) -> str:
    return f"{day}/tests/"


def gpu_test_prefix(day: str, build_id: str, token: str) -> str:
    """A GPU test attempt's prefix (nightly.cluster.gputest)."""
    return f"{day}/tests/{build_id}/{token}/"


def inputs_key(day: str, kind: str, sha256: str) -> str:
    return f"{day}/inputs/{kind}-{sha256[:16]}.tar.gz"


# ---------------------------------------------------------------------------- the store


@dataclass(frozen=True, kw_only=True)
class StagingSpec:
    url: str
    endpoint_url: str = ""
    region: str = ""
    profile: str = ""
    # The orchestrator's configuration's retry policies and S3 waits (None: defaults.toml's).
    backoffs: Backoffs | None = None
    timeouts: ExternalTimeouts | None = None

    def open(self) -> Store:
        return _store(self)


_stores: dict[StagingSpec, Store] = {}


_stores_lock = threading.Lock()


def _store(spec: StagingSpec) -> Store:
    """One Store per staging destination per process (an S3 client is costly to make)."""
    with _stores_lock:
        store = _stores.get(spec)
        if store is None:
            store = open_store(
                spec.url,
                endpoint_url=spec.endpoint_url or None,
                region=spec.region or None,
                profile=spec.profile or None,
                backoffs=spec.backoffs,
                timeouts=spec.timeouts,
            )
            if isinstance(store, FileStore):
                store.label = "staging"  # its errors say "symlink in staging: ..."
            _stores[spec] = store
        return store


def read_json(store: Store, key: str) -> dict[str, Any] | None:
    """A small JSON table from staging; None when missing, not one, or too large."""
    try:
        got = store.get_bytes(key, max_bytes=JSON_MAX)
    except (ObjectTooLarge, UnsafeEntry):
        return None  # not a worker's: a worker writes a small regular file
    if got is None:
        return None
    return json_object(got[0])


# ---------------------------------------------------------------------------- inputs


def make_tarball(src: Path, dest: Path) -> str:
    """A gzipped tar of `src` that is byte-for-byte the same for the same tree (entries in
    name order, no owners, gzip without a timestamp). Returns its sha256. Any depth, no link
    followed (nightly.files.walk_tree): folders, regular files (up to their size when
    opened) and links as links; a FIFO, socket or device is left out, as the night's copies
    leave it out (nightly.files.copy)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".partial")
    with open(tmp, "wb") as raw, gzip.GzipFile(
        filename="", fileobj=raw, mode="wb", mtime=0, compresslevel=6
    ) as gz, tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for entry in walk_tree(src, ordered=True):
            _add_entry(tar, entry)
    os.replace(tmp, dest)
    return sha256_file(dest)


def _add_entry(tar: tarfile.TarFile, entry: TreeEntry) -> None:
    info = tarfile.TarInfo(entry.rel)
    info.mode, info.mtime = stat.S_IMODE(entry.st.st_mode), int(entry.st.st_mtime)
    if entry.is_dir:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    elif stat.S_ISLNK(entry.st.st_mode):
        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(entry.name, dir_fd=entry.dir_fd)
        tar.addfile(info)
    elif entry.is_file:
        try:
            fd = os.open(entry.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=entry.dir_fd)
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.ELOOP, errno.ENXIO):
                return  # gone, or swapped for a link or a socket meanwhile
            raise
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode):
                info.size = st.st_size  # tarfile reads this many bytes, no more
                tar.addfile(info, f)


# ---------------------------------------------------------------------------- log streaming


class LogStreamer:
    """Copies what is appended to a build's log into staging as it grows: one object per
    flush under `prefix` (000001, 000002, ...). The log is found through `locate` (the runner
    renames it when the build ends; an open file follows the rename). A flush that fails
    keeps its bytes for the next one."""

    def __init__(
        self, store: Store, prefix: str, locate: Callable[[], Path | None], interval: float
    ) -> None:
        self.store, self.prefix, self.locate, self.interval = store, prefix, locate, interval
        self.chunks = 0
        self._file: BinaryIO | None = None
        self._pending = b""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="log-streamer", daemon=True)

    def start(self) -> LogStreamer:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.flush()

    def flush(self) -> None:
        if self._file is None:
            path = self.locate()
            if path is None:
                return
            try:
                self._file = path.open("rb")
            except FileNotFoundError:
                return
        self._pending += self._file.read()
        if not self._pending:
            return
        try:
            self.store.put_bytes(
                f"{self.prefix}{self.chunks + 1:06d}", self._pending, "text/plain; charset=utf-8"
            )
        except (PublishError, OSError):
            return  # staging hiccup: the bytes go with the next flush
        self.chunks += 1
        self._pending = b""

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.flush()
        if self._file is not None:
            self._file.close()



# ---------------------------------------------------------------------------- one day in staging


class StagingDay:
    """The orchestrator's view of one day in staging: each build's attempts and their logs."""

    def __init__(self, store: Store, day: str, secrets: tuple[str, ...] = ()) -> None:
        self.store, self.day = store, day
        self.secrets = secrets  # masked in every log read back (nightly.redact.scrub_staged)

    @property
    def url(self) -> str:
        return self.store.url

    def listing(
        self, build_id: str | None = None, *, tests: bool = False
    ) -> dict[str, dict[str, set[str]]]:
        """build -> attempt token -> names under the attempt's prefix (`tests`: of its GPU
        test attempts)."""
        base = gpu_tests_prefix(self.day) if tests else builds_prefix(self.day)
        prefix = f"{base}{build_id}/" if build_id else base
        out: dict[str, dict[str, set[str]]] = {}
        for obj in self.store.list(prefix):
            bid, _, rest = obj.key[len(base):].partition("/")
            tok, _, name = rest.partition("/")
            if bid and tok and name:
                out.setdefault(bid, {}).setdefault(tok, set()).add(name)
        return out

    def read(self, build_id: str, token: str, name: str, *, tests: bool = False
             ) -> dict[str, object] | None:
        prefix = (gpu_test_prefix if tests else attempt_prefix)(self.day, build_id, token)
        return read_json(self.store, prefix + name)

    def attempt_log(self, build_id: str, token: str, names: set[str]) -> bytes:
        """An attempt's whole log, else the chunks it streamed before it ended: read safely,
        bounded and scrubbed (nightly.cluster.stagedlog)."""
        return read_staged_log(self.store, attempt_prefix(self.day, build_id, token), names,
                               secrets=self.secrets).text

    def get(self, key: str, dest: Path, size: int) -> None:
        """A package, never more than the `size` its worker reported (ObjectTooLarge)."""
        self.store.get(key, dest, max_bytes=size)

    def unsafe(self, build_id: str, token: str) -> str:
        """Why an attempt's files in a folder store cannot be used ("symlink in staging:
        ...", a FIFO, a device), or "" when every one is a regular file."""
        if not isinstance(self.store, FileStore):
            return ""  # an object store holds objects only
        try:
            for obj in self.store.list(attempt_prefix(self.day, build_id, token)):
                self.store.head(obj.key)
        except UnsafeEntry as e:
            return str(e)
        except (PublishError, OSError):
            return ""  # unreadable is reported where it is read
        return ""

    def drop(self, build_id: str | None = None) -> None:
        """Delete a build's attempts and its GPU tests' (None: everything of the day). Best
        effort."""
        prefixes = ([build_prefix(self.day, build_id), f"{gpu_tests_prefix(self.day)}{build_id}/"]
                    if build_id else [f"{self.day}/"])
        with contextlib.suppress(PublishError, OSError):
            for prefix in prefixes:
                for obj in list(self.store.list(prefix)):
                    self.store.delete(obj.key)
                # and the folders they were in (the day's own folder at the end of the night)
                prune_empty(self.store, prefix)

    def assemble_log(
        self,
        day: Day,
        build_id: str,
        token: str,
        ok: bool,
        result: Mapping[str, object] | None,
        *,
        reason: str = "",
        test: Mapping[str, object] | None = None,
    ) -> Path:
        """The build's log in the day folder: what it had (earlier runs' attempts), then every
        attempt in staging not yet in it, oldest first: attempts that ended without a result
        (a worker died) are kept and marked, the accepted attempt comes last; then its GPU
        test attempts (`test`: the accepted one's result), the same way. Written whole and
        renamed into place; a marker line per attempt makes a rerun of this step idempotent."""
        bid = build_id
        existing = [p for p in (day.running_log(bid), day.succeeded / f"{bid}.log",
                                day.failed / f"{bid}.log") if p.exists()]
        prior = b"".join(p.read_bytes() for p in existing)
        try:
            attempts = self.listing(bid).get(bid, {})
        except (PublishError, OSError) as e:
            attempts = {}
            reason = reason or f"(staging unreadable: {e})"
        parts = [prior]
        for tok in sorted(attempts):
            if tok == token or _marker(tok).encode() in prior:
                continue
            parts.append(self._earlier_attempt(bid, tok, attempts[tok]))
        if token and _marker(token).encode() not in prior:
            parts.append(_attempt_head(token, result or {}).encode())
            log = read_staged_log(self.store, attempt_prefix(self.day, bid, token),
                                  attempts.get(token, {LOG_TXT}), secrets=self.secrets)
            want = str((result or {}).get("log_sha256") or "")
            parts += [log.text, log_check(log.raw, want) if log.whole else b""]
        parts += self._tests_log(bid, test, prior)
        if reason:
            parts.append(f"\n[nightly] {reason}\n".encode())
        dest = (day.succeeded if ok else day.failed) / f"{bid}.log"
        atomic_write(dest, b"".join(parts))
        for p in existing:
            if p != dest:
                p.unlink(missing_ok=True)
        return dest

    def _earlier_attempt(self, bid: str, tok: str, names: set[str]) -> bytes:
        about = self.read(bid, tok, ATTEMPT_JSON) or {}
        if RESULT_JSON in names:
            res = self.read(bid, tok, RESULT_JSON) or {}
            if res.get("status") == INTERRUPTED:
                tail = (f"[nightly] attempt {tok} was stopped (interrupted): the run that "
                        "submitted it had gone away; not used")
            else:
                tail = (f"[nightly] attempt {tok} finished ({res.get('status', '?')}) but its "
                        "result was not used: another attempt's was")
        else:
            tail = (f"[nightly] attempt {tok} ended without a result: its worker was lost "
                    "(or it was stopped) before the build finished; its log ends here")
        return (_attempt_head(tok, about).encode() + self.attempt_log(bid, tok, names)
                + f"\n{tail}\n".encode())


    def _tests_log(self, bid: str, test: Mapping[str, object] | None, prior: bytes) -> list[bytes]:
        """The build's GPU test attempts not yet in its log, oldest first; the accepted one
        (`test`) checked against the log its worker recorded, the others marked."""
        try:
            attempts = self.listing(bid, tests=True).get(bid, {})
        except (PublishError, OSError) as e:
            return [f"\n[nightly] its GPU tests' logs: staging unreadable: {e}\n".encode()]
        accepted = str((test or {}).get("token") or "")
        parts = []
        for tok in sorted(attempts):
            if _marker(tok, "GPU test").encode() in prior:
                continue
            names = attempts[tok]
            about = self.read(bid, tok, ATTEMPT_JSON, tests=True) or {}
            log = read_staged_log(self.store, gpu_test_prefix(self.day, bid, tok), names,
                                  secrets=self.secrets)
            parts += [_attempt_head(tok, about, "GPU test").encode(), log.text]
            if tok == accepted:
                want = str((test or {}).get("log_sha256") or "")
                parts.append(log_check(log.raw, want) if log.whole else b"")
            elif RESULT_JSON in names:
                parts.append(f"\n[nightly] GPU test attempt {tok} finished but its result was "
                             "not used\n".encode())
            else:
                parts.append(f"\n[nightly] GPU test attempt {tok} ended without a result: its "
                             "worker was lost (or it was stopped) before the test finished; "
                             "its log ends here\n".encode())
        if test is not None and not accepted:  # no attempt's result: nightly's own verdict
            parts.append(f"\n[nightly] GPU test {test.get('result')}: {test.get('reason')}\n"
                         .encode())
        return parts


def _marker(token: str, what: str = "") -> str:
    return f"[nightly] cluster {what + ' ' if what else ''}attempt {token} "


def _attempt_head(token: str, about: Mapping[str, object], what: str = "") -> str:
    def field(name: str) -> str:  # attempt.json is staging's: one short line, no controls
        return "".join(c for c in str(about.get(name, "?"))[:200] if c.isprintable())

    return (f"\n{_marker(token, what)}on worker {field('worker')} "
            f"({field('worker_name')}, host {field('host')})\n")


__all__ = [
    "ATTEMPT_JSON",
    "LOG_CHUNKS",
    "LOG_TXT",
    "PACKAGES",
    "RESULT_JSON",
    "LogStreamer",
    "StagingDay",
    "StagingSpec",
    "attempt_prefix",
    "build_prefix",
    "builds_prefix",
    "gpu_test_prefix",
    "gpu_tests_prefix",
    "inputs_key",
    "make_tarball",
    "read_json",
]
