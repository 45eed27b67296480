"""The live view of a night: each running build's log followed (its last line, and the phase
its lines reveal), and the view drawn from a LiveState (nightly.workspace.live), the same for
the night's own terminal and for `nightly status` in another shell. rich is imported inside
the functions that draw."""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nightly.format import hms
from nightly.workspace.live import LiveState, clean_line

if TYPE_CHECKING:
    from rich.console import RenderableType

CHUNK = 64 * 1024  # read at most this much of a log per look: a chatty build costs no more

# What a log line says about the phase a build is in (the runner says the rest).
_MARKERS = (("auditwheel repair", "repairing"), ("delocate-wheel", "repairing"),
            ("gpu test:", "GPU test"))
# The line each attempt's header starts with (nightly.builds.run.buildlog.header): a rerun
# appends to the same log, and what the previous attempt said is not this one's phase.
_ATTEMPT = re.compile(r"(?m)^nightly build \S+  \(attempt \d+\)\r?$")


@dataclass
class LogWatch:
    """One build's log, followed from where the last look ended."""

    path: Path
    offset: int = 0
    last_line: str = ""
    phase: str | None = None  # a phase its lines revealed since the runner last said one

    def poll(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < self.offset:  # a new attempt's log
                self.offset = 0
            start = max(self.offset, size - CHUNK)
            f.seek(start)
            data = f.read(min(size - start, CHUNK))
        self.offset = start + len(data)
        if not data:
            return
        text = data.decode("utf-8", "replace")
        heads = list(_ATTEMPT.finditer(text))
        if heads:  # a new attempt: nothing before its header is about it
            text = text[heads[-1].end():]
            self.phase, self.last_line = None, ""
        for line in text.lower().splitlines():
            for marker, phase in _MARKERS:
                if marker in line:
                    self.phase = phase
        lines = [x for x in (clean_line(s) for s in text.splitlines()) if x]
        if lines:
            self.last_line = lines[-1]


def estimate_words(source: str) -> str:
    """Where the night's estimates come from (the same words as `nightly plan`'s)."""
    if source == "history":
        return ("estimates from this project's past nights (the median of each build's last "
                "5 successful runs)")
    if source == "fixed":
        return ("estimates from [estimates] in the config (history_estimates does not use "
                "the history on this setup)")
    return ("estimates are a guess ([estimates] in the config): no history yet; each night "
            "records its builds' times in the history, and later nights estimate from them")


def finish_time(state: LiveState, now: float) -> str:
    if not state.estimate_s:
        return ""
    end = state.started + state.estimate_s
    late = " (running late)" if end < now and state.done + state.failed < state.total else ""
    return f"estimated finish {dt.datetime.fromtimestamp(end):%H:%M}{late}"


def headline(state: LiveState, now: float) -> str:
    """`3 of 10 builds done (1 failed), 6 to go; elapsed 0:05:12; estimated finish 01:23`."""
    finished = state.done + state.failed
    failed = f" ({state.failed} failed)" if state.failed else ""
    parts = [f"{finished} of {state.total} builds done{failed}, "
             f"{state.total - finished} to go", f"elapsed {hms(now - state.started)}"]
    finish = finish_time(state, now)
    if finish:
        parts.append(finish)
    if state.step != "building":
        parts.append(f"now {state.step}")
    return "; ".join(parts)


NARROW = 100  # below this many columns the log's last line goes on a line of its own


def render(state: LiveState, now: float, width: int = 120) -> RenderableType:
    """The headline, then a table of the running builds: queue, build, phase, elapsed against
    its estimate, the last line its log printed (cut to what `width` leaves it: the other
    columns are never squeezed). Below NARROW columns that line goes under its build, with
    the whole width (at 80 the column left it 20 characters). The estimates note is printed
    once when the view starts (progress.Progress), not under every frame."""
    from rich.console import Group
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    narrow = width < NARROW
    t = Table(box=None, show_header=True, pad_edge=False, expand=False)
    t.add_column("queue", justify="right", no_wrap=True)
    t.add_column("build", no_wrap=True)
    t.add_column("phase", no_wrap=True)
    t.add_column("elapsed / estimate", justify="right", no_wrap=True)
    if not narrow:
        t.add_column("last line of its log", overflow="ellipsis", no_wrap=True)
    builds = max((len(b.build) for b in state.builds), default=5)
    room = max(10, width - (5 + builds + 9 + 18 + 4 * 2) - 1)
    under: list[Text] = []
    for b in sorted(state.builds, key=lambda b: b.queue):
        est = hms(b.estimate_s) if b.estimate_s else "-"
        over = b.estimate_s is not None and now - b.started > b.estimate_s
        elapsed = f"{'[yellow]' if over else ''}{hms(now - b.started)}{'[/yellow]' if over else ''}"
        row = [str(b.queue), escape(b.build), f"[cyan]{escape(b.phase)}[/cyan]",
               f"{elapsed} / {est}"]
        if narrow:
            line = clean_line(b.last_line, max(10, width - 8))
            under.append(Text(f"  {b.queue}: {line}", style="dim", no_wrap=True,
                              overflow="ellipsis"))
        else:
            row.append(escape(clean_line(b.last_line, room)))
        t.add_row(*row)
    head = Text(headline(state, now), style="bold")
    return Group(head, t, *under) if state.builds else head


def plain(state: LiveState, now: float) -> list[str]:
    """The same view as lines of text (no control codes): `nightly status` through a pipe."""
    lines = [headline(state, now), estimate_words(state.estimate_source)]
    for b in sorted(state.builds, key=lambda b: b.queue):
        est = hms(b.estimate_s) if b.estimate_s else "-"
        lines.append(f"  queue {b.queue}: {b.build} {b.phase} {hms(now - b.started)} / {est}"
                     + (f": {b.last_line}" if b.last_line else ""))
    return lines
