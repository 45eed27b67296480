"""Long downloads and image builds shown as progress with sizes (issue 50).

One `Meter` per transfer: on a terminal (`on_terminal`, set by a command whose stderr is
one) a rich bar with bytes done of the total; otherwise plain timestamped lines through the
caller's log (a build's log in a night, where the live view shows its last line; stderr for
`nightly images build` through a pipe): one at the start, then one every EVERY_S seconds or
each tenth of the total, and one at the end. No control codes in those lines.

`pip_download` runs `pip download` with pip's own byte counts (`--progress-bar raw`, pip >=
24.1; an older pip downloads with a start and an end line only). `folder_bytes` measures a
download that writes into a folder (apt-get download). rich is imported only for the bar.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from nightly import procs
from nightly.config.timeouts import ExternalTimeouts, default_timeouts

Log = Callable[[str], None]
EVERY_S = 10.0  # a plain line at least this often while bytes move
RAW_PIP = (24, 1)  # the first pip with --progress-bar raw ("Progress N of T" lines)

_TERMINAL: ContextVar[IO[str] | None] = ContextVar("nightly_transfer_terminal", default=None)


@contextlib.contextmanager
def on_terminal(stream: IO[str]) -> Iterator[None]:
    """Within this block meters draw a rich bar on `stream` when it is a terminal."""
    token = _TERMINAL.set(stream if stream.isatty() else None)
    try:
        yield
    finally:
        _TERMINAL.reset(token)


def size(n: float) -> str:
    """Bytes in words: 734 B, 12.3 kB, 98.1 MB, 1.20 GB (decimal units, as pip says them)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}" if unit == "GB" else f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


class Meter:
    """The progress of one transfer of `total` units (bytes, or steps with unit="steps";
    total None or 0 when not known yet)."""

    def __init__(self, label: str, total: int | None, log: Log, *,
                 terminal: IO[str] | None = None, unit: str = "bytes",
                 clock: Callable[[], float] = time.monotonic, every_s: float = EVERY_S) -> None:
        self.label, self.total, self.unit, self.log = label, total or 0, unit, log
        self.done = 0
        self._clock, self._every_s = clock, every_s
        self._t0 = self._last_t = clock()
        self._last_tenth = 0
        self._finished = False
        self._bar: Any = None
        self._task: Any = None
        stream = terminal if terminal is not None else _TERMINAL.get()
        if stream is not None:
            self._start_bar(stream)
        else:
            self.log(self._line("started" + (f", {self._amount(self.total)}" if self.total
                                             else "")))

    def _start_bar(self, stream: IO[str]) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TransferSpeedColumn,
        )

        amount = ([DownloadColumn(), TransferSpeedColumn()] if self.unit == "bytes"
                  else [MofNCompleteColumn()])
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), *amount,
                             TimeElapsedColumn(), console=Console(file=stream),
                             transient=False)
        self._bar.start()
        self._task = self._bar.add_task(self.label, total=self.total or None)

    def _amount(self, n: int) -> str:
        return size(n) if self.unit == "bytes" else f"{n} {self.unit}"

    def _line(self, what: str) -> str:
        now = dt.datetime.now(dt.timezone.utc).strftime("%H:%M:%S")
        return f"{now} {self.label}: {what}"

    def update(self, done: int, total: int | None = None) -> None:
        """`done` units so far (of `total` when it became known)."""
        self.done = done
        if total:
            self.total = total
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=self.total or None)
            return
        now = self._clock()
        tenth = int(10 * done / self.total) if self.total else 0
        if now - self._last_t >= self._every_s or tenth > self._last_tenth:
            self._last_t, self._last_tenth = now, max(tenth, self._last_tenth)
            self.log(self._line(self._progress()))

    def _progress(self) -> str:
        if not self.total:
            return self._amount(self.done)
        pct = min(100, int(100 * self.done / self.total))
        return f"{self._amount(self.done)} of {self._amount(self.total)} ({pct}%)"

    def finish(self, ok: bool = True) -> None:
        """The end line (or the bar's last state): what was moved and how long it took.
        Said once: a later call does nothing."""
        if self._finished:
            return
        self._finished = True
        took = f"{self._clock() - self._t0:.0f} s"
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, total=self.total or self.done)
            self._bar.stop()
            self._bar = None
            if not ok:
                self.log(f"{self.label}: failed after {took}")
            return
        self.log(self._line(f"{'done' if ok else 'failed'}, {self._amount(self.done)} in {took}"))

    def __enter__(self) -> Meter:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.finish(ok=kind is None)


# ------------------------------------------------------------------------- pip download

_PROGRESS = re.compile(r"^Progress (\d+) of (\d+)\s*$")


def raw_progress_pip() -> bool:
    """Whether this interpreter's pip prints raw byte counts (--progress-bar raw)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        parts = tuple(int(x) for x in re.findall(r"\d+", version("pip"))[:2])
    except PackageNotFoundError:
        return False
    return parts >= RAW_PIP


def pip_download(dest: Path, args: Sequence[str], label: str, log: Log, *,
                 env: dict[str, str] | None = None) -> tuple[int, str]:
    """`python -m pip download ARGS` of wheels into `dest` (no --quiet in ARGS) with a meter:
    the bytes of every file pip fetches, the total growing as pip names each file's size.
    Returns pip's exit status and the last lines it printed (for the caller's error)."""
    raw = raw_progress_pip()
    argv = procs.pip_download(dest, *(["--progress-bar", "raw"] if raw else ["--quiet"]), *args)
    tail: list[str] = []
    before = 0  # the bytes of the files already finished
    with Meter(label, None, log) as meter:
        # Direct: pip's output is read line by line as it comes, for the meter.
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", env=env)
        assert proc.stdout is not None
        for line in proc.stdout:
            m = _PROGRESS.match(line)
            if m is None:
                tail = [*tail[-19:], line.rstrip()]
                continue
            done, total = int(m.group(1)), int(m.group(2))
            meter.update(before + done, before + total)
            if done >= total:
                before += total
        code = proc.wait()
        if code != 0:
            meter.finish(ok=False)
    return code, "\n".join(tail[-10:])


# ------------------------------------------------------------------------- a folder filling


def folder_bytes(folder: Path, depth: int = 1) -> int:
    """The bytes of the regular files in `folder` and its subfolders `depth` levels down
    (apt-get fills partial/ first), links never followed."""
    total = 0
    with contextlib.suppress(OSError), os.scandir(folder) as it:
        for entry in it:
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
                elif depth > 0 and entry.is_dir(follow_symlinks=False):
                    total += folder_bytes(Path(entry.path), depth - 1)
    return total


def run_filling(argv: Sequence[str], folder: Path, total: int | None, label: str, log: Log, *,
                env: dict[str, str] | None = None, poll_s: float = 0.5) -> tuple[int, str]:
    """Run a download that writes into `folder` (apt-get download in its cwd), the meter
    following the folder's bytes. Returns the exit status and the output's last lines."""
    before = folder_bytes(folder)  # what was there already is not this download's
    with Meter(label, total, log) as meter:
        # Direct: the meter follows the folder while the download runs (procs.call waits).
        proc = subprocess.Popen(list(argv), cwd=folder, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
        stop = threading.Event()

        def follow() -> None:
            while not stop.wait(poll_s):
                meter.update(max(0, folder_bytes(folder) - before))

        watcher = threading.Thread(target=follow, daemon=True)
        watcher.start()
        out, _ = proc.communicate()
        stop.set()
        watcher.join()
        meter.update(max(0, folder_bytes(folder) - before))
        if proc.returncode != 0:
            meter.finish(ok=False)
    return proc.returncode, "\n".join(out.strip().splitlines()[-10:])


def apt_download(packages: Sequence[str], folder: Path, label: str, log: Log, *,
                 env: dict[str, str] | None = None) -> tuple[int, str]:
    """`apt-get download PACKAGES` into `folder` with a meter: the total from apt's own
    listing (`--print-uris`: each file's URI, name, size and hash), the bytes from the
    folder as it fills."""
    total = apt_total(["download", *packages], folder, env=env)
    return run_filling(["apt-get", "-q", "download", *packages], folder, total or None,
                       label, log, env=env)


def apt_total(args: Sequence[str], cwd: Path, *, env: dict[str, str] | None = None,
              timeouts: ExternalTimeouts | None = None) -> int:
    """The bytes `apt-get ARGS` would download, from apt's own listing (`--print-uris`:
    each file's URI, name, size and hash; what is already downloaded is not listed); 0 when
    apt cannot say."""
    total = 0
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        listing = procs.call(["apt-get", "-q", "--print-uris", *args],
                             env=env, cwd=cwd,
                             timeout=(timeouts or default_timeouts()).apt_listing).stdout
        for line in listing.splitlines():
            fields = line.split()
            if len(fields) >= 3 and fields[0].startswith("'") and fields[2].isdigit():
                total += int(fields[2])
    return total
