"""`--check-reproducible` / `[build] check_reproducible`: build again and compare the bytes.

After a build passed its smoke test, the same job runs a second time in another work folder
(`work/<id>.repro/`, so every path differs) with another umask (0077, so default file modes
differ) and without the compiler cache (a cache hit would hide a compiler that is not
deterministic). Its packages are normalised like the first build's and compared by sha256.
On a difference, diffoscope (the `repro` extra) compares each differing pair: the full report
is written beside the build's log (`logs/<id>.<package>.diffoscope.txt`), its first lines go
into the log, and the build fails naming the file(s) that differ.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from nightly import procs
from nightly.builds.area.ownership import outputs
from nightly.builds.repro.reproducible import normalise_packages
from nightly.config.timeouts import ExternalTimeouts, default_timeouts
from nightly.core.matrix import Build
from nightly.executors.base import Executor, Job
from nightly.files import sha256_file
from nightly.workspace import Day, remove_tree

MODES = ("none", "sample", "all")
SECOND_UMASK = "0077"
REPORT_LINES = 120  # of diffoscope's report, in the build log


def selected(mode: str, builds: Sequence[Build]) -> frozenset[str]:
    """The builds to check: all, none, or one per package type (the first by id)."""
    if mode == "all":
        return frozenset(b.id for b in builds)
    if mode != "sample":
        return frozenset()
    first: dict[str, str] = {}
    for b in sorted(builds, key=lambda b: b.id):
        first.setdefault(b.package, b.id)
    return frozenset(first.values())


def _diffoscope() -> list[str] | None:
    found = shutil.which("diffoscope") or shutil.which("diffoscope", path=str(Path(sys.executable).parent))
    return [found] if found else None


def diffoscope_report(a: Path, b: Path, out: Path, *, timeouts: ExternalTimeouts | None = None) -> str:
    """diffoscope's text report of a and b into `out`; returns the report (or why none).
    It may run [external_timeouts] diffoscope seconds."""
    cmd = _diffoscope()
    if cmd is None:
        text = ("diffoscope is not installed (pip install 'nightly-builds[repro]'): no report; "
                f"sha256 {sha256_file(a)} vs {sha256_file(b)}\n")
    else:
        try:
            proc = procs.call([*cmd, "--text", str(out), "--exclude-directory-metadata=yes",
                               str(a), str(b)], timeout=(timeouts or default_timeouts()).diffoscope)
            text = out.read_text(errors="replace") if out.exists() else proc.stderr
        except (OSError, subprocess.SubprocessError) as e:
            text = f"diffoscope failed: {e}\n"
    out.write_text(text)
    return text


def truncated(text: str, where: Path) -> str:
    """The head of a diffoscope report, then the name of every part that differs (its
    `├── ` headers: the files inside the package), for the build log."""
    lines = text.splitlines()
    if len(lines) <= REPORT_LINES:
        return text if text.endswith("\n") else text + "\n"
    parts = [ln for ln in lines[REPORT_LINES:] if ln.lstrip("│ ").startswith("├── ")]
    out = [*lines[:REPORT_LINES], f"... {len(lines) - REPORT_LINES} more lines in {where}; "
           "the parts that differ there:", *parts[:REPORT_LINES]]
    return "\n".join(out) + "\n"


def check(
    executor: Executor, job: Job, build: Build, produced: Sequence[Path], day: Day,
    sink: Callable[[bytes], None], cancel: threading.Event, *,
    timeouts: ExternalTimeouts | None = None,
) -> str | None:
    """Build `job` again and compare; None when every package is the same, else the reason."""
    def say(line: str) -> None:
        sink(f"[nightly] reproducibility check: {line}\n".encode())

    work = job.work_dir.parent.parent / f"{build.id}.repro"  # beside the first (day or build area)
    if work.exists():
        remove_tree(work)
    second = dataclasses.replace(
        job, output_dir=work / "out", work_dir=work / "scratch", cache=None,
        env={**job.env, "NIGHTLY_UMASK": SECOND_UMASK},
    )
    second.output_dir.mkdir(parents=True)
    second.work_dir.mkdir(parents=True)
    say(f"second build in {work} (umask {SECOND_UMASK}, no compiler cache)")
    result = executor.run(second, sink, cancel)
    if result.exit_status != 0:
        return f"reproducibility check: the second build failed ({result.reason or result.exit_status})"
    again, _ = outputs(second.output_dir, build.package)  # the first build's rule
    for note in normalise_packages(again, second.env):
        say(note)
    first = {p.name: p for p in produced}
    theirs = {p.name: p for p in again}
    if set(first) != set(theirs):
        return (f"not reproducible: the second build made {sorted(theirs)}, "
                f"the first {sorted(first)}")
    differ = []
    for name in sorted(first):
        a, b = sha256_file(first[name]), sha256_file(theirs[name])
        if a == b:
            say(f"{name}: identical (sha256 {a})")
            continue
        differ.append(name)
        report_path = day.logs / f"{build.id}.{name}.diffoscope.txt"
        say(f"{name} differs: sha256 {a} vs {b}; diffoscope report: {report_path}")
        text = diffoscope_report(first[name], theirs[name], report_path, timeouts=timeouts)
        sink(truncated(text, report_path).encode(errors="replace"))
    remove_tree(work)
    if differ:
        return f"not reproducible: {', '.join(differ)} differ between two builds (diffoscope report in logs/)"
    return None


__all__ = ["MODES", "check", "diffoscope_report", "selected", "truncated"]
