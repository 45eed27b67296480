"""Each corrupt input of a day folder is one line or a warning, never a traceback or a hang,
and the night goes on where it can (issue 48):

- a summary.json nested too deeply (RecursionError in Python's parser) or a FIFO in its
  place (a reader waits forever) reads as no summary: status and report show the day from
  state.json, and the next run writes a good one;
- a state.json with an integer SQLite cannot store (OverflowError in the history writer) or
  a FIFO in its place is not nightly's: one line, exit 2, kept aside;
- a history.sqlite that is a folder, a FIFO or a database of another schema is set aside as
  history.sqlite.bad-<time> with a warning and a fresh history is started.

Every command runs with a timeout: a hang fails the test instead of blocking it.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.support.day import find_day
from tests.support.projects import DATE, Project, run_args
from tests.support.wheels import wheel_recipe

MATRIX = '[matrix.linux.manywheel]\npythons = ["3.8"]\ncudas = ["cpu"]\n'
TIMEOUT = 60  # seconds a command may take here: far beyond a good one, and a hang fails
COMMANDS = ("status", "report", "run")


def _night(night_project: Any, run_cli: Any) -> Project:
    p: Project = night_project(matrix=MATRIX, extra="[smoke]\nenabled = false\n")
    (p.path / "recipes" / "manywheel" / "build.sh").write_text(wheel_recipe(p.signals))
    code, out, err = run_cli(run_args(p.config), timeout=120)
    assert code == 0, (out, err)
    return p


def _root(p: Project) -> Path:
    return p.path / "nightlies"


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err, err
    assert "Error:" not in err.replace("error:", ""), err  # no exception's name either


# ---------------------------------------------------------------------------- summary.json


@pytest.mark.parametrize("kind", ["nested", "fifo"])
def test_a_corrupt_summary_reads_as_none_and_the_next_run_writes_a_good_one(
    kind: str, night_project: Any, run_cli: Any
) -> None:
    p = _night(night_project, run_cli)
    summary = find_day(_root(p), DATE).summary_path
    summary.unlink()
    if kind == "nested":
        summary.write_text('{"builds": {}, "deep": ' + "[" * 100_000 + "]" * 100_000 + "}")
    else:
        os.mkfifo(summary)
    for command in COMMANDS:
        code, out, err = run_cli(run_args(p.config, command=command), timeout=TIMEOUT)
        _no_traceback(err)
        assert code == 0, (command, out, err)
    # The run rewrote it: a regular file of nightly's, the night's build in it.
    assert summary.is_file()
    assert not summary.is_symlink()
    data = json.loads(summary.read_text())
    assert data["builds"]["manywheel_3.8_cpu"]["outcome"] == "succeeded"
    code, out, err = run_cli(run_args(p.config, command="status"), timeout=TIMEOUT)
    assert code == 0, (out, err)
    assert "manywheel_3.8_cpu" in out


# ---------------------------------------------------------------------------- state.json


@pytest.mark.parametrize("kind", ["huge-integer", "fifo"])
def test_a_corrupt_state_is_one_line_exit_2_and_kept(
    kind: str, night_project: Any, run_cli: Any
) -> None:
    p = _night(night_project, run_cli)
    state = find_day(_root(p), DATE).state_path
    good = state.read_text()
    for command in ("run", "status", "report"):  # run first: its history writer overflowed
        if kind == "huge-integer":
            data = json.loads(good)
            data["builds"]["manywheel_3.8_cpu"]["attempts"] = 10**30
            state.write_text(json.dumps(data))
        else:
            if os.path.lexists(state):
                state.unlink()
            os.mkfifo(state)
        code, out, err = run_cli(run_args(p.config, command=command), timeout=TIMEOUT)
        assert code == 2, (command, out, err)
        _no_traceback(err)
        lines = err.strip().splitlines()
        assert len(lines) == 1, (command, err)
        assert str(state) in lines[0], lines[0]
        assert "kept as state.json.bad-" in lines[0], lines[0]
        why = "integer out of range" if kind == "huge-integer" else "FIFO"
        assert why in lines[0], lines[0]
        assert not os.path.lexists(state)  # moved aside, the user's file kept
    kept = sorted(state.parent.glob("state.json.bad-*"))
    assert kept


# ---------------------------------------------------------------------------- history.sqlite


def _other_schema(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE builds (name TEXT, value INTEGER)")
    conn.execute("INSERT INTO builds VALUES ('someone else''s', 1)")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("kind", ["folder", "fifo", "other-schema"])
def test_an_unusable_history_is_set_aside_and_a_fresh_one_started(
    kind: str, night_project: Any, run_cli: Any
) -> None:
    p = _night(night_project, run_cli)
    history = _root(p) / "history.sqlite"
    for command in COMMANDS:
        for companion in (history, Path(f"{history}-wal"), Path(f"{history}-shm")):
            if companion.is_file():
                companion.unlink()
        if kind == "folder":
            history.mkdir()
            (history / "something").write_text("kept\n")
        elif kind == "fifo":
            os.mkfifo(history)
        else:
            _other_schema(history)
        args = run_args(p.config, "--rebuild", "manywheel_3.8_cpu") if command == "run" \
            else run_args(p.config, command=command)
        code, out, err = run_cli(args, timeout=TIMEOUT)
        _no_traceback(err)
        assert code == 0, (command, out, err)
        assert "history.sqlite.bad-" in err, (command, err)
        assert "a fresh history started" in err, (command, err)
    kept = sorted(_root(p).glob("history.sqlite.bad-*"))
    assert len([k for k in kept if not k.name.endswith(("-wal", "-shm"))]) == len(COMMANDS)
    if kind == "folder":
        assert all((k / "something").read_text() == "kept\n" for k in kept if k.is_dir())
    # The run recorded its build in the fresh history, of nightly's own schema.
    conn = sqlite3.connect(history)
    try:
        rows = conn.execute("SELECT build_id, outcome FROM builds").fetchall()
    finally:
        conn.close()
    assert ("manywheel_3.8_cpu", "succeeded") in rows


# ---------------------------------------------------------------------------- live.json, the lock


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_live_state_that_is_no_file_is_named_and_the_status_shown(
    kind: str, night_project: Any, run_cli: Any
) -> None:
    """logs/master/live.json as a folder (IsADirectoryError) or a FIFO: `nightly status`
    shows the day and names it in one warning line."""
    p = _night(night_project, run_cli)
    path = find_day(_root(p), DATE).master / "live.json"
    if os.path.lexists(path):
        path.unlink()
    if kind == "folder":
        path.mkdir()
        (path / "x").write_text("kept\n")
    else:
        os.mkfifo(path)
    code, out, err = run_cli(run_args(p.config, command="status"), timeout=TIMEOUT)
    _no_traceback(err)
    assert code == 0, (out, err)
    assert "manywheel_3.8_cpu" in out
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert str(path) in lines[0], lines[0]
    assert "no live state" in lines[0], lines[0]
    assert ("a folder" if kind == "folder" else "a FIFO") in lines[0], lines[0]
    if kind == "folder":
        assert (path / "x").read_text() == "kept\n"  # never removed


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_lock_file_that_is_no_file_never_hangs(
    kind: str, night_project: Any, run_cli: Any
) -> None:
    """The day's lock as a FIFO (opened without O_NONBLOCK, a reader waits for a writer
    forever) or a folder: `nightly status` shows the day and names the lock in one line;
    `nightly run` stops with one line naming it, exit 2. Nothing is removed."""
    p = _night(night_project, run_cli)
    lock = _root(p) / f"{DATE}.lock"
    lock.unlink()
    if kind == "fifo":
        os.mkfifo(lock)
    else:
        lock.mkdir()
    what = "a FIFO" if kind == "fifo" else "a folder"
    code, out, err = run_cli(run_args(p.config, command="status"), timeout=TIMEOUT)
    _no_traceback(err)
    assert code == 0, (out, err)
    assert "manywheel_3.8_cpu" in out
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for part in (str(lock), what, "remove it"):
        assert part in lines[0], lines[0]
    code, out, err = run_cli(run_args(p.config), timeout=TIMEOUT)
    _no_traceback(err)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for part in (str(lock), what):
        assert part in lines[0], lines[0]
    assert os.path.lexists(lock)
