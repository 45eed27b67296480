"""Supervising one build's container (for container.py's executor): its output streamed into
the log as it comes, its exit noticed, the timeout and the cancel event honoured, and the
verdict (exit status, out of memory, killed) read from what the engine reports.

Output reaches the log exactly once even though the engine's log is read more than once (the
follow stream is followed again when it breaks, and read whole once the container stopped).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nightly.executors.base import ExecResult, Job, OutputSink
from nightly.executors.container_engine import (
    FIRST_LOOK_S,
    KILL_WAIT_S,
    LOG_GRACE_S,
    MAX_LOOK_GAP_S,
    POLL_S,
    RECONNECT_PAUSE_S,
    engine_errors,
    first_line,
    infra,
    kill,
    seconds,
    stopped_state,
)

if TYPE_CHECKING:
    from docker.models.containers import Container


@dataclass
class Watch:
    """What the helper threads of one build report back to its supervisor."""

    done: threading.Event = field(default_factory=threading.Event)
    status: Mapping[str, Any] | None = None
    wait_error: BaseException | None = None
    log_error: BaseException | None = None
    log_done: threading.Event = field(default_factory=threading.Event)
    reconnects: int = 0
    out_lock: threading.Lock = field(default_factory=threading.Lock)
    emitted: int = 0  # bytes of the engine's log passed on so far
    closed: bool = False  # set once run() returns: no output after that


def supervise(
    job: Job,
    container: Container,
    out: OutputSink,
    cancel: threading.Event,
    watch: Watch,
    *,
    memory: str | None,
) -> ExecResult:
    """Start the container, pass its output on, and wait for its end (or the job's timeout,
    or `cancel`); `memory` is the limit it runs under, for the verdict."""
    container.start()
    threading.Thread(
        target=pump_logs,
        args=(container, out, watch),
        daemon=True,
        name=f"logs-{job.build_id}",
    ).start()
    waiter = threading.Thread(
        target=_wait_for_exit,
        args=(container, watch),
        daemon=True,
        name=f"wait-{job.build_id}",
    )
    waiter.start()
    waited = _wait_for_stop(job, container, out, cancel, watch)
    if isinstance(waited, ExecResult):
        return waited
    state, stopped_for = waited
    if stopped_for is not None:
        why = "interrupted" if stopped_for == "cancel" else f"timeout after {seconds(job.timeout_s)} s"
        line = f"\n[nightly] {why}: killing container {container.short_id}\n"
        emit(watch, out, line.encode())
        kill(container)
        _await_stop(container, watch, KILL_WAIT_S)
        log_note = collect_rest(container, out, watch)
        if stopped_for == "cancel":
            return ExecResult(exit_status=None, reason="interrupted", interrupted=True, notes=log_note)
        return ExecResult(exit_status=None, reason=why, infra=True, notes=log_note)
    log_note = collect_rest(container, out, watch)
    return _verdict(container, state, watch, memory, log_note)


def _wait_for_stop(
    job: Job, container: Container, out: OutputSink, cancel: threading.Event, watch: Watch
) -> ExecResult | tuple[Mapping[str, object] | None, str | None]:
    """Wait until the container stopped (its State, or None when the waiter thread saw the exit
    first), or until it must be stopped ("cancel", "timeout"); an ExecResult when the engine
    lost track of it."""
    # The exit is noticed by whichever comes first: the waiter thread (one long request;
    # Podman answers it up to ~0.5 s late), or looking at the container's state, often
    # at first and then less and less (and at once when the output stream ends).
    deadline = time.monotonic() + job.timeout_s
    gap = FIRST_LOOK_S
    next_look = time.monotonic() + gap
    looked_at_stream_end = False
    failures = 0
    state: Mapping[str, object] | None = None
    while not (watch.done.is_set() and watch.wait_error is None):
        if cancel.is_set():
            return None, "cancel"
        now = time.monotonic()
        if now >= deadline:
            return None, "timeout"
        stream_ended = watch.log_done.is_set() and not looked_at_stream_end
        if now >= next_look or stream_ended:
            looked_at_stream_end = watch.log_done.is_set()
            try:
                state = stopped_state(container)
                failures = 0
            except engine_errors() as e:
                failures += 1
                if watch.done.is_set() and failures >= 5:
                    collect_rest(container, out, watch)
                    return infra(f"lost track of the container: {first_line(e)}")
            if state is not None:
                break
            gap = min(gap * 2, MAX_LOOK_GAP_S)
            next_look = now + gap
        watch.done.wait(max(0.0, min(POLL_S, deadline - now, next_look - now)))
    return state, None


def _verdict(
    container: Container,
    state: Mapping[str, Any] | None,
    watch: Watch,
    memory: str | None,
    notes: tuple[str, ...],
) -> ExecResult:
    """The result of a container that stopped by itself."""
    if state is None:  # the waiter saw the exit first
        if watch.status is None:
            return infra("lost track of the container: no exit status")
        status = int(watch.status.get("StatusCode", -1))
        try:
            state = stopped_state(container)
        except engine_errors():
            state = None
    else:
        status = int(state.get("ExitCode", -1))
    oom_killed = bool((state or {}).get("OOMKilled"))
    if oom_killed or (status == 137 and memory is not None):
        reason = (
            f"out of memory (limit {memory})"
            if memory is not None
            else "out of memory (killed by the kernel's OOM killer)"
        )
        return ExecResult(exit_status=status, reason=reason, infra=True, notes=notes)
    if status == 137:
        return ExecResult(
            exit_status=status,
            reason="killed (SIGKILL, exit status 137; the host may be out of memory)",
            infra=True,
            notes=notes,
        )
    return ExecResult(exit_status=status, notes=notes)


def emit(watch: Watch, out: OutputSink, data: bytes) -> None:
    """Pass output on, unless run() has returned (the log may be closed by then)."""
    with watch.out_lock:
        if not watch.closed:
            out(data)


def emit_log(watch: Watch, out: OutputSink, chunk: bytes, position: int) -> int:
    """Pass on the part of `chunk` (at byte `position` of the engine's log) not yet passed on.

    The log is read more than once (followed again after the stream broke, read whole once
    the container stopped); counting bytes makes each byte reach `out` exactly once.
    """
    end = position + len(chunk)
    with watch.out_lock:
        if end > watch.emitted and not watch.closed:
            out(chunk[max(0, watch.emitted - position) :])
            watch.emitted = end
    return end


def pump_logs(container: Container, out: OutputSink, watch: Watch) -> None:
    """Follow the container's output as it comes, until the container stops.

    The stream can break while the build runs: the client's read timeout after a long
    silence, or Podman's API sometimes never answering a follow request that races with a
    container event. Then it is followed again from the start, skipping what was passed on.
    """
    try:
        while not watch.closed:
            position = 0
            try:
                for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
                    position = emit_log(watch, out, chunk, position)
                return  # the stream ended: the container stopped
            except Exception as e:
                watch.log_error = e
                if watch.done.is_set():
                    return  # stopped: the supervisor reads what is left
                watch.reconnects += 1
                time.sleep(RECONNECT_PAUSE_S)
    finally:
        watch.log_done.set()


def collect_rest(container: Container, out: OutputSink, watch: Watch) -> tuple[str, ...]:
    """After the container stopped: pass on whatever output the stream did not deliver.

    Once the engine reports the container stopped its log is complete (conmon, like
    Docker's log copier, flushes it first), so it is read whole rather than waiting for the
    follow stream, which Podman ends up to a second later (or, rarely, never).
    """
    try:
        whole = container.logs(stream=False, stdout=True, stderr=True)
    except engine_errors() as e:
        watch.log_done.wait(LOG_GRACE_S)
        if watch.log_done.is_set() and watch.log_error is None:
            return ()  # the stream ended normally: it delivered everything
        return (f"the build's output may be incomplete: {first_line(e)}",)
    emit_log(watch, out, whole, 0)
    return ()


def _await_stop(container: Container, watch: Watch, limit_s: float) -> None:
    """Wait (at most limit_s) until a killed container is reported stopped."""
    end = time.monotonic() + limit_s
    while not watch.done.is_set() and time.monotonic() < end:
        try:
            if stopped_state(container) is not None:
                return
        except engine_errors():
            pass
        watch.done.wait(POLL_S)


def _wait_for_exit(container: Container, watch: Watch) -> None:
    try:
        watch.status = container.wait()
    except Exception as e:
        watch.wait_error = e
    finally:
        watch.done.set()
