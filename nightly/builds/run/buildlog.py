"""The text a build's log starts and ends each attempt with, and reading it back.

The footer of a succeeded attempt lists its packages with their sizes and sha256; a run that
resumes after kill -9 adopts an attempt whose complete footer matches the packages it had
filed (nightly.builds.run.runner), rather than building it again.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from nightly.builds.run.collect import PackageFile
from nightly.executors.base import ExecResult, Job
from nightly.format import shown
from nightly.redact import mask_env

_RULE = "=" * 78
_PACKAGE_LINE = re.compile(r"^  (.+)  (\d+) bytes  sha256 ([0-9a-f]{64})$")


# What a failing step (CMake, a compiler, the linker, a build backend) says the cause is, and
# pip's (or pypa/build's) own frame around a failed build, which says nothing of it.
_CAUSE = re.compile(r"CMake Error|\berror\b|Error:|fatal|No CMAKE_\w+_COMPILER|undefined "
                    r"reference|cannot find -l|\*\*\* ", re.IGNORECASE)
_NOISE = re.compile(r"subprocess-exited-with-error|[Ff]ailed building wheel|Could not build "
                    r"wheels|failed-wheel-build|metadata-generation-failed|finished with status "
                    r"'error'|This error originates|^note:|^hint:|^[\u2502\u2570\u00d7]|"
                    r"^ERROR Backend (?:subprocess exited|operation failed)")  # pypa/build's frame
# A recipe's own ERROR line ([manywheel] ERROR: ...); another tool's (meson's `ERROR:`) is a
# cause of it.
_RECIPE_ERROR = re.compile(r"^\[[\w.+-]+\] ERROR:")
_ABOVE = re.compile(r"(?:, )?output above")


class ErrorLine:
    """Watches a recipe's output for why it failed: the last `ERROR:` line it printed, else
    its last non-empty line. An ERROR line that points at the "output above" gets the last
    lines of that output that name a cause (a CMake error, a compiler's error: issue 57)
    in place of the pointer. Fed the output as it comes, in chunks cut anywhere."""

    MAX = 300  # characters kept of the ERROR line: a reason, not a log
    CAUSES = 3  # cause lines kept
    CAUSE_MAX = 360  # characters of them

    def __init__(self) -> None:
        self._partial = b""
        self._error = ""
        self._last = ""
        self._causes: list[str] = []  # since the last ERROR line
        self._plain = ""  # the last line before the last ERROR line, when no cause is known
        self._said = ""  # the last line that is not pip's frame, since the last ERROR line
        self._error_causes: list[str] = []  # those before the last ERROR line
        self._continues = False  # the previous cause ended with ':' (CMake Error at X:)

    def feed(self, chunk: bytes) -> None:
        lines = (self._partial + chunk).split(b"\n")
        # A line still being written; a runaway one (no newline) is cut to its end.
        self._partial = lines.pop()[-4 * self.MAX:]
        for raw in lines:
            self._take(raw)

    def _take(self, raw: bytes) -> None:
        # What the recipe printed becomes a reason every report shows: its terminal codes are
        # data from here on (nightly.format), one line.
        line = shown(raw.decode("utf-8", errors="replace"), lines=False).strip()
        if not line:
            return
        self._last = line
        if "ERROR:" in line and not _RECIPE_ERROR.match(line):
            self._error = line  # the reason when no recipe line follows
            if not _NOISE.search(line):
                self._causes = [*self._causes[-(self.CAUSES - 1):], line]
                self._said = line
            return
        if "ERROR:" in line:
            # pip's ERROR line after the step's own: the causes stay those before both.
            self._error, self._error_causes = line, self._causes or self._error_causes
            self._plain = self._said or self._plain
            self._causes, self._continues, self._said = [], False, ""
            return
        if not _NOISE.search(line):
            self._said = line
        if self._continues and not _NOISE.search(line):
            self._causes[-1] += " " + line  # CMake's message is on the line after its place
        elif _CAUSE.search(line) and not _NOISE.search(line):
            self._causes = [*self._causes[-(self.CAUSES - 1):], line]
        self._continues = bool(_CAUSE.search(line)) and line.endswith(":")

    def line(self) -> str:
        if self._partial:
            self._take(self._partial)
            self._partial = b""
        found = self._error or self._last
        found = found if len(found) <= self.MAX else found[: self.MAX - 3] + "..."
        if self._error and _ABOVE.search(found) and (self._error_causes or self._plain):
            # No line looked like an error: the output's last line (pip's "no such option").
            said = " | ".join(self._error_causes) or self._plain
            said = said if len(said) <= self.CAUSE_MAX else "..." + said[-(self.CAUSE_MAX - 3):]
            found = _ABOVE.sub("", found).replace(" ()", "") + ": " + said
        return found



def header(
    job: Job, desc: Mapping[str, object], *, attempt: int, queue: int, started: float,
    machine: str, executor: str,
) -> str:
    """The block each attempt starts the build's log with (credentials masked)."""
    env = desc.get("env")
    lines = [
        "=" * 78,
        f"nightly build {job.build_id}  (attempt {attempt})",
        f"where:    {desc.get('where') or desc.get('image') or executor}",
        *([f"toolkit:  {desc['toolkit']}"] if desc.get("toolkit") else []),
        f"machine:  {machine or '-'}  queue {queue}",
        f"command:  {_command_text(desc.get('command'))}",
        f"timeout:  {job.timeout_s:g} s",
        f"started:  {dt.datetime.fromtimestamp(started).isoformat(timespec='seconds')}",
        "environment:",
    ]
    if isinstance(env, Mapping):
        lines += [f"  {k}={v}" for k, v in sorted(mask_env(env).items())]
    else:
        lines.append(f"  {env}")
    lines += ["=" * 78, ""]
    return "\n".join(lines) + "\n"


def footer(
    result: ExecResult,
    status: str,
    reason: str | None,
    duration: float,
    packages: Sequence[PackageFile],
    produced: Sequence[Path],
    notes: Sequence[str] = (),
) -> str:
    """The block each attempt ends the build's log with (read back by `last_footer`)."""
    exit_line = f"exit status: {result.exit_status if result.exit_status is not None else '-'}"
    if result.exit_status == 0 and status.lower() != "succeeded":
        # The recipe succeeded and a later step (smoke test, policy, reproducibility) did not:
        # the footer says so, so "FAILED" above "0" reads as one story.
        exit_line += " (the recipe's; the build failed after it: reason below)"
    lines = [
        "",
        "=" * 78,
        f"result:      {status.upper()}",
        exit_line,
        f"duration:    {duration:.1f} s",
    ]
    if reason:
        lines.append(f"reason:      {reason}")
    lines += [f"note:        {n}" for n in notes]
    if packages:
        lines.append("packages:")
        lines += [f"  {p.name}  {p.size} bytes  sha256 {p.sha256}" for p in packages]
    elif produced:
        lines.append("files produced (not filed, the build failed):")
        lines += [f"  {p.name}" for p in produced]
    lines += ["=" * 78, ""]
    return "\n".join(lines) + "\n"


def last_footer(text: str, build_id: str) -> tuple[float, list[tuple[str, int, str]]] | None:
    """The duration and packages of a complete SUCCEEDED footer closing the log's last
    attempt, or None (no footer, another result, or a footer cut short)."""
    start = text.rfind(f"nightly build {build_id}  (attempt ")
    if start < 0:
        return None
    lines = text[start:].rstrip("\n").split("\n")
    try:
        at = max(i for i, line in enumerate(lines) if line.startswith("result:"))
    except ValueError:
        return None
    if lines[at].split() != ["result:", "SUCCEEDED"] or lines[-1] != _RULE:
        return None
    duration = 0.0
    files: list[tuple[str, int, str]] = []
    for line in lines[at + 1 : -1]:
        if line.startswith("duration:"):
            with contextlib.suppress(IndexError, ValueError):
                duration = float(line.split()[1])
        m = _PACKAGE_LINE.match(line)
        if m:
            files.append((m.group(1), int(m.group(2)), m.group(3)))
    return (duration, files) if files else None


def _command_text(command: object) -> str:
    if isinstance(command, (list, tuple)):
        return " ".join(str(c) for c in command)
    return str(command or "-")


__all__ = ["footer", "header", "last_footer"]
