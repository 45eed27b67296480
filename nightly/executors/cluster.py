"""Cluster mode, the worker side: one build on a Dask worker, through the ordinary Runner.

`run_build_task(spec)` is what `nightly run --cluster` submits, once per build. On the worker
it runs the build the way `nightly run` does on one machine (Runner.run_build: log header and
footer, the configured executor, the smoke test, local retries of infrastructure failures,
package collection), in a fresh folder of its own under the worker's working folder:

    <worker dir>/attempts/<token>/        a Day of its own (logs/, packages/, work/, state.json)
    <worker dir>/attempts/<token>/owner.json   which process runs it (for reaping orphans)
    <worker dir>/inputs/<kind>-<sha>/     the day's source and recipes, fetched once per host

The worker dir is $NIGHTLY_WORKER_DIR, else `nightly-worker/` beside the worker's
`dask-scratch-space/` (that is, inside `dask worker --local-directory DIR`).

Nothing big travels through the scheduler. The build's packages and log go to the staging
store (a shared folder or an S3 prefix, `nightly.publish.stores`), under a key prefix that is
unique to this attempt (`<day>/builds/<build-id>/<token>/`):

    attempt.json        written first: worker, host, process, start time
    log/000001 ...      the log as it grows, one object per flush (every cluster.log_flush),
                        so a worker that dies leaves what it had written
    log.txt             the whole log, at the end
    packages/<name>     the packages, with their sha256
    result.json         written last, and only by an attempt that got to the end

and the task returns the small dict of result.json. The orchestrating process accepts a
result only from a returned dict (or, when it resumes after being killed, from a complete
result.json): a dead attempt's half-written prefix can never be mistaken for a result.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import gzip
import hashlib
import json
import os
import random
import re
import shutil
import socket
import tarfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nightly.config import Config
from nightly.matrix import Build

if TYPE_CHECKING:
    from nightly.publish.stores import Store

# Staging layout (keys relative to the staging store's root).
ATTEMPT_JSON = "attempt.json"
RESULT_JSON = "result.json"
LOG_TXT = "log.txt"
LOG_CHUNKS = "log/"
PACKAGES = "packages/"

# Worker resources (docs/cluster.md). A build takes one slot; a capability (platform, GPU)
# is required in amount 0: only workers that declare it qualify, and it is never used up.
SLOTS = "slots"
GPU = "gpu"

WORKER_DIR_ENV = "NIGHTLY_WORKER_DIR"
CANCEL_CHECK_S = 0.5
CANCEL_STRIKES = 3  # the task must look cancelled this many checks in a row
KEEP_FAILED_S = 2 * 86400  # a failed attempt's folder is kept this long for debugging

Emit = Callable[[str, Mapping[str, Any]], None]


def platform_resource(platform: str) -> str:
    return f"platform-{platform}"


def builds_prefix(day: str) -> str:
    return f"{day}/builds/"


def build_prefix(day: str, build_id: str) -> str:
    return f"{day}/builds/{build_id}/"


def attempt_prefix(day: str, build_id: str, token: str) -> str:
    return f"{day}/builds/{build_id}/{token}/"


def inputs_key(day: str, kind: str, sha256: str) -> str:
    return f"{day}/inputs/{kind}-{sha256[:16]}.tar.gz"


# ---------------------------------------------------------------------------- the task spec


@dataclass(frozen=True, kw_only=True)
class StagingSpec:
    url: str
    endpoint_url: str = ""
    region: str = ""
    profile: str = ""

    def open(self) -> Store:
        return _store(self)


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    """Everything a worker needs for one build (small: the config travels without its
    expanded matrix)."""

    config: Config
    build: Build
    day: str  # the day folder's name
    date: dt.date
    version: str
    channel: str
    commit: str
    executor: str  # local | container
    keep_container: bool
    staging: StagingSpec
    source_key: str
    source_sha256: str
    recipes_key: str
    recipes_sha256: str
    attempts: int  # attempts state.json had recorded when the build was submitted
    submission: str  # unique per submission; attempts of one submission share it
    topic: str  # the orchestrator's event topic
    log_flush_s: float


@dataclass(frozen=True, kw_only=True)
class WorkerInfo:
    address: str
    name: str
    folder: Path
    gpu: bool


_stores: dict[StagingSpec, Store] = {}
_stores_lock = threading.Lock()


def _store(spec: StagingSpec) -> Store:
    """One Store per staging destination per process (an S3 client is costly to make)."""
    from nightly.publish.stores import open_store

    with _stores_lock:
        store = _stores.get(spec)
        if store is None:
            store = open_store(
                spec.url,
                endpoint_url=spec.endpoint_url or None,
                region=spec.region or None,
                profile=spec.profile or None,
            )
            _stores[spec] = store
        return store


# ---------------------------------------------------------------------------- tokens, slots


_HOST_RE = re.compile(r"[^A-Za-z0-9.-]+")


def new_token(submission: str) -> str:
    """A unique, time-ordered name for one attempt: 20240501T221530123456-<sub>-<host>-<pid>-<rand>."""
    now = dt.datetime.now(dt.timezone.utc)
    host = _HOST_RE.sub("-", socket.gethostname())[:40] or "host"
    return f"{now:%Y%m%dT%H%M%S%f}-{submission[:8]}-{host}-{os.getpid()}-{random.getrandbits(16):04x}"


class _Slots:
    """Which build slot of a worker each running build holds (its `queue` in state.json)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._used: dict[str, set[int]] = {}

    def take(self, worker: str) -> int:
        with self._lock:
            used = self._used.setdefault(worker, set())
            slot = next(i for i in range(len(used) + 1) if i not in used)
            used.add(slot)
            return slot

    def give(self, worker: str, slot: int) -> None:
        with self._lock:
            self._used.get(worker, set()).discard(slot)


_slots = _Slots()

# The attempts running in this process (a worker), for `running_attempts`.
_live: dict[str, dict[str, Any]] = {}
_live_lock = threading.Lock()


def running_attempts(dask_worker: Any = None) -> list[dict[str, Any]]:
    """The build attempts this worker is running (run on every worker with `client.run`):
    a rerun orchestrator waits for the ones a killed run left behind to stop."""
    address = str(getattr(dask_worker, "address", "") or "")
    with _live_lock:
        return [dict(a) for a in _live.values() if not address or a["worker"] == address]


# ---------------------------------------------------------------------------- tarballs


def make_tarball(src: Path, dest: Path) -> str:
    """A gzipped tar of `src` that is byte-for-byte the same for the same tree (sorted
    entries, no owners, gzip without a timestamp). Returns its sha256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".partial")

    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = int(info.mtime)
        return info

    with open(tmp, "wb") as raw, gzip.GzipFile(
        filename="", fileobj=raw, mode="wb", mtime=0, compresslevel=6
    ) as gz, tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path in _walk(src):
            tar.add(path, arcname=path.relative_to(src).as_posix(), recursive=False, filter=clean)
    os.replace(tmp, dest)
    return _sha256(dest)


def _walk(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        d = Path(dirpath)
        if d != root:
            yield d
        for name in sorted(filenames):
            yield d / name
        # symlinks to folders are listed in dirnames but not followed: add them as links
        for name in dirnames:
            if (d / name).is_symlink():
                yield d / name
        dirnames[:] = [n for n in dirnames if not (d / n).is_symlink()]


def _extract(archive: Path, dest: Path) -> None:
    with tarfile.open(archive, "r:gz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="tar")
        else:  # pragma: no cover - Python without extraction filters
            tar.extractall(dest)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def ensure_input(store: Store, key: str, sha256: str, folder: Path, kind: str) -> Path:
    """The day's source or recipes on this host: fetched from staging and unpacked once per
    content (several builds of one host share it; an flock makes them wait for one fetch)."""
    from nightly.errors import NightlyError

    folder.mkdir(parents=True, exist_ok=True)
    name = f"{kind}-{sha256[:16]}"
    dest, done = folder / name, folder / f"{name}.ok"
    fd = os.open(folder / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if done.exists() and dest.is_dir():
            done.touch()  # its time of last use, for prune_inputs
            return dest
        archive = folder / f"{name}.tar.gz"
        store.get(key, archive)
        got = _sha256(archive)
        if got != sha256:
            raise NightlyError(f"staging {key}: sha256 {got} is not the expected {sha256}")
        tmp = folder / f"{name}.partial"
        if tmp.exists():
            shutil.rmtree(tmp)
        if dest.exists():
            shutil.rmtree(dest)
        tmp.mkdir()
        _extract(archive, tmp)
        os.replace(tmp, dest)
        archive.unlink()
        done.touch()
        return dest
    finally:
        os.close(fd)  # releases the flock


def prune_inputs(folder: Path, keep_s: float = KEEP_FAILED_S) -> None:
    """Drop fetched sources and recipes not used for `keep_s` (one is fetched per day)."""
    now = time.time()
    for done in folder.glob("*.ok"):
        name = done.name[: -len(".ok")]
        try:
            if now - done.stat().st_mtime < keep_s:
                continue
        except OSError:
            continue
        lock = folder / f"{name}.lock"
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue  # being fetched right now: in use
        try:
            done.unlink(missing_ok=True)
            shutil.rmtree(folder / name, ignore_errors=True)
            lock.unlink(missing_ok=True)
        finally:
            os.close(fd)


# ---------------------------------------------------------------------------- orphans


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _start_time(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def process_identity() -> dict[str, Any]:
    pid = os.getpid()
    return {"pid": pid, "start": _start_time(pid), "boot": _boot_id(), "host": socket.gethostname()}


def _alive(owner: Mapping[str, Any]) -> bool:
    """Is the process recorded in an owner.json still the one running? Unknown: yes."""
    if owner.get("host") != socket.gethostname():
        return True  # another host's folder (a shared disk): not ours to judge
    if owner.get("boot") and owner.get("boot") != _boot_id():
        return False
    try:
        pid = int(owner["pid"])
    except (KeyError, TypeError, ValueError):
        return True
    start = _start_time(pid)
    if start is not None:
        return owner.get("start") in (None, start)
    if Path("/proc").is_dir():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_orphans(folder: Path, config: Config, executor: str, emit: Emit) -> None:
    """Attempts under this worker folder whose worker process died (kill -9, out of memory)
    may have left their recipe running (it is in a session of its own): stop it, and drop
    the folder (its log is in staging). Finished attempts' folders past their time go too."""
    from nightly.executors.base import Job
    from nightly.night import make_executor

    root = folder / "attempts"
    if not root.is_dir():
        return
    now = time.time()
    for owner_path in sorted(root.glob("*/owner.json")):
        attempt = owner_path.parent
        try:
            owner = json.loads(owner_path.read_text())
        except (OSError, ValueError):
            continue
        if owner.get("finished"):
            if now - float(owner.get("finished") or now) > KEEP_FAILED_S:
                shutil.rmtree(attempt, ignore_errors=True)
            continue
        if _alive(owner):
            continue
        build_id = str(owner.get("build", ""))
        work = attempt / "work" / build_id
        job = Job(
            build_id=build_id, package=str(owner.get("package", "")), python="", cuda="cpu",
            env={}, recipes_dir=attempt, source_dir=attempt, output_dir=work / "out",
            work_dir=work / "scratch", timeout_s=1.0,
        )
        notes: list[str] = []
        for name in dict.fromkeys(("local", executor)):
            with contextlib.suppress(Exception), make_executor(name, config) as ex:
                notes += ex.reap(job)
        for note in notes:
            emit("note", {"build": build_id, "note": note})
        shutil.rmtree(attempt, ignore_errors=True)


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
        self._file: Any = None
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
        from nightly.errors import PublishError

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


# ---------------------------------------------------------------------------- the task


def worker_folder(local_directory: str) -> Path:
    env = os.environ.get(WORKER_DIR_ENV)
    if env:
        return Path(env)
    local = Path(local_directory)
    for p in (local, *local.parents):
        if p.name == "dask-scratch-space":
            return p.parent / "nightly-worker"
    return local.parent / "nightly-worker"


def run_build_task(spec: TaskSpec) -> dict[str, Any]:
    """The Dask task: run `spec.build` on this worker; return the small result dict."""
    from dask.context import thread_state
    from distributed import get_worker

    worker = get_worker()
    key = str(getattr(thread_state, "key", ""))
    resources = dict(getattr(worker.state, "total_resources", {}) or {})
    info = WorkerInfo(
        address=str(worker.address),
        name=str(worker.name),
        folder=worker_folder(str(worker.local_directory)),
        gpu=GPU in resources,
    )

    def emit(kind: str, msg: Mapping[str, Any]) -> None:
        with contextlib.suppress(Exception):  # progress only: never fail a build over it
            worker.log_event(spec.topic, {"kind": kind, **msg})

    cancel = threading.Event()
    done = threading.Event()

    def watch() -> None:
        # The scheduler releases a task whose client went away (the orchestrator was
        # killed) or cancelled it; the worker keeps running the thread regardless. Stop
        # the recipe then, rather than build for nobody.
        strikes = 0
        while not done.wait(CANCEL_CHECK_S):
            try:
                ts = worker.state.tasks.get(key)
                gone = ts is None or ts.state == "cancelled"
            except Exception:
                return
            strikes = strikes + 1 if gone else 0
            if strikes >= CANCEL_STRIKES:
                cancel.set()
                return

    watcher = threading.Thread(target=watch, name=f"cancel-watch-{spec.build.id}", daemon=True)
    if key:
        watcher.start()
    try:
        return run_on_host(spec, info, emit, cancel)
    finally:
        done.set()


def worker_config(config: Config, recipes: Path, folder: Path, gpu: bool) -> Config:
    """The night's config as this host uses it: its own copy of the recipes, and the GPU
    settings of this worker (the `gpu` resource says whether it has one)."""
    smoke = replace(config.smoke, gpu=gpu)
    container = replace(config.container, gpu=config.container.gpu and gpu)
    return replace(config, recipes=recipes, root=folder, smoke=smoke, container=container)


def _attempt_number(store: Store, spec: TaskSpec, token: str) -> int:
    """This attempt's number: one more than any attempt of this build seen so far, in
    state.json when it was submitted or in staging (attempts on workers that died, or of a
    run that was killed before it heard of them)."""
    prefix = build_prefix(spec.day, spec.build.id)
    best = spec.attempts
    for obj in list(store.list(prefix)):
        tok, _, rest = obj.key[len(prefix):].partition("/")
        if rest == ATTEMPT_JSON and tok != token:
            about = read_json(store, obj.key) or {}
            with contextlib.suppress(TypeError, ValueError):
                best = max(best, int(about.get("attempt") or 0))
    return best + 1


def run_on_host(
    spec: TaskSpec, info: WorkerInfo, emit: Emit, cancel: threading.Event
) -> dict[str, Any]:
    """One attempt of one build on this host (no Dask in here: see run_build_task)."""
    from nightly.errors import NightlyError
    from nightly.night import make_executor
    from nightly.runner import RunContext, Runner, make_job
    from nightly.workspace import FAILED, PENDING, Day, State, write_json

    build = spec.build
    store = spec.staging.open()
    token = new_token(spec.submission)
    prefix = attempt_prefix(spec.day, build.id, token)
    slot = _slots.take(info.address)
    started = time.time()
    ident = process_identity()
    with _live_lock:
        _live[token] = {"token": token, "build": build.id, "day": spec.day, "topic": spec.topic,
                        "worker": info.address}
    try:
        attempt = _attempt_number(store, spec, token)
        about: dict[str, Any] = {
            "build": build.id, "token": token, "worker": info.address, "worker_name": info.name,
            "host": ident["host"], "pid": ident["pid"], "slot": slot, "started": started,
            "attempt": attempt, "submission": spec.submission,
        }
        store.put_bytes(f"{prefix}{ATTEMPT_JSON}", json.dumps(about).encode(), "application/json")
        reap_orphans(info.folder, spec.config, spec.executor, emit)
        inputs = info.folder / "inputs"
        prune_inputs(inputs)
        source = ensure_input(store, spec.source_key, spec.source_sha256, inputs, "source")
        recipes = ensure_input(store, spec.recipes_key, spec.recipes_sha256, inputs, "recipes")
        config = worker_config(spec.config, recipes, info.folder, info.gpu)

        day = Day(info.folder / "attempts", spec.date, name=token)
        day.create()
        owner_path = day.path / "owner.json"
        write_json(owner_path, {**ident, "build": build.id, "package": build.package,
                                "token": token, "started": started})
        state = State(day.state_path)
        state.update(build.id, status=PENDING, attempts=attempt - 1)
        ctx = RunContext(
            config=config, day=day, state=state, source_dir=source, version=spec.version,
            channel=spec.channel, machine=info.address,
        )
        current = {"attempt": attempt}

        def on_event(kind: str, ev: Mapping[str, Any]) -> None:
            base = {"build": build.id, "token": token, "worker": info.address,
                    "worker_name": info.name, "host": ident["host"], "slot": slot}
            if kind == "start":
                current["attempt"] = int(ev.get("attempt", current["attempt"]))
                if current["attempt"] != about["attempt"]:  # a local retry
                    about["attempt"] = current["attempt"]
                    with contextlib.suppress(Exception):
                        store.put_bytes(f"{prefix}{ATTEMPT_JSON}", json.dumps(about).encode(),
                                        "application/json")
                emit("start", {**base, "attempt": current["attempt"], "started": time.time(),
                               "executor": spec.executor})
            elif kind == "end":
                emit("end", {**base, "attempt": current["attempt"],
                             "status": str(ev.get("status")), "reason": ev.get("reason"),
                             "duration_s": float(ev.get("duration_s") or 0.0)})
            else:
                emit(kind, {**base, **{k: _plain(v) for k, v in ev.items() if k != "build"}})

        def locate() -> Path | None:
            running = day.running_log(build.id)
            return running if running.exists() else day.final_log(build.id)

        streamer = LogStreamer(store, f"{prefix}{LOG_CHUNKS}", locate, spec.log_flush_s).start()
        try:
            with make_executor(spec.executor, config, keep_container=spec.keep_container) as ex:
                executor_name = ex.name
                try:
                    ex.preflight([make_job(ctx, build, executor=ex.name)])
                except NightlyError as e:
                    _preflight_failed(day, state, build, str(e), attempt)
                else:
                    from nightly.smoke import SmokeTester

                    smoke = SmokeTester(config, ex, source) if config.smoke.enabled else None
                    runner = Runner(ctx, ex, on_event=on_event, cancel=cancel, smoke=smoke)
                    runner.run_build(build, queue=slot)
        finally:
            streamer.stop()

        entry = state.get(build.id)
        log = day.final_log(build.id) or day.running_log(build.id)
        log_sha = _sha256(log) if log.exists() else ""
        if log_sha:
            store.put(f"{prefix}{LOG_TXT}", log, log_sha)
        packages = []
        for p in entry.get("packages") or []:
            key = f"{prefix}{PACKAGES}{p['name']}"
            store.put(key, day.path / p["path"], p["sha256"])
            packages.append({"name": p["name"], "size": p["size"], "sha256": p["sha256"],
                             "key": key})
        status = str(entry.get("status") or FAILED)
        result: dict[str, Any] = {
            "build": build.id, "token": token, "submission": spec.submission,
            "worker": info.address, "worker_name": info.name, "host": ident["host"],
            "slot": slot, "status": status, "reason": entry.get("reason"),
            "exit_status": entry.get("exit_status"), "infra": bool(entry.get("infra")),
            "attempts": int(entry.get("attempts") or attempt),
            "started": entry.get("started") or started, "ended": entry.get("ended") or time.time(),
            "duration_s": entry.get("duration_s") or 0.0, "executor": executor_name,
            "packages": packages, "log_key": f"{prefix}{LOG_TXT}" if log_sha else "",
            "log_sha256": log_sha, "log_chunks": streamer.chunks,
            "commit": spec.commit, "version": spec.version, "channel": spec.channel,
        }
        store.put_bytes(f"{prefix}{RESULT_JSON}", json.dumps(result).encode(), "application/json")
        if status == FAILED:
            write_json(owner_path, {**ident, "build": build.id, "token": token,
                                    "started": started, "finished": time.time()})
        else:
            shutil.rmtree(day.path, ignore_errors=True)
        return result
    finally:
        _slots.give(info.address, slot)
        with _live_lock:
            _live.pop(token, None)


def _preflight_failed(day: Any, state: Any, build: Build, reason: str, attempt: int) -> None:
    from nightly.workspace import FAILED

    now = time.time()
    log = day.running_log(build.id)
    with log.open("ab") as f:
        f.write(f"nightly build {build.id}  (attempt {attempt})\n"
                f"[nightly] the executor cannot run this build here: {reason}\n".encode())
    final = day.file_log(build.id, False)
    state.update(build.id, status=FAILED, reason=reason, infra=True, attempts=attempt,
                 started=now, ended=now, duration_s=0.0, packages=[],
                 log=str(final.relative_to(day.path)))


def _plain(v: Any) -> Any:
    return v if v is None or isinstance(v, (str, int, float, bool)) else str(v)


def read_json(store: Store, key: str) -> dict[str, Any] | None:
    got = store.get_bytes(key)
    if got is None:
        return None
    try:
        data = json.loads(got[0])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


__all__ = [
    "GPU",
    "SLOTS",
    "LogStreamer",
    "StagingSpec",
    "TaskSpec",
    "attempt_prefix",
    "build_prefix",
    "ensure_input",
    "inputs_key",
    "make_tarball",
    "platform_resource",
    "run_build_task",
    "run_on_host",
    "running_attempts",
]
