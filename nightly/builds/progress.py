"""What a person (or cron's mail) sees while builds run.

On a terminal: a live rich view (each queue's current build and elapsed time, done / failed /
remaining, estimated finish). Always: one plain timestamped line per event appended to the
master log; when not on a terminal those lines also go to stdout, so cron's output is a log.
"""

from __future__ import annotations

import datetime as dt
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

from nightly.format import hms
from nightly.redact import scrub_pem

if TYPE_CHECKING:
    from rich.live import Live
    from rich.table import Table


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
    ) -> None:
        self.total = total
        self.done = self.failed = 0
        self.estimate_s = estimate_s
        self.started = time.time()
        self.running: dict[int, tuple[str, float]] = {}
        self.stream = stream or sys.stdout
        self.live_enabled = self.stream.isatty() if live is None else live
        self.master_log = master_log
        self.queue_logs = queue_logs
        self._lock = threading.Lock()
        self._live: Live | None = None

    # ------------------------------------------------------------------ events

    def __call__(self, kind: str, info: Mapping[str, Any]) -> None:
        with self._lock:
            build = info.get("build", "")
            q = int(info.get("queue", 0))
            if kind == "start":
                self.running[q] = (build, time.time())
                line = f"start  {build} (queue {q}, attempt {info.get('attempt', 1)})"
            elif kind == "end":
                self.running.pop(q, None)
                status = info.get("status", "")
                if status == "succeeded":
                    self.done += 1
                else:
                    self.failed += 1
                why = f": {info['reason']}" if info.get("reason") else ""
                line = f"{status:<9} {build} in {hms(float(info.get('duration_s', 0)))}{why}"
            elif kind == "cleanup":
                line = f"cleanup {build}: {info.get('note')}"
            elif kind == "retry":
                self.failed = max(0, self.failed - 1)
                line = f"retry  {build}: {info.get('reason')}"
            else:
                line = f"{kind} " + " ".join(f"{k}={v}" for k, v in info.items())
            self.log(line, queue=q if kind in ("start", "end") else None)
            if self._live is not None:
                self._live.update(self._render())

    def log(self, line: str, *, queue: int | None = None) -> None:
        stamp = dt.datetime.now().isoformat(timespec="seconds")
        text = f"{stamp} {scrub_pem(line)}\n"  # a reason may quote what a recipe printed
        if self.master_log is not None:
            with self.master_log.open("a", encoding="utf-8") as f:
                f.write(text)
        if self.queue_logs is not None and queue is not None:
            with (self.queue_logs / f"queue-{queue}.log").open("a", encoding="utf-8") as f:
                f.write(text)
        if not self.live_enabled:
            self.stream.write(text)
            self.stream.flush()

    # ------------------------------------------------------------------ live view

    def _render(self) -> Table:
        from rich.table import Table

        now = time.time()
        t = Table(box=None, show_header=True)
        t.add_column("queue", justify="right")
        t.add_column("building")
        t.add_column("elapsed", justify="right")
        for q in sorted(self.running):
            build, since = self.running[q]
            t.add_row(str(q), build, hms(now - since))
        remaining = self.total - self.done - self.failed
        finish = ""
        if self.estimate_s:
            eta = dt.datetime.fromtimestamp(self.started + self.estimate_s)
            finish = f"  estimated finish {eta:%H:%M}"
        t.caption = (
            f"done {self.done}  failed {self.failed}  remaining {remaining}  "
            f"elapsed {hms(now - self.started)}{finish}"
        )
        return t

    def _tick(self) -> None:
        while self._live is not None:
            with self._lock:
                if self._live is not None:
                    self._live.update(self._render())
            time.sleep(1)

    def __enter__(self) -> Progress:
        if self.live_enabled:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(self._render(), console=Console(file=self.stream), transient=True)
            self._live.start()
            threading.Thread(target=self._tick, daemon=True).start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            live, self._live = self._live, None
            live.stop()
