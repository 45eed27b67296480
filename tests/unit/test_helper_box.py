"""A night's helpers (uploads, notify commands: nightly.procs.call) run in process groups
recorded in the day, so a night killed with -9 leaves none the next run cannot find and kill
(nightly.executors.groups.reap_helpers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from nightly import procs
from nightly.executors.groups import reap_helpers
from nightly.files import proc_stat

# A nightly stand-in: boxes its helpers, starts one that outlives it, and is killed -9.
CHILD = """
import sys
from pathlib import Path
from nightly import procs
procs.box_helpers(Path(sys.argv[1]))
procs.call(["sleep", "1000"])
"""


def _wait_for(pred: Callable[[], bool], timeout: float = 20) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError("timed out")


def test_a_helper_left_by_a_killed_night_is_found_and_killed(tmp_path: Path) -> None:
    box = tmp_path / "work" / ".helpers"
    night = subprocess.Popen([sys.executable, "-c", CHILD, str(box)])
    try:
        _wait_for(lambda: box.is_dir() and any(box.glob("*.pgid")))
        (record,) = box.glob("*.pgid")
        helper = int(record.name.split(".")[0])
        _wait_for(lambda: (st := proc_stat(helper)) is not None and st[1] == helper)
        night.send_signal(signal.SIGKILL)
        night.wait()
        time.sleep(0.2)
        assert proc_stat(helper) is not None, "the helper died with its night: nothing to test"
        notes = reap_helpers(box)
        assert proc_stat(helper) is None
        assert notes == [f"killed 1 process(es) of the night's helpers (uploads, notify) left "
                         f"running by a run that died (process group {helper})"]
        assert not record.exists()
    finally:
        night.kill()
        night.wait()
        for rec in box.glob("*.pgid"):
            pid = int(rec.name.split(".")[0])
            if proc_stat(pid) is not None:
                os.killpg(pid, signal.SIGKILL)


def test_a_helper_that_ends_leaves_no_record(tmp_path: Path) -> None:
    box = tmp_path / ".helpers"
    procs.box_helpers(box)
    try:
        assert procs.call(["true"]).ok
    finally:
        procs.box_helpers(None)
    assert list(box.iterdir()) == []
    assert reap_helpers(box) == []
