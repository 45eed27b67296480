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
    procs.git("init", "-q", str(tmp_path), timeout=60)
    assert procs.git("rev-parse", "--is-inside-work-tree", cwd=tmp_path, timeout=60) == "true"
    with pytest.raises(NightlyError, match=r"git rev-parse --verify nope failed \(exit \d+\)"):
        procs.git("rev-parse", "--verify", "nope", cwd=tmp_path, timeout=60)


# ---------------------------------------------------------------------------- call: one helper


def test_call_returns_the_status_and_both_streams_never_raising_on_exit() -> None:
    code = "import sys; print(sys.stdin.read() + '!'); print('err', file=sys.stderr); sys.exit(3)"
    got = procs.call([sys.executable, "-c", code], input="hi")
    assert (got.returncode, got.ok) == (3, False)
    assert got.stdout == "hi!\n"
    assert got.stderr == "err\n"
    assert not got.truncated
    merged = procs.call([sys.executable, "-c", code], merge=True)
    assert merged.stdout == "!\nerr\n"
    assert merged.stderr_bytes == b""


def test_call_keeps_only_the_end_of_a_long_output() -> None:
    code = "import sys; sys.stdout.write('a' * 100000 + 'THE END')"
    got = procs.call([sys.executable, "-c", code], max_output=1000)
    assert got.truncated
    assert len(got.stdout_bytes) == 1000
    assert got.stdout.endswith("THE END")


def test_run_refuses_an_output_past_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The old run read all of a helper's output into memory; it now keeps MAX_OUTPUT bytes
    and a command that prints more is an error naming the bound, not a partial answer."""
    monkeypatch.setattr(procs, "MAX_OUTPUT", 1000)
    with pytest.raises(Boom, match=r"printed more than 1,000 bytes"):
        procs.run([sys.executable, "-c", "print('x' * 5000)"], "printing", error=Boom)


def test_a_timeout_kills_the_command_and_keeps_what_it_printed(tmp_path: Path) -> None:
    import subprocess

    code = ("import os, sys, time; print('started', flush=True); "
            f"open({str(tmp_path / 'pid')!r}, 'w').write(str(os.getpid())); time.sleep(30)")
    with pytest.raises(subprocess.TimeoutExpired) as exc:
        procs.call([sys.executable, "-c", code], timeout=2)
    assert exc.value.output == b"started\n"
    pid = int((tmp_path / "pid").read_text())
    from nightly.files import pid_exists

    assert not pid_exists(pid)


def test_pip_download_is_built_in_one_place_and_runs(tmp_path: Path) -> None:
    """The one `pip download`, run for real: a wheel from a local folder, no index."""
    import zipfile

    links = tmp_path / "links"
    links.mkdir()
    with zipfile.ZipFile(links / "tinypkg-1.0-py3-none-any.whl", "w") as zf:
        zf.writestr("tinypkg/__init__.py", "")
        zf.writestr("tinypkg-1.0.dist-info/METADATA",
                    "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n")
        zf.writestr("tinypkg-1.0.dist-info/WHEEL",
                    "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr("tinypkg-1.0.dist-info/RECORD", "")
    argv = procs.pip_download(tmp_path / "got", "--no-index", "--find-links", str(links),
                              "tinypkg==1.0")
    assert argv[:3] == [sys.executable, "-m", "pip"]
    assert argv[argv.index("--dest") + 1] == str(tmp_path / "got")
    assert argv[argv.index("--only-binary"):][:2] == ["--only-binary", ":all:"]
    procs.run(argv, "pip download")
    assert [p.name for p in (tmp_path / "got").iterdir()] == ["tinypkg-1.0-py3-none-any.whl"]
    assert procs.pip_command("install", "x", target="/v/bin/python")[3:5] == [
        "--python", "/v/bin/python"]
