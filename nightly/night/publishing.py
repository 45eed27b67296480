"""The night's publishing as a phase of each build (issue 50): once the builds are done and
their live view has closed, the upload (nightly.publish.upload.publish_day, through its
`on_package`) is shown per build and package, done of the total.

On a terminal: the same rich view as the builds' (nightly.builds.view.liveview), each build being
published in the `publishing` phase with `package 2 of 3: NAME uploaded` as its line, and the
headline `now publishing: 4 of 10 packages`. Without one (cron, a pipe): one plain
timestamped line per package (`publish  BUILD: 2 of 3 packages (4 of 10 in all): NAME
uploaded`), no control codes. Always: logs/master/live.json says `publishing`, so `nightly
status` in another shell shows it; at the end, the night's next step (`reporting`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from nightly.builds.view.liveview import render
from nightly.workspace import SUCCEEDED, live

if TYPE_CHECKING:
    from nightly.builds.run.phase import NightContext

DONE = ("uploaded", "already there", "failed")
MIN_REDRAW_S = 0.25  # live.json and the view redrawn at most this often (the last always)


@dataclass
class _Build:
    total: int = 0
    done: int = 0
    line: str = ""
    started: float = 0.0


class PublishView:
    """Receives publish_day's `on_package(build, package, what)` and shows it."""

    def __init__(self, *, builds_total: int, builds_done: int, builds_failed: int,
                 started: float, live_path: Path | None, live: bool | None = None,
                 stream: IO[str] | None = None, estimate_source: str = "config") -> None:
        self.stream = stream or sys.stdout
        self.live_enabled = self.stream.isatty() if live is None else live
        self.live_path = live_path
        self.counts = (builds_total, builds_done, builds_failed)
        self.started, self.estimate_source = started, estimate_source
        self.builds: dict[str, _Build] = {}
        self.total = self.done = self.failed = 0
        self._lock = threading.Lock()
        self._view: Any = None
        self._drawn = 0.0

    def __call__(self, build: str, package: str, what: str) -> None:
        with self._lock:
            b = self.builds.setdefault(build, _Build())
            if what == "queued":
                b.total += 1
                self.total += 1
                return
            if what == "uploading":
                b.started = b.started or time.time()
                b.line = f"package {b.done + 1} of {b.total}: {package}"
            elif what in DONE:
                b.done += 1
                self.done += 1
                self.failed += what == "failed"
                b.line = f"package {b.done} of {b.total}: {package} {what}"
                self._say(f"publish  {build}: {b.done} of {b.total} packages ({self.done} of "
                          f"{self.total} in all): {package} {what}")
            self._draw(force=self.done == self.total)

    def step(self) -> str:
        failed = f", {self.failed} failed" if self.failed else ""
        return f"publishing: {self.done} of {self.total} packages{failed}"

    def state(self, step: str | None = None) -> live.LiveState:
        total, done, failed = self.counts
        running = [(bid, b) for bid, b in sorted(self.builds.items())
                   if b.started and b.done < b.total]
        return live.LiveState(
            pid=os.getpid(), started=self.started, updated=time.time(), total=total, done=done,
            failed=failed, estimate_s=0.0, estimate_source=self.estimate_source,
            builds=tuple(live.LiveBuild(queue=i, build=bid, phase="publishing",
                                        started=b.started, estimate_s=None, last_line=b.line)
                         for i, (bid, b) in enumerate(running)),
            step=step or self.step())

    def _say(self, line: str) -> None:
        if not self.live_enabled:
            stamp = dt.datetime.now().isoformat(timespec="seconds")
            self.stream.write(live.no_escapes(f"{stamp} {line}\n"))
            self.stream.flush()

    def _draw(self, *, force: bool = False, step: str | None = None) -> None:
        now = time.monotonic()
        if not force and now - self._drawn < MIN_REDRAW_S:
            return
        self._drawn = now
        state = self.state(step)
        if self._view is not None:
            self._view.update(render(state, time.time(), self._view.console.width), refresh=True)
        if self.live_path is not None:
            with contextlib.suppress(OSError):  # a view: never what stops the publishing
                live.write(self.live_path, state)

    def __enter__(self) -> PublishView:
        if self.live_enabled:
            from rich.console import Console
            from rich.live import Live

            self._view = Live(render(self.state(), time.time()), console=Console(file=self.stream),
                              transient=True, auto_refresh=False)
            self._view.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            if self._view is not None:
                view, self._view = self._view, None
                view.stop()
                if self.total:  # what the view showed, kept as one line on the terminal
                    self.stream.write(live.no_escapes(self.step()) + "\n")
            self._draw(force=True, step="reporting")


@contextlib.contextmanager
def shown(night: NightContext) -> Iterator[PublishView]:
    """The view of the night's publishing: pass it as publish_day's `on_package`."""
    builds = [night.state.get(b.id) for b in night.builds]
    done = sum(1 for e in builds if e.status == SUCCEEDED)
    view = PublishView(builds_total=len(builds), builds_done=done,
                       builds_failed=len(builds) - done,
                       started=night.state.meta.run_started or time.time(),
                       live_path=live.path_of(night.day.master), live=night.live)
    with view:
        yield view


__all__ = ["PublishView", "shown"]
