"""Cluster mode, a worker host's side of every task (a build, nightly.cluster.worker; a GPU
test, nightly.cluster.gputest): the resources workers declare, the worker's own folder, an
attempt's token and slot, the attempts this process runs (a rerun orchestrator waits for a
killed run's), orphans a dead worker left, and watching for the task's cancellation.

    <worker dir>/attempts/<token>/        one attempt's folder (a Day of its own)
    <worker dir>/attempts/<token>/owner.json   which process runs it (for reaping orphans)
    <worker dir>/inputs/<kind>-<sha>/     the day's source and recipes, fetched once per host

The worker dir is $NIGHTLY_WORKER_DIR, else `nightly-worker/` beside the worker's
`dask-scratch-space/` (that is, inside `dask worker --local-directory DIR`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from nightly.cluster.verify import new_token_part
from nightly.config import Config
from nightly.executors import make_executor
from nightly.executors.base import Job
from nightly.files import discard_tree, process_alive
from nightly.jsonvalues import as_float, read_json_object

# Worker resources (docs/cluster.md). A build takes one slot and a GPU test one gpu; a
# capability (a platform; the gpu a build never uses up) is required in amount 0: only
# workers that declare it qualify, and it is never used up.
SLOTS = "slots"
GPU = "gpu"

WORKER_DIR_ENV = "NIGHTLY_WORKER_DIR"
CANCEL_CHECK_S = 0.5
CANCEL_STRIKES = 3  # the task must look cancelled this many checks in a row
KEEP_FAILED_S = 2 * 86400  # a failed attempt's folder is kept this long for debugging

Emit = Callable[[str, Mapping[str, object]], None]
T = TypeVar("T")


PLATFORM_PREFIX = "platform-"


def platform_resource(platform: str) -> str:
    return f"{PLATFORM_PREFIX}{platform}"


# Routing (docs/cluster.md): a worker that builds for an architecture or an accelerator
# family declares it, e.g. --resources "slots=4,platform-linux=1,arch-aarch64=1,accel-rocm=1".
ARCH_PREFIX = "arch-"
ACCEL_PREFIX = "accel-"


def arch_resource(arch: str) -> str:
    return f"{ARCH_PREFIX}{arch}"


def accel_resource(family: str) -> str:
    return f"{ACCEL_PREFIX}{family}"


@dataclass(frozen=True, kw_only=True)
class WorkerInfo:
    address: str
    name: str
    folder: Path
    gpu: bool


def worker_folder(local_directory: str) -> Path:
    env = os.environ.get(WORKER_DIR_ENV)
    if env:
        return Path(env)
    local = Path(local_directory)
    for p in (local, *local.parents):
        if p.name == "dask-scratch-space":
            return p.parent / "nightly-worker"
    return local.parent / "nightly-worker"


# ---------------------------------------------------------------------------- tokens, slots


_HOST_RE = re.compile(r"[^A-Za-z0-9.-]+")


def new_token(submission: str) -> str:
    """A unique, time-ordered name for one attempt: 20240501T221530123456-<sub>-<host>-<pid>-<rand>,
    the last part 128 random bits: no other host can write ahead into an attempt's prefix."""
    now = dt.datetime.now(dt.timezone.utc)
    host = _HOST_RE.sub("-", socket.gethostname())[:40] or "host"
    return f"{now:%Y%m%dT%H%M%S%f}-{submission[:8]}-{host}-{os.getpid()}-{new_token_part()}"


class _Slots:
    """Which slot of a worker each running attempt holds (a build's `queue` in state.json)."""

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


slots = _Slots()


# The attempts running in this process (a worker), for `running_attempts`.
_live: dict[str, dict[str, object]] = {}
_live_lock = threading.Lock()


def live(token: str, about: Mapping[str, object] | None) -> None:
    """Say that attempt `token` runs in this process (`about`), or no longer (None)."""
    with _live_lock:
        if about is None:
            _live.pop(token, None)
        else:
            _live[token] = dict(about)


def running_attempts(dask_worker: object = None) -> list[dict[str, object]]:
    """The attempts (builds and GPU tests) this worker is running (run on every worker with
    `client.run`): a rerun orchestrator waits for the ones a killed run left behind to stop."""
    address = str(getattr(dask_worker, "address", "") or "")
    with _live_lock:
        return [dict(a) for a in _live.values() if not address or a["worker"] == address]


# ---------------------------------------------------------------------------- orphans


def reap_orphans(folder: Path, config: Config, executor: str, emit: Emit) -> None:
    """Attempts under this worker folder whose worker process died (kill -9, out of memory)
    may have left their recipe running (it is in a session of its own): stop it, and drop
    the folder (its log is in staging). Finished attempts' folders past their time go too."""

    root = folder / "attempts"
    if not root.is_dir():
        return
    now = time.time()
    for owner_path in sorted(root.glob("*/owner.json")):
        attempt = owner_path.parent
        owner = read_json_object(owner_path)
        if not owner:
            continue
        if owner.get("finished"):
            if now - as_float(owner.get("finished"), now) > KEEP_FAILED_S:
                discard_tree(attempt)
            continue
        if process_alive(owner):
            continue
        build_id = str(owner.get("build", ""))
        # The build's folder (a stable folder's, a build area's: written once the session
        # was open), else the attempt's own.
        work = Path(str(owner["work"])) if owner.get("work") else attempt / "work" / build_id
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
        discard_tree(attempt)


# ---------------------------------------------------------------------------- the task


def this_worker(topic: str) -> tuple[object, str, WorkerInfo, Emit]:
    """Inside a Dask task: (the worker, the task's key, this host, an emitter of events on the
    orchestrator's `topic`)."""
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

    def emit(kind: str, msg: Mapping[str, object]) -> None:
        with contextlib.suppress(Exception):  # progress only: never fail a task over it
            worker.log_event(topic, {"kind": kind, **msg})

    return worker, key, info, emit


def watch_cancel(worker: Any, key: str, emit: Emit, build_id: str) -> tuple[threading.Event,
                                                                          threading.Event]:
    """(cancel, done): `cancel` is set once the task looks cancelled; set `done` when the task
    ends. The scheduler releases a task whose client went away (the orchestrator was killed)
    or cancelled it; the worker keeps running the thread regardless: stop the recipe (or the
    test) then, rather than work for nobody."""
    cancel = threading.Event()
    done = threading.Event()

    def watch() -> None:
        strikes = 0
        while not done.wait(CANCEL_CHECK_S):
            try:
                ts = worker.state.tasks.get(key)
                gone = ts is None or ts.state == "cancelled"
            except Exception as e:  # distributed's internals moved under us
                # Without the task's state no cancel can be seen: say so in the build's
                # events rather than watch silently for nothing.
                emit("note", {"build": build_id,
                              "note": f"cancel watch stopped: {type(e).__name__}: {e}"})
                return
            strikes = strikes + 1 if gone else 0
            if strikes >= CANCEL_STRIKES:
                cancel.set()
                return

    if key:
        threading.Thread(target=watch, name=f"cancel-watch-{build_id}", daemon=True).start()
    return cancel, done


def run_task(topic: str, build_id: str,
             body: Callable[[WorkerInfo, Emit, threading.Event], T]) -> T:
    """A task's body on this worker (a build's, a GPU test's): the worker's environment out
    of the recipe's or test's reach, events on the orchestrator's `topic`, and a cancel event
    set once the scheduler has let the task go."""
    from nightly.hardening import make_undumpable

    make_undumpable()  # the worker's environment (its store credentials) out of a recipe's reach
    worker, key, info, emit = this_worker(topic)
    cancel, done = watch_cancel(worker, key, emit, build_id)
    try:
        return body(info, emit, cancel)
    finally:
        done.set()


def plain(v: object) -> object:
    return v if v is None or isinstance(v, (str, int, float, bool)) else str(v)


__all__ = [
    "GPU",
    "SLOTS",
    "Emit",
    "WorkerInfo",
    "live",
    "new_token",
    "platform_resource",
    "reap_orphans",
    "run_task",
    "running_attempts",
    "slots",
    "this_worker",
    "watch_cancel",
    "worker_folder",
]
