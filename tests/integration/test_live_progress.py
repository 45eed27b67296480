"""What the person at the terminal sees while a night runs (issue 50): in a pseudo-terminal,
the live view (builds done of the total, each running build's phase, the last line of its
log); through a pipe, plain timestamped lines with no control codes; from another shell,
`nightly status` shows the running night's live state."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.support.cli import child_env, nightly_cmd
from tests.support.day import find_day
from tests.support.fixture_types import MakeProject, RunCli, StartCli, WaitUntil
from tests.support.projects import DATE, Project, run_args

MATRIX = """
[matrix.linux.manywheel]
pythons = ["3.6m", "3.7m", "3.8"]
cudas = ["cpu"]
"""
HELD = "manywheel_3.6m_cpu"
# The held build prints a line of its own before it waits: the view shows it as its last line.
SAYS = "compiling the held module"


def _recipe_says(p: Project) -> None:
    r = p.path / "recipes" / "manywheel" / "build.sh"
    r.write_text(r.read_text().replace("go_wait() {", f'echo "{SAYS} $ID"\ngo_wait() {{', 1))


def _read_pty(fd: int, out: bytearray, until: float) -> None:
    while time.time() < until:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            return
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the child closed its side
            return
        if not chunk:
            return
        out += chunk


def test_a_night_in_a_terminal_shows_the_count_and_a_running_builds_phase(night_project: MakeProject) -> None:
    p = night_project(matrix=MATRIX, behaviours={HELD: "go:60"}, queues=2)
    _recipe_says(p)
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*nightly_cmd(), *run_args(p.config)], cwd=p.path, stdin=slave, stdout=slave,
        stderr=slave, env=child_env({"COLUMNS": "160", "TERM": "xterm-256color"}))
    os.close(slave)
    out = bytearray()
    try:
        deadline = time.time() + 60
        # While the held build waits: the view says its phase, its last log line and the count.
        while time.time() < deadline and not (
            b"2 of 3 builds done" in out and SAYS.encode() in out and b"building" in out
        ):
            _read_pty(master, out, time.time() + 1)
        seen = bytes(out)
        assert b"2 of 3 builds done, 1 to go" in seen, seen[-3000:]
        assert b"building" in seen
        assert HELD.encode() in seen
        assert SAYS.encode() in seen
        assert b"\x1b[" in seen  # it is the live (rich) view, not the plain lines
        assert b"start  " not in seen  # ... which a terminal does not get
        p.go(HELD)
        end = time.time() + 60
        while proc.poll() is None and time.time() < end:
            _read_pty(master, out, time.time() + 1)
        _read_pty(master, out, time.time() + 1)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        os.close(master)
    assert proc.returncode == 0, bytes(out)[-3000:]


def test_a_night_through_a_pipe_is_plain_timestamped_lines(
    night_project: MakeProject, run_cli: RunCli
) -> None:
    p = night_project(matrix=MATRIX, queues=2)
    code, out, err = run_cli(run_args(p.config), env={"TERM": "xterm-256color"})
    assert code == 0, (out, err)
    assert "\x1b" not in out
    assert "\x1b" not in err
    assert "\r" not in out
    lines = out.splitlines()
    assert any(line.endswith(f"phase  {HELD}: building") for line in lines), out
    assert any(line.endswith(f"phase  {HELD}: testing") for line in lines), out
    assert any("(3 of 3 done)" in line for line in lines), out
    assert "estimates are a guess" in out  # the first night: no history yet


def test_status_from_another_shell_shows_the_running_night(
    night_project: MakeProject, run_cli: RunCli, start_cli: StartCli, wait_until: WaitUntil
) -> None:
    p = night_project(matrix=MATRIX, behaviours={HELD: "go:60"}, queues=2)
    _recipe_says(p)
    night = start_cli(run_args(p.config))
    live = p.day / "logs" / "master" / "live.json"
    wait_until(lambda: live.is_file() and SAYS in live.read_text(),
               timeout=60, what="the held build's line in live.json")
    wait_until(lambda: '"done":2' in live.read_text(), timeout=60, what="two builds done")
    code, out, err = run_cli(["status", "--config", str(p.config), "--date", DATE])
    p.go(HELD)
    assert "running now" in out, (out, err)
    assert "2 of 3 builds done, 1 to go" in out
    assert f"queue 0: {HELD} building" in out or f"queue 1: {HELD} building" in out, out
    assert SAYS in out
    assert "\x1b" not in out
    code, nout, nerr = night.wait()
    assert code == 0, (nout, nerr)
    # Once the night is over, status shows no live state.
    find_day(p.path / "nightlies", DATE)
    code, out, err = run_cli(["status", "--config", str(p.config), "--date", DATE])
    assert "running now" not in out, out


def test_a_symlinked_live_file_is_not_read(night_project: MakeProject, tmp_path: Path) -> None:
    from nightly.workspace import live

    target = tmp_path / "elsewhere.json"
    target.write_text('{"builds": [], "pid": 1}')
    link = tmp_path / "live.json"
    link.symlink_to(target)
    assert live.read(link) is None
    assert live.read(target) is not None


def test_publishing_is_each_builds_last_phase_with_packages_done_of_the_total(
        night_project: Any, run_cli: Any) -> None:
    """The upload after the builds, through a pipe: one plain line per package, per build,
    done of the total (no control codes); live.json's last step is the one after it."""
    from tests.support.wheels import wheel_recipe

    p = night_project(matrix=MATRIX, queues=2,
                      extra='[publish]\nurl = "mirror"\n\n[smoke]\nenabled = false\n')
    (p.path / "recipes" / "manywheel" / "build.sh").write_text(wheel_recipe(p.signals))
    code, out, err = run_cli(run_args(p.config), env={"TERM": "xterm-256color"})
    assert code == 0, (out, err)
    assert "\x1b" not in out
    builds = sorted(p.state()["builds"])
    assert len(builds) == 3
    said = [line.split(" publish  ", 1)[1] for line in out.splitlines() if " publish  " in line]
    assert [s.split(":", 1)[0] for s in said] == builds, out
    assert [s.split(": ", 1)[1].split(" (")[0] for s in said] == ["1 of 1 packages"] * 3
    assert [s.split("(", 1)[1].split(")")[0] for s in said] == [
        "1 of 3 in all", "2 of 3 in all", "3 of 3 in all"]
    assert all(s.endswith(" uploaded") for s in said), said
    state = json.loads((p.day / "logs" / "master" / "live.json").read_text())
    assert state["step"] == "reporting"
