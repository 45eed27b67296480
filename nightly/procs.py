"""Running a helper command (pip, apt-get, dpkg-deb, a compiler, git) and reading its output:
one way, one error shape.

`run` returns the command's stdout, or raises the caller's error class (a NightlyError) in
one shape: what failed, its exit status, the command, then the last lines of its output, so
the message shows the reason without the whole log. A command that is not installed, or that
runs past its timeout, is the same error with its own words, never a traceback. Nothing is
read from this process's stdin. Builds themselves run through the executors, not here.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from nightly.errors import NightlyError

TAIL_LINES = 15  # of the output, in a failure's message


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
        proc = subprocess.run(list(cmd), capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              cwd=cwd, env=None if env is None else dict(env), timeout=timeout,
                              check=False)
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
    return proc.stdout


def git(*args: str, cwd: Path | None = None, timeout: float = 1800, purpose: str = "") -> str:
    """`git ARGS` in `cwd`, its stdout stripped; NightlyError naming the command and git's
    own words when it fails. `purpose` completes "install git to ..." when git is missing."""
    return run(["git", *args], cwd=cwd, timeout=timeout,
               missing=f"git is not installed; install git to {purpose or 'use it'}").strip()
