"""nightly.procs: a helper command's output, or one error naming what failed and why."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nightly import procs
from nightly.errors import NightlyError


class Boom(NightlyError):
    """A caller's own error class."""


def test_run_returns_stdout_and_reads_no_stdin() -> None:
    code = "import sys; print(repr(sys.stdin.read())); print('out')"
    assert procs.run([sys.executable, "-c", code]) == "''\nout\n"


def test_a_failure_names_what_the_command_and_the_last_lines() -> None:
    code = "import sys; print('\\n'.join(map(str, range(30)))); sys.exit('the reason')"
    with pytest.raises(Boom) as exc:
        procs.run([sys.executable, "-c", code], "counting", error=Boom, tail=3,
                  hint="fix the count")
    lines = str(exc.value).splitlines()
    assert lines[0].startswith("counting failed (exit 1): ")
    assert sys.executable in lines[0]
    assert lines[1:] == ["28", "29", "the reason", "fix the count"]


def test_a_missing_program_and_a_timeout_are_errors_not_tracebacks(tmp_path: Path) -> None:
    with pytest.raises(NightlyError, match="install it"):
        procs.run([str(tmp_path / "absent")], "x", missing="absent is not installed; install it")
    with pytest.raises(NightlyError, match=r"did not finish in 0.2 s"):
        procs.run([sys.executable, "-c", "import time; time.sleep(5)"], "sleeping", timeout=0.2)


def test_log_is_told_the_command_line() -> None:
    told: list[str] = []
    procs.run([sys.executable, "-c", "pass"], log=told.append)
    assert told == [f"{sys.executable} -c pass"]


def test_git_strips_and_names_git_s_words(tmp_path: Path) -> None:
    procs.git("init", "-q", str(tmp_path))
    assert procs.git("rev-parse", "--is-inside-work-tree", cwd=tmp_path) == "true"
    with pytest.raises(NightlyError, match=r"git rev-parse --verify nope failed \(exit \d+\)"):
        procs.git("rev-parse", "--verify", "nope", cwd=tmp_path)
