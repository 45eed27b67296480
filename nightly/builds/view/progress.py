"""What a person (or cron's mail) sees while builds run.

On a terminal: a live rich view (nightly.builds.view.liveview: builds done of the total with the
estimated finish, each queue's running build with its phase, elapsed against its estimate and
the last line its log printed). Always: one plain timestamped line per event appended to the
master log; when not on a terminal those lines also go to stdout, so cron's output is a log
(no control codes). With `live_path`, the same state is written to logs/master/live.json for
`nightly status` in another shell (nightly.workspace.live).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

from nightly.builds.view.liveview import LogWatch, estimate_words, render
from nightly.format import hms, shown
from nightly.redact import scrub_pem
from nightly.workspace import live

if TYPE_CHECKING:
    from rich.live import Live

MIN_REDRAW_S = 0.25  # the view and live.json are redrawn at most this often


@dataclass
class _Running:
    build: str
    since: float
    phase: str = "preparing"
    attempt: int = 1
    watch: LogWatch | None = None
    said: str = "preparing"  # the phase the runner said (a log marker may refine it)

    def shown_phase(self) -> str:
        return self.watch.phase if self.watch and self.watch.phase else self.phase


class Progress:
    def __init__(
        self,
        *,
        total: int,
        master_log: Path | None,
        estimate_s: float = 0.0,
        live: bool | None = None,
        stream: IO[str] | None = None,
        queue_logs: Path | None = None,
        estimates: Mapping[str, float] | None = None,
        estimate_source: str = "config",
        live_path: Path | None = None,
        tick_s: float = 1.0,
    ) -> None:
        self.total = total
        self.done = self.failed = 0
        self.estimate_s = estimate_s
        self.estimates = dict(estimates or {})
        self.estimate_source = estimate_source
        self.started = time.time()
        self.running: dict[int, _Running] = {}
        self.stream = stream or sys.stdout
        self.live_enabled = self.stream.isatty() if live is None else live
        self.master_log = master_log
        self.queue_logs = queue_logs
        self.live_path = live_path
        self.tick_s = tick_s
        self._lock = threading.Lock()
        self._live: Live | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._drawn = 0.0  # time.monotonic() of the last redraw
        self._dirty = False  # an event since then

    # ------------------------------------------------------------------ events

    def __call__(self, kind: str, info: Mapping[str, Any]) -> None:
        with self._lock:
            line = self._event(kind, info)
            if line is not None:
                q = int(info.get("queue", 0) or 0)
                self.log(line, queue=q if kind in ("start", "end") else None)
            self._refresh()

    def _event(self, kind: str, info: Mapping[str, Any]) -> str | None:
        build = str(info.get("build", ""))
        q = int(info.get("queue", 0) or 0)
        if kind == "start":
            attempt = int(info.get("attempt", 1) or 1)
            self.running[q] = _Running(build, time.time(), attempt=attempt)
            return f"start  {build} (queue {q}, attempt {attempt})"
        if kind == "phase":
            return self._phase(build, str(info.get("phase", "")), info.get("log"))
        if kind == "end":
            self.running.pop(q, None)
            status = info.get("status", "")
            if status == "succeeded":
                self.done += 1
            else:
                self.failed += 1
            why = f": {info['reason']}" if info.get("reason") else ""
            return (f"{status:<9} {build} in {hms(float(info.get('duration_s', 0)))}"
                    f" ({self.done + self.failed} of {self.total} done){why}")
        if kind == "cleanup":
            return f"cleanup {build}: {info.get('note')}"
        if kind == "retry":
            self.failed = max(0, self.failed - 1)
            return f"retry  {build}: {info.get('reason')}"
        return f"{kind} " + " ".join(f"{k}={v}" for k, v in info.items())

    def _phase(self, build: str, phase: str, log: object) -> str | None:
        run = next((r for r in self.running.values() if r.build == build), None)
        if run is None or phase not in live.PHASES:
            return None
        run.phase = run.said = phase
        if run.watch is not None:
            run.watch.phase = None  # the runner's word is newer than what the log showed
        if isinstance(log, str) and log:
            run.watch = LogWatch(Path(log))
        return f"phase  {build}: {phase}"

    def log(self, line: str, *, queue: int | None = None) -> None:
        stamp = dt.datetime.now().isoformat(timespec="seconds")
        # A reason may quote what a recipe printed: its keys masked, its terminal codes data.
        text = f"{stamp} {shown(scrub_pem(line))}\n"
        if self.master_log is not None:
            with self.master_log.open("a", encoding="utf-8") as f:
                f.write(text)
        if self.queue_logs is not None and queue is not None:
            with (self.queue_logs / f"queue-{queue}.log").open("a", encoding="utf-8") as f:
                f.write(text)
        if not self.live_enabled:
            self.stream.write(text)
            self.stream.flush()

    # ------------------------------------------------------------------ the live state

    def state(self, step: str = "building") -> live.LiveState:
        builds = []
        for q, r in self.running.items():
            if r.watch is not None:
                r.watch.poll()
            watched = r.watch.phase if r.watch else None
            if watched is not None and watched != r.phase:  # said in its log: shown, and logged
                r.phase = watched
                self.log(f"phase  {r.build}: {watched}")
            builds.append(live.LiveBuild(
                queue=q, build=r.build, phase=r.phase, started=r.since,
                estimate_s=self.estimates.get(r.build), attempt=r.attempt,
                last_line=r.watch.last_line if r.watch else ""))
        return live.LiveState(
            pid=os.getpid(), started=self.started, updated=time.time(), total=self.total,
            done=self.done, failed=self.failed, estimate_s=self.estimate_s,
            estimate_source=self.estimate_source, builds=tuple(builds), step=step)

    def _refresh(self, *, force: bool = False) -> None:
        """Under the lock: the terminal view and live.json brought up to date, at most every
        MIN_REDRAW_S on events (a burst of events is one redraw: the ticker draws the rest)."""
        if self._live is None and self.live_path is None:
            return
        now = time.monotonic()
        if not force and now - self._drawn < MIN_REDRAW_S:
            self._dirty = True
            return
        self._drawn, self._dirty = now, False
        state = self.state()
        if self._live is not None:
            self._live.update(render(state, time.time(), self._live.console.width), refresh=True)
        if self.live_path is not None:
            with contextlib.suppress(OSError):  # a view: a full disk must not stop the builds
                live.write(self.live_path, state)

    def _tick(self) -> None:
        while not self._stop.wait(MIN_REDRAW_S):
            with self._lock:
                if self._dirty or time.monotonic() - self._drawn >= self.tick_s:
                    self._refresh(force=True)

    def __enter__(self) -> Progress:
        if self.live_enabled:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(render(self.state(), time.time()), console=Console(file=self.stream),
                              transient=True, auto_refresh=False)
            self._live.start()
        self.log(estimate_words(self.estimate_source))
        if self._live is not None or self.live_path is not None:
            self._thread = threading.Thread(target=self._tick, daemon=True)
            self._thread.start()
        with self._lock:
            self._refresh(force=True)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)  # nightly's own thread: it stops at its next tick
        with self._lock:
            if self.live_path is not None:
                with contextlib.suppress(OSError):  # the builds are over: the night's later steps
                    live.write(self.live_path, self.state(step="publishing and reporting"))
            if self._live is not None:
                live_view, self._live = self._live, None
                live_view.stop()
