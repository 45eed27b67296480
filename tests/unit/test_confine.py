"""Each local recipe runs in a cgroup nightly kills when it ends (nightly.executors.confine):
a process it started in a session of its own is named in the log and killed; where nightly
cannot make a cgroup (not root, no cgroup v2), one line in the log says so and the build
still runs."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nightly.executors import confine
from nightly.executors.base import Job
from nightly.executors.local import LocalExecutor
from nightly.files import proc_stat


def _job(root: Path, recipe: str) -> Job:
    (root / "recipes" / "t").mkdir(parents=True)
    (root / "recipes" / "t" / "build.sh").write_text(recipe)
    folder = root / "work" / "b"
    for d in ("out", "scratch"):
        (folder / d).mkdir(parents=True)
    return Job(build_id="t_1", package="t", python="3", cuda="cpu", env={},
               recipes_dir=root / "recipes", source_dir=root, output_dir=folder / "out",
               work_dir=folder / "scratch", timeout_s=60)


@pytest.fixture
def restore() -> Iterator[None]:
    saved = confine._SHARED
    try:
        yield
    finally:
        confine._SHARED = saved


# Starts `sleep` in its own session, writes its pid, and ends at once.
LEAVES = 'setsid sleep 86396 </dev/null >/dev/null 2>&1 &\necho "$!" >"$WORK_DIR/pid"\n'


def test_a_process_left_in_its_own_session_is_named_and_killed(tmp_path: Path) -> None:
    job = _job(tmp_path, LEAVES)
    out: list[bytes] = []
    result = LocalExecutor().run(job, out.append, threading.Event())
    text = b"".join(out).decode()
    assert result.exit_status == 0, text
    pid = int((job.work_dir / "pid").read_text())
    time.sleep(0.2)
    alive = proc_stat(pid) is not None
    if confine.shared().base is None:  # not root / no cgroup v2: it says so, and no more
        assert "[nightly] processes: " in text, text
        assert alive
        os.kill(pid, signal.SIGKILL)
    else:
        assert not alive, text
        assert f"left 1 process(es) running when it ended, killed: pid {pid} (uid " in text
        assert any(f"killed: pid {pid} " in n for n in result.notes), result.notes


def test_without_a_cgroup_the_log_says_what_is_not_guarded(tmp_path: Path,
                                                          restore: None) -> None:
    off = confine.Confinement()
    off.base, off.unavailable = None, "nightly runs as uid 1000, not root: it cannot create " \
        "a cgroup per build"
    confine._SHARED = off
    job = _job(tmp_path, "echo built\n")
    out: list[bytes] = []
    result = LocalExecutor().run(job, out.append, threading.Event())
    text = b"".join(out).decode()
    assert result.exit_status == 0, text
    assert "built" in text
    assert ("[nightly] processes: nightly runs as uid 1000, not root: it cannot create a "
            "cgroup per build; only the recipe's process group is killed when it ends") in text


@pytest.mark.skipif(os.geteuid() != 0, reason="starts a process as another uid (root only)")
def test_a_stray_that_made_itself_non_dumpable_is_still_found() -> None:
    """The sweep reads each process's real uid from its status's text, not from the owner
    of /proc/PID's files, which are root's for a process that is not dumpable: such a
    process of the build account is found (and would be killed) all the same."""
    uid = 61000 + secrets.randbelow(4000)
    hide = ("import ctypes, sys; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0); "  # PR_SET_DUMPABLE 0
            "print('hidden', flush=True); sys.stdin.read()")
    # The system's interpreter: this one may live where another uid cannot run it.
    python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
    proc = subprocess.Popen([python, "-c", hide], user=uid, group=uid, cwd="/",
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"hidden\n"
        # What a check of the files' owner would see: root's.
        assert os.stat(f"/proc/{proc.pid}/status").st_uid == 0
        assert confine.real_uid(proc.pid) == uid
        assert [p.pid for p in confine.strays(uid, confine.shared())] == [proc.pid]
    finally:
        proc.kill()
        proc.wait()
    assert confine.real_uid(proc.pid) is None
    assert confine.strays(uid, confine.shared()) == []
