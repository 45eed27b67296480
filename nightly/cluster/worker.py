"""Cluster mode, the worker side: one build on a Dask worker, through the ordinary Runner.

`run_build_task(spec)` is what `nightly run --cluster` submits, once per build. On the worker
it runs the build the way `nightly run` does on one machine (Runner.run_build: log header and
footer, the configured executor, the smoke test, local retries of infrastructure failures,
package collection), in a fresh folder of its own under the worker's working folder
(`<worker dir>/attempts/<token>/`: nightly.cluster.host). With `[cluster] gpu_smoke` the
smoke test here is the CPU part only: a CUDA build's GPU part is a task of its own on a GPU
worker (nightly.cluster.gputest), submitted by the orchestrator once this build's result is in.

The build's packages and log go to the staging store (nightly.cluster.staging: its layout),
and the task returns the small dict of result.json. The orchestrating process accepts a
result only from a returned dict (or, when it resumes after being killed, from a complete
result.json): a dead attempt's half-written prefix can never be mistaken for a result.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nightly.builds.run.jobs import RunContext, make_job
from nightly.builds.session.build_session import SessionSpec, open_session, preflight_with_test_images
from nightly.builds.test.smoke import SmokeTester, night_smoke
from nightly.cluster.host import (
    Emit,
    WorkerInfo,
    live,
    new_token,
    plain,
    reap_orphans,
    run_task,
    slots,
)
from nightly.cluster.hostconfig import ENV as HOST_ENV
from nightly.cluster.hostconfig import HostSettings, host_settings, on_this_host
from nightly.cluster.hostinputs import ensure_input, prune_inputs
from nightly.cluster.messages import AttemptResult, StagedPackage, WorkerEvent
from nightly.cluster.staging import (
    ATTEMPT_JSON,
    LOG_CHUNKS,
    LOG_TXT,
    PACKAGES,
    RESULT_JSON,
    LogStreamer,
    StagingSpec,
    attempt_prefix,
    build_prefix,
    read_json,
)
from nightly.cluster.verify import seal
from nightly.config import Config
from nightly.core.matrix import Build
from nightly.errors import ConfigError, NightlyError
from nightly.executors import Executor
from nightly.files import discard_tree, process_identity, sha256_file
from nightly.hardening import USER_KEY
from nightly.jsonvalues import read_json_object
from nightly.stores import Store
from nightly.workspace import FAILED, PENDING, Day, State, write_json


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
    # The night's key sealing result.json (nightly.cluster.verify); travels only inside the
    # task, over TLS, and never in a repr (Dask logs a failed task's arguments).
    seal_key: bytes = field(default=b"", repr=False)
    # The inputs' sizes: a worker never reads more of them from staging (0: not capped).
    source_size: int = 0
    recipes_size: int = 0
    # [cluster] gpu_smoke: the GPU part of the test is a task of its own (nightly.cluster.gputest)
    gpu_stage: bool = False


def run_build_task(spec: TaskSpec) -> AttemptResult:
    """The Dask task: run `spec.build` on this worker; return its (small) result."""
    return run_task(spec.topic, spec.build.id,
                    lambda info, emit, cancel: run_on_host(spec, info, emit, cancel))


def worker_config(config: Config, recipes: Path, folder: Path, gpu: bool,
                  host: HostSettings | None = None) -> Config:
    """The night's config as this host uses it: its own copy of the recipes, the GPU
    settings of this worker (the `gpu` resource says whether it has one), and the host's own
    build user and build area (nightly.cluster.hostconfig; none: the worker's own user)."""
    smoke = replace(config.smoke, gpu=gpu)
    container = replace(config.container, gpu=config.container.gpu and gpu)
    config = on_this_host(config, host or HostSettings())
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


@dataclass(kw_only=True)
class _Attempt:
    """One attempt on this host: where it runs and what it tells the orchestrator."""

    spec: TaskSpec
    info: WorkerInfo
    store: Store
    token: str
    prefix: str
    slot: int
    started: float
    ident: dict[str, Any]
    about: dict[str, Any]

    def put_about(self, *, first: bool = False) -> None:
        # The first write is write-once: an attempt's prefix is new, or it is not this attempt's.
        self.store.put_bytes(f"{self.prefix}{ATTEMPT_JSON}", json.dumps(self.about).encode(),
                             "application/json", if_none_match=first)

    def events(self, emit: Emit) -> Callable[[str, Mapping[str, object]], None]:
        """The runner's events, as the orchestrator's topic carries them."""
        build, spec, about = self.spec.build, self.spec, self.about
        base = {"build": build.id, "token": self.token, "worker": self.info.address,
                "worker_name": self.info.name, "host": self.ident["host"], "slot": self.slot}

        def send(event: WorkerEvent) -> None:
            data = event.to_json()
            emit(event.kind, {k: v for k, v in data.items() if k != "kind"})

        def on_event(kind: str, ev: Mapping[str, Any]) -> None:
            if kind == "start":
                attempt = int(ev.get("attempt", about["attempt"]))
                if attempt != about["attempt"]:  # a local retry
                    about["attempt"] = attempt
                    with contextlib.suppress(Exception):
                        self.put_about()
                send(WorkerEvent.from_json({**base, "kind": "start", "attempt": attempt,
                                            "started": time.time(), "executor": spec.executor}))
            elif kind == "end":
                send(WorkerEvent.from_json({**base, "kind": "end", "attempt": about["attempt"],
                                            "status": str(ev.get("status")),
                                            "reason": ev.get("reason"),
                                            "duration_s": ev.get("duration_s")}))
            else:
                fields = {k: plain(v) for k, v in ev.items() if k != "build"}
                send(WorkerEvent.from_json({**base, **fields, "kind": kind}))

        return on_event


def run_on_host(
    spec: TaskSpec, info: WorkerInfo, emit: Emit, cancel: threading.Event
) -> AttemptResult:
    """One attempt of one build on this host (no Dask in here: see run_build_task)."""
    build = spec.build
    store = spec.staging.open()
    token = new_token(spec.submission)
    slot = slots.take(info.address)
    live(token, {"token": token, "build": build.id, "day": spec.day, "topic": spec.topic,
                 "worker": info.address})
    try:
        ident = process_identity()
        att = _Attempt(spec=spec, info=info, store=store, token=token, slot=slot,
                       prefix=attempt_prefix(spec.day, build.id, token), started=time.time(),
                       ident=ident, about={})
        att.about = {
            "build": build.id, "token": token, "worker": info.address, "worker_name": info.name,
            "host": ident["host"], "pid": ident["pid"], "slot": slot, "started": att.started,
            "attempt": _attempt_number(store, spec, token), "submission": spec.submission,
        }
        att.put_about(first=True)
        problem = ""
        try:
            host: HostSettings | None = host_settings()
        except NightlyError as e:  # the build fails, naming the host's file (below)
            host, problem = None, str(e)
        inputs = info.folder / "inputs"
        prune_inputs(inputs)
        source = ensure_input(store, spec.source_key, spec.source_sha256, inputs, "source",
                              size=spec.source_size)
        recipes = ensure_input(store, spec.recipes_key, spec.recipes_sha256, inputs, "recipes",
                               size=spec.recipes_size)
        config = worker_config(spec.config, recipes, info.folder, info.gpu, host)
        reap_orphans(info.folder, config, spec.executor, emit)
        day = Day(info.folder / "attempts", spec.date, name=token)
        day.create()
        owner_path = day.path / "owner.json"
        write_json(owner_path, {**ident, "build": build.id, "package": build.package,
                                "token": token, "started": att.started})
        state = State(day.state_path)
        state.update(build.id, status=PENDING, attempts=att.about["attempt"] - 1)
        ctx = RunContext(config=config, day=day, state=state, source_dir=source,
                         version=spec.version, channel=spec.channel, machine=info.address)
        if host is None:
            _preflight_failed(day, state, build, problem, att.about["attempt"])
            executor_name, chunks = spec.executor, 0
        else:
            executor_name, chunks = _run(att, ctx, emit, cancel)
        result = _put_result(att, day, state, executor_name, chunks)
        if result.status == FAILED:
            write_json(owner_path, {**ident, "build": build.id, "token": token,
                                    "started": att.started, "finished": time.time()})
        else:
            discard_tree(day.path)
        return result
    finally:
        slots.give(info.address, slot)
        live(token, None)


def _run(
    att: _Attempt, ctx: RunContext, emit: Emit, cancel: threading.Event
) -> tuple[str, int]:
    """The build through the ordinary Runner, its log streamed to staging as it grows.
    Returns the executor's name and how many log chunks were streamed."""
    spec, build, day = att.spec, att.spec.build, ctx.day

    def locate() -> Path | None:
        running = day.running_log(build.id)
        return running if running.exists() else day.final_log(build.id)

    streamer = LogStreamer(att.store, f"{att.prefix}{LOG_CHUNKS}", locate,
                           spec.log_flush_s).start()

    def smoke(ex: Executor) -> SmokeTester | None:
        # [cluster] gpu_smoke: the GPU part is a task of its own (gpu_stage); else it runs
        # here if this worker declares the gpu resource (worker_config).
        return night_smoke(ctx.config, ex, ctx.source_dir, where=ctx.machine,
                           gpu_stage=spec.gpu_stage)

    try:
        # The worker's session (builds/session.py), as a night's local phase on this host:
        # the host's build user and build area (worker_config), and a stable build folder of
        # this worker slot's own (a host's attempts run side by side), else the day folder.
        session = SessionSpec(executor=spec.executor, keep_container=spec.keep_container,
                              stable_under=f"slots/{att.slot}", stamp=spec.commit,
                              smoke=smoke, preflight=preflight_with_test_images,
                              log=lambda line: emit("note", {"build": build.id, "note": line}))
        with open_session(ctx, [build], session, refused=lambda e: _preflight_failed(
                day, ctx.state, build, _on_this_worker(e), att.about["attempt"])) as builds:
            name = spec.executor if builds is None else builds.executor.name
            if builds is not None:
                # Where the build runs (a stable folder of this slot's): a worker that dies
                # leaves its recipe to reap there (host.reap_orphans).
                job = make_job(builds.ctx, build, executor=name)
                owner = day.path / "owner.json"
                write_json(owner, {**read_json_object(owner), "work": str(job.work_dir.parent)})
                builds.runner(att.events(emit), cancel).run_build(build, queue=att.slot)
    finally:
        streamer.stop()
    return name, streamer.chunks


def _put_result(
    att: _Attempt, day: Day, state: State, executor_name: str, chunks: int
) -> AttemptResult:
    """The attempt's log and packages into staging, then (last) its result.json."""
    spec, build, prefix, info = att.spec, att.spec.build, att.prefix, att.info
    entry = state.get(build.id)
    log = day.final_log(build.id) or day.running_log(build.id)
    log_sha = sha256_file(log) if log.exists() else ""
    if log_sha:
        att.store.put(f"{prefix}{LOG_TXT}", log, log_sha)
    packages = []
    for p in entry.packages:
        key = f"{prefix}{PACKAGES}{p.name}"
        att.store.put(key, day.path / p.path, p.sha256)
        packages.append(StagedPackage(name=p.name, size=p.size, sha256=p.sha256, key=key).to_json())
    result = AttemptResult(
        build=build.id, token=att.token, submission=spec.submission,
        worker=info.address, worker_name=info.name, host=att.ident["host"],
        slot=att.slot, status=entry.status or FAILED,
        reason=entry.reason, exit_status=entry.exit_status, infra=bool(entry.infra),
        attempts=entry.attempts or att.about["attempt"],
        started=entry.started or att.started, ended=entry.ended or time.time(),
        duration_s=entry.duration_s or 0.0, executor=executor_name,
        packages=tuple(packages), log_key=f"{prefix}{LOG_TXT}" if log_sha else "",
        log_sha256=log_sha, log_chunks=chunks,
        commit=spec.commit, version=spec.version, channel=spec.channel,
        cache=entry.cache,  # the compiler cache's statistics (nightly.builds.cache.wiring)
        tested=entry.tested,  # the test stage's record so far (nightly.builds.test.smoke)
    )
    if spec.seal_key:
        result = replace(result, seal=seal(spec.seal_key, result.to_json()))
    att.store.put_bytes(f"{prefix}{RESULT_JSON}", json.dumps(result.to_json()).encode(),
                        "application/json", if_none_match=True)
    return result


def _on_this_worker(e: NightlyError) -> str:
    """A refusal's line; one about who builds says where a worker host sets that: the night's
    own [executor.local] user never reaches a worker (cluster.hostconfig)."""
    if isinstance(e, ConfigError) and e.key == USER_KEY and not os.environ.get(HOST_ENV):
        return (f"{e} (on a cluster worker the build user is the worker host's own: set "
                f"[executor.local] user in a file ${HOST_ENV} names in the worker's "
                "environment; docs/cluster.md)")
    return str(e)


def _preflight_failed(day: Day, state: State, build: Build, reason: str, attempt: int) -> None:
    now = time.time()
    log = day.running_log(build.id)
    with log.open("ab") as f:
        f.write(f"nightly build {build.id}  (attempt {attempt})\n"
                f"[nightly] the executor cannot run this build here: {reason}\n".encode())
    final = day.file_log(build.id, False)
    state.update(build.id, status=FAILED, reason=reason, infra=True, attempts=attempt,
                 started=now, ended=now, duration_s=0.0, packages=[],
                 log=str(final.relative_to(day.path)))


__all__ = ["TaskSpec", "run_build_task", "run_on_host", "worker_config"]
