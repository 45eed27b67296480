"""Cluster mode, the test stage on a GPU worker: the GPU part of one CUDA build's test.

With `[cluster] gpu_smoke`, a CUDA build is built (and its CPU part tested) on a CPU worker;
once its result is in, the orchestrator submits `run_gpu_test_task(spec)`, a Dask task that
needs the `gpu` resource, so only GPU workers run it (docs/cluster.md). Here it:

- fetches the build's wheels from staging (the build attempt's prefix; no symlink followed,
  never more than the size the build's worker reported) and checks each against the size and
  sha256 that worker reported over the authenticated channel (`spec.packages`): a package
  changed in staging is not tested, and the test fails (so the build is not published);
- runs the GPU part as one machine runs it (nightly.builds.test.smoke.SmokeTester.gpu_part: a fresh
  venv, or a fresh container with GPU access, `[smoke] gpu_check` and `gpu_command`, its own
  log section, `gpu_timeout` and `gpu_retries`) with the build's environment and executor;
- writes its log and (last, sealed) its result under `<day>/tests/<build-id>/<token>/`, and
  returns the result (nightly.cluster.messages.GpuTestResult).

The orchestrator appends the log to the build's and records the result as the build's
`tested.gpu`; the build is filed (and so published) only then.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from pathlib import Path

from nightly.builds.run.jobs import RunContext, make_job
from nightly.builds.test.smoke import FAILED, NOT_RUN, SmokeTester, preflight_jobs, stage_part
from nightly.cluster.host import (
    Emit,
    WorkerInfo,
    live,
    new_token,
    reap_orphans,
    run_task,
)
from nightly.cluster.hostinputs import ensure_input
from nightly.cluster.messages import GpuTestResult, GpuTestSpec, WorkerEvent
from nightly.cluster.staging import (
    ATTEMPT_JSON,
    LOG_CHUNKS,
    LOG_TXT,
    RESULT_JSON,
    LogStreamer,
    attempt_prefix,
    gpu_test_prefix,
)
from nightly.cluster.verify import check_packages, seal
from nightly.cluster.worker import worker_config
from nightly.errors import NightlyError
from nightly.executors import make_executor
from nightly.files import discard_tree, process_identity, sha256_file
from nightly.redact import Masker, secret_values
from nightly.stores import Store
from nightly.workspace import Day, State, write_json
from nightly.workspace.records import TestPart

NOT_TESTED = ("verifying staging: a package is not the one its build's worker built (changed "
              "in staging?); not tested")
SOURCE_NOT_READ = "the day's source could not be read from staging; not tested"


def run_gpu_test_task(spec: GpuTestSpec) -> GpuTestResult:
    """The Dask task: the GPU part of `spec.build`'s test on this (GPU) worker."""
    return run_task(spec.topic, spec.build.id,
                    lambda info, emit, cancel: gpu_test_on_host(spec, info, emit, cancel))


def fetch_wheels(store: Store, spec: GpuTestSpec, dest: Path) -> list[Path]:
    """The build's wheels from staging into `dest`, each checked against what the build's
    worker reported (ValueError, or the store's error, when one is not)."""
    prefix = attempt_prefix(spec.day, spec.build.id, spec.build_token)
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for p in check_packages([p.to_json() for p in spec.packages], prefix):
        if not p.name.endswith(".whl"):
            continue  # the GPU part tests wheels
        f = dest / p.name
        store.get(p.key, f, max_bytes=p.size)  # never read past the reported size
        size, digest = f.stat().st_size, sha256_file(f)
        if (size, digest) != (p.size, p.sha256):
            raise ValueError(f"{p.name}: staging holds {size} bytes sha256 {digest}, the "
                             f"build's worker reported {p.size} bytes sha256 {p.sha256}")
        out.append(f)
    return out


def gpu_test_on_host(
    spec: GpuTestSpec, info: WorkerInfo, emit: Emit, cancel: threading.Event
) -> GpuTestResult:
    """One attempt of one build's GPU test on this host (no Dask in here)."""
    build, store = spec.build, spec.staging.open()
    token = new_token(spec.submission)
    prefix = gpu_test_prefix(spec.day, build.id, token)
    ident, started = process_identity(), time.time()
    about = {"build": build.id, "token": token, "build_token": spec.build_token,
             "worker": info.address, "worker_name": info.name, "host": ident["host"],
             "pid": ident["pid"], "started": started, "submission": spec.submission,
             "kind": "gpu test"}
    live(token, {**about, "day": spec.day, "topic": spec.topic})
    try:
        store.put_bytes(f"{prefix}{ATTEMPT_JSON}", json.dumps(about).encode(),
                        "application/json", if_none_match=True)
        event = WorkerEvent(kind="test-start", build=build.id, token=token, worker=info.address,
                            worker_name=info.name, host=str(ident["host"]), started=started)
        emit(event.kind, {k: v for k, v in event.to_json().items() if k != "kind"})
        reap_orphans(info.folder, spec.config, spec.executor, emit)
        day = Day(info.folder / "attempts", spec.date, name=token)
        day.create()
        owner = day.path / "owner.json"
        write_json(owner, {**ident, "build": build.id, "package": build.package,
                           "token": token, "started": started})
        log = day.path / "gpu-test.log"
        streamer = LogStreamer(store, f"{prefix}{LOG_CHUNKS}",
                               lambda: log if log.exists() else None, spec.log_flush_s).start()
        try:
            part = _test(spec, info, day, log, cancel)
            if cancel.is_set():  # released (its orchestrator went away): no result, as a
                part = stage_part(NOT_RUN, info.address, started,  # dead worker's attempt
                                  reason="stopped: its task was released")
        finally:
            streamer.stop()
        result = _put_result(spec, store, info, token, prefix, log, part, started,
                             str(ident["host"]), streamer.chunks, final=not cancel.is_set())
        if result.result == FAILED:  # kept for debugging, as a failed build's folder
            write_json(owner, {**ident, "build": build.id, "token": token, "started": started,
                               "finished": time.time()})
        else:
            discard_tree(day.path)
        return result
    finally:
        live(token, None)


def _test(spec: GpuTestSpec, info: WorkerInfo, day: Day, log: Path,
          cancel: threading.Event) -> TestPart:
    """Fetch and check the wheels, then the GPU part; its output into `log`. Returns the
    build's `tested.gpu`."""
    build, started = spec.build, time.time()
    store = spec.staging.open()
    masker = Masker(secret_values(spec.config))  # the worker's config has the same secrets
    with log.open("ab", buffering=0) as f:
        lock = threading.Lock()

        def out(chunk: bytes) -> None:
            with lock:
                f.write(masker.feed(chunk))

        out(f"nightly GPU test of {build.id} on worker {info.address} ({info.name}): the "
            f"packages of build attempt {spec.build_token}\n".encode())

        def untested(why: str, result: str = FAILED) -> TestPart:
            out(f"gpu test: {why}\n".encode())
            f.write(masker.flush())
            return stage_part(result, info.address, started, reason=why)

        # Both from staging, which other hosts write: a source or a package that is not what
        # was staged fails the test, in its log, and never leaves it merely "not run".
        try:
            source = ensure_input(store, spec.source_key, spec.source_sha256,
                                  info.folder / "inputs", "source", size=spec.source_size)
        except (NightlyError, OSError, ValueError) as e:
            return untested(f"GPU test: {SOURCE_NOT_READ}: {e}")
        try:
            wheels = fetch_wheels(store, spec, day.work / build.id / "packages")
        except (NightlyError, OSError, ValueError) as e:
            return untested(f"GPU test: {NOT_TESTED}: {e}")
        for w in wheels:
            out(f"gpu test: {w.name}: size and sha256 as its build's worker reported\n".encode())
        config = worker_config(spec.config, source, info.folder, info.gpu)
        ctx = RunContext(config=config, day=day, state=State(day.state_path), source_dir=source,
                         version=spec.version, channel=spec.channel, machine=info.address)
        with make_executor(spec.executor, config, keep_container=spec.keep_container) as ex:
            job = make_job(ctx, build, executor=ex.name)
            job.work_dir.parent.mkdir(parents=True, exist_ok=True)
            tester = SmokeTester(config, ex, source, where=info.address, gpu_host=info.gpu)
            try:
                # A worker without the test's image tests nothing: not run (its reason names
                # the image), not a failure of a package that was never tested.
                ex.preflight(preflight_jobs(config, build, job, "gputest")[1:] or [job])
            except NightlyError as e:
                why = f"GPU test: not run on {info.address}: {' '.join(str(e).split())}"
                return replace(untested(why, NOT_RUN), worker_name=info.name)
            try:
                _, part = tester.gpu_part(build, wheels, job, out, cancel)
            except Exception as e:  # a test-stage bug fails this test only
                why = f"GPU test: error: {e!r}"
                out(f"gpu test: {why}\n".encode())
                part = stage_part(FAILED, info.address, started, reason=why)
        f.write(masker.flush())
    return replace(part, worker_name=info.name)


def _put_result(spec: GpuTestSpec, store: Store, info: WorkerInfo, token: str, prefix: str,
                log: Path, part: TestPart, started: float, host: str,
                chunks: int, *, final: bool = True) -> GpuTestResult:
    """The test's log into staging, then (last, write-once, sealed, unless it was stopped:
    not `final`) its result.json."""
    log_sha = sha256_file(log) if log.exists() else ""
    if log_sha:
        store.put(f"{prefix}{LOG_TXT}", log, log_sha)
    result = GpuTestResult(
        build=spec.build.id, token=token, build_token=spec.build_token,
        submission=spec.submission, worker=info.address, worker_name=info.name, host=host,
        result=part.result or FAILED, reason=part.reason,
        part=part, started=started, ended=time.time(),
        log_key=f"{prefix}{LOG_TXT}" if log_sha else "", log_sha256=log_sha, log_chunks=chunks,
        commit=spec.commit, version=spec.version,
    )
    if spec.seal_key:
        result = replace(result, seal=seal(spec.seal_key, result.to_json()))
    if final:
        store.put_bytes(f"{prefix}{RESULT_JSON}", json.dumps(result.to_json()).encode(),
                        "application/json", if_none_match=True)
    return result


__all__ = ["NOT_TESTED", "SOURCE_NOT_READ", "fetch_wheels", "gpu_test_on_host", "run_gpu_test_task"]
