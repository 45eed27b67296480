"""Running a helper command (pip, apt-get, dpkg-deb, a compiler, git) and reading its output:
one way, one error shape.

`run` returns the command's stdout, or raises the caller's error class (a NightlyError) in
one shape: what failed, its exit status, the command, then the last lines of its output, so
the message shows the reason without the whole log. A command that is not installed, or that
runs past its timeout, is the same error with its own words, never a traceback. Nothing is
read from this process's stdin. Builds themselves run through the executors, not here.

`call` is the same run for a caller that reads the exit status itself: a `Finished` with the
status and the output, never an error for a non-zero exit. Both capture the output into
temporary files, not memory, and keep at most `max_output` bytes of each stream (its end):
a command that prints gigabytes costs disk for a moment, never nightly's memory.

`pip_command` and `pip_download` are how nightly's commands for pip are written (the one
place `pip download` is built).

The few direct subprocess calls elsewhere each say why this helper does not fit them
(`grep -rn "subprocess\\.\\(run\\|Popen\\)" nightly`): a build's own process group, a
download whose output is read line by line for its meter, a script that talks to the
terminal.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from nightly.errors import NightlyError
from nightly.files import boot_id, proc_stat

TAIL_LINES = 15  # of the output, in a failure's message
MAX_OUTPUT = 64 << 20  # bytes kept of each stream (its end)


@dataclass(frozen=True)
class Finished:
    """A command that ran to its end: its exit status and (the end of) its output."""

    cmd: tuple[str, ...]
    returncode: int
    stdout_bytes: bytes
    stderr_bytes: bytes  # b"" when stderr went into stdout (`merge`)
    truncated: bool = False  # a stream was longer than `max_output`: its start is gone

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def stdout(self) -> str:
        return self.stdout_bytes.decode("utf-8", errors="replace")

    @property
    def stderr(self) -> str:
        return self.stderr_bytes.decode("utf-8", errors="replace")


def _end_of(f: IO[bytes], limit: int) -> tuple[bytes, bool]:
    size = f.seek(0, 2)
    f.seek(max(0, size - limit))
    return f.read(), size > limit


def call(
    cmd: Sequence[str],
    *,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    input: str | bytes | None = None,
    merge: bool = False,
    max_output: int | None = None,
) -> Finished:
    """Run `cmd` to its end (stdin: `input`, else nothing). Raises OSError when it cannot
    start (FileNotFoundError: not installed) and subprocess.TimeoutExpired, after killing
    it, past `timeout` (its `output`: what it printed). `merge`: stderr into stdout.
    `max_output`: bytes kept of each stream (MAX_OUTPUT when None)."""
    limit = MAX_OUTPUT if max_output is None else max_output
    data = input.encode() if isinstance(input, str) else input
    box = _HELPERS
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            list(cmd), cwd=cwd, env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL if data is None else subprocess.PIPE,
            stdout=out, stderr=subprocess.STDOUT if merge else err,
            start_new_session=box is not None)  # its own group: what box_helpers records
        record = _record_group(box, proc.pid) if box is not None else None
        try:
            proc.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            got, _ = _end_of(out, limit)
            raise subprocess.TimeoutExpired(list(cmd), timeout or 0, output=got) from None
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        finally:
            if record is not None:
                record.unlink(missing_ok=True)
        stdout, cut_out = _end_of(out, limit)
        stderr, cut_err = _end_of(err, limit)
    return Finished(tuple(cmd), proc.returncode, stdout, stderr, cut_out or cut_err)


# Where the running night records the process group of each helper it runs (None: not in a
# night): a night killed with -9 leaves its uploads, notify commands... running; the next run
# of the day finds them there and kills them before it goes on (nightly.executors.groups).
_HELPERS: Path | None = None


def box_helpers(folder: Path | None) -> None:
    """From now on each helper `call` starts runs in a process group of its own, recorded in
    `folder` while it runs (`None`: no longer). The record has the format of a recipe's
    (nightly.executors.groups), so one reap reads both."""
    global _HELPERS
    if folder is not None:
        folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    _HELPERS = folder


def _record_group(folder: Path, pid: int) -> Path | None:
    """`folder/<pid>.pgid`: the new group (pid = pgid), its start time, boot and user; None
    when it cannot be written (the helper runs unrecorded rather than not at all)."""
    fields = proc_stat(pid)
    info = {"pgid": pid, "start": fields[18] if fields else 0, "boot": boot_id(),
            "uids": [os.geteuid()]}
    path = folder / f"{pid}.pgid"
    tmp = folder / f".{pid}.pgid.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as f:
            os.fchmod(fd, 0o644)
            f.write(json.dumps(info))
        os.replace(tmp, path)
    except OSError:
        return None
    return path


def run(
    cmd: Sequence[str],
    what: str | None = None,
    *,
    error: type[NightlyError] = NightlyError,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    tail: int = TAIL_LINES,
    hint: str = "",
    missing: str = "",
    log: Callable[[str], None] | None = None,
) -> str:
    """The stdout of `cmd`. On failure raises `error`: "WHAT failed (exit N): COMMAND" and
    the last `tail` lines of its output, then `hint` (what to change) when given. `missing`:
    the message when the program is not installed. `log` is told the command line first."""
    line = shlex.join(cmd)
    if log is not None:
        log(line)
    try:
        proc = call(cmd, cwd=cwd, env=env, timeout=timeout)
    except FileNotFoundError as e:
        raise error(missing or f"{what or line} failed: {e.filename or cmd[0]} is not there "
                    f"({e.strerror})") from e
    except subprocess.TimeoutExpired as e:
        raise error(f"{what or line} did not finish in {timeout:g} s: {line}") from e
    if proc.returncode != 0:
        head = f"{what} failed (exit {proc.returncode}): {line}" if what else (
            f"{line} failed (exit {proc.returncode})")
        lines = (proc.stdout + proc.stderr).strip().splitlines()[-tail:]
        raise error("\n".join([head, *lines, *([hint] if hint else [])]))
    if proc.truncated:
        raise error(f"{what or line} printed more than {MAX_OUTPUT:,} bytes, more than "
                    f"nightly reads of a helper: {line}")
    return proc.stdout


def git(*args: str, cwd: Path | None = None, timeout: float, purpose: str = "") -> str:
    """`git ARGS` in `cwd`, its stdout stripped; NightlyError naming the command and git's
    own words when it fails. `purpose` completes "install git to ..." when git is missing."""
    return run(["git", *args], cwd=cwd, timeout=timeout,
               missing=f"git is not installed; install git to {purpose or 'use it'}").strip()


def pip_command(*args: str, python: str = sys.executable, target: str | None = None) -> list[str]:
    """`PYTHON -m pip [--python TARGET] ARGS`, pip's version check off (`target`: the
    environment pip works on, when it is not pip's own Python's)."""
    return [python, "-m", "pip", *(["--python", target] if target else []),
            "--disable-pip-version-check", *args]


def pip_download(dest: Path | str, *args: str, python: str = sys.executable,
                 target: str | None = None, binary_only: bool = True) -> list[str]:
    """The one `pip download` nightly runs: into `dest`, wheels only unless `binary_only` is
    false; ARGS are the requirements and any other options (indexes, platform, --quiet)."""
    return pip_command("download", *(["--only-binary", ":all:"] if binary_only else []),
                       "--dest", str(dest), *args, python=python, target=target)
