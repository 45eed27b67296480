"""The day folder (docs/folders.md), the day's lock, state.json and log moves."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from nightly.errors import LockHeld, NightlyError
from nightly.workspace import (
    FAILED,
    INTERRUPTED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    BuildEntry,
    Day,
    DayLock,
    PackageFile,
    State,
    atomic_write,
    is_locked,
    write_json,
)

DATE = dt.date(2019, 1, 31)


@pytest.fixture
def day(tmp_path: Path) -> Day:
    d = Day(tmp_path / "root", DATE)
    d.create()
    return d


# ---------------------------------------------------------------------------- Day


def test_day_layout_is_designs(tmp_path: Path) -> None:
    d = Day(tmp_path, DATE)
    assert d.path == tmp_path / "2019_01_31"
    assert d.source == d.path / "source"
    assert d.master == d.path / "logs" / "master"
    assert d.succeeded == d.path / "logs" / "succeeded"
    assert d.failed == d.path / "logs" / "failed"
    assert d.packages == d.path / "packages"
    assert d.package_dir("conda", "cu100") == d.path / "packages" / "conda" / "cu100"
    assert d.state_path == d.path / "state.json"
    assert d.summary_path == d.path / "summary.json"
    assert d.running_log("conda_3.7_cu100") == d.path / "logs" / "conda_3.7_cu100.log"
    assert d.lock_path == tmp_path / "2019_01_31.lock"  # beside the folder, not in it
    assert not d.path.exists()
    d.create()
    for p in (d.master, d.succeeded, d.failed, d.packages):
        assert p.is_dir()
    d.create()  # idempotent


def test_day_name_override(tmp_path: Path) -> None:
    d = Day(tmp_path, DATE, name="release_2.1.0")
    assert d.path == tmp_path / "release_2.1.0"
    assert d.lock_path == tmp_path / "release_2.1.0.lock"


def test_log_moves_keep_every_attempt(day: Day) -> None:
    bid = "manywheel_3.7m_cpu"
    assert day.final_log(bid) is None
    day.running_log(bid).write_text("attempt 1\n")
    failed = day.file_log(bid, ok=False)
    assert failed == day.failed / f"{bid}.log"
    assert not day.running_log(bid).exists()
    assert day.final_log(bid) == failed

    # A new attempt appends to the same text, back in logs/ while it runs.
    running = day.reopen_log(bid)
    assert running == day.running_log(bid)
    assert not failed.exists()
    with running.open("a") as f:
        f.write("attempt 2\n")
    ok = day.file_log(bid, ok=True)
    assert ok == day.succeeded / f"{bid}.log"
    assert ok.read_text() == "attempt 1\nattempt 2\n"
    assert day.final_log(bid) == ok
    assert not (day.failed / f"{bid}.log").exists()

    # reopen after success (a --rebuild) takes the succeeded log back too.
    assert day.reopen_log(bid).read_text() == "attempt 1\nattempt 2\n"
    assert not ok.exists()


def test_reopen_keeps_a_running_log_left_by_a_dead_run(day: Day) -> None:
    bid = "conda_3.7_cpu"
    day.running_log(bid).write_text("killed half way\n")
    (day.failed / f"{bid}.log").write_text("an older attempt\n")
    assert day.reopen_log(bid).read_text() == "killed half way\n"


def test_atomic_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "state.json"
    write_json(target, {"b": 1, "a": [1, 2]})
    assert json.loads(target.read_text()) == {"a": [1, 2], "b": 1}
    atomic_write(target, b"new")
    assert target.read_bytes() == b"new"
    assert oct(target.stat().st_mode & 0o777) == oct(0o644)
    assert [p.name for p in target.parent.iterdir()] == ["state.json"]


# ---------------------------------------------------------------------------- State


def test_state_updates_are_on_disk_at_once(day: Day) -> None:
    s = State(day.state_path)
    assert s.status("x") == PENDING
    assert s.get("x") == BuildEntry()
    s.update("x", status=RUNNING, attempts=1)
    on_disk = json.loads(day.state_path.read_text())
    assert on_disk["builds"]["x"]["status"] == RUNNING
    assert on_disk["builds"]["x"]["attempts"] == 1
    s.set_meta(commit="abc")
    again = State(day.state_path)
    assert again.status("x") == RUNNING
    assert again.meta["commit"] == "abc"
    # get() returns a frozen snapshot: a changed copy changes nothing.
    assert again.get("x").replace(status="bogus").status == "bogus"
    assert again.status("x") == RUNNING


# An entry exactly as the previous version (a dict per build) wrote it, cluster fields and a
# key this version does not know included.
OLD_ENTRY = {
    "status": "succeeded", "attempts": 2, "reason": None, "exit_status": 0, "infra": False,
    "started": 1714600000.5, "ended": 1714600100.25, "duration_s": 99.75, "updated": 1714600101.0,
    "machine": "tcp://10.0.0.5:4000", "queue": 1, "executor": "container",
    "package": "manywheel", "python": "3.12", "cuda": "cu126", "variant": "",
    "packages": [{"name": "demo-1.0-py3-none-any.whl",
                  "path": "packages/manywheel/cu126/demo-1.0-py3-none-any.whl",
                  "size": 1234, "sha256": "ab" * 32}],
    "log": "logs/succeeded/manywheel_3.12_cu126.log",
    "published": {"s3://b/whl/nightly/cu126/demo-1.0-py3-none-any.whl": "ab" * 32},
    "upload_error": None, "worker_name": "lin-1", "host": "h1", "token": "2024T-x",
    "a_future_key": {"kept": True},
}


def test_build_entry_reads_the_previous_versions_entries() -> None:
    e = BuildEntry.from_json(OLD_ENTRY)
    assert (e.status, e.attempts, e.queue, e.exit_status) == (SUCCEEDED, 2, 1, 0)
    assert (e.duration_s, e.machine) == (99.75, "tcp://10.0.0.5:4000")
    assert e.packages == (PackageFile(name="demo-1.0-py3-none-any.whl",
                                      path="packages/manywheel/cu126/demo-1.0-py3-none-any.whl",
                                      size=1234, sha256="ab" * 32),)
    assert dict(e.published) == OLD_ENTRY["published"]
    assert e.extra == {"a_future_key": {"kept": True}}
    # Written back, it is the same entry (unset fields left out, unknown keys kept).
    assert e.to_json() == {k: v for k, v in OLD_ENTRY.items() if v not in (None, "")}
    assert BuildEntry.from_json(e.to_json()) == e


def test_build_entry_of_a_hand_edited_file_reads_bad_values_as_unset() -> None:
    e = BuildEntry.from_json({"status": "failed", "attempts": "two", "queue": None,
                              "packages": "not a list of packages"})
    assert (e.status, e.attempts, e.queue, e.packages) == (FAILED, 0, None, ())


def test_what_this_version_writes_reads_as_the_previous_version_read_it(day: Day) -> None:
    """The previous version read entries as dicts: `.get("packages", [])` of dicts,
    `.get("published") or {}`, `.get("attempts", 0)`. A state.json written now is read the
    same way."""
    s = State(day.state_path)
    pkg = PackageFile(name="a.whl", path="packages/wheel/cpu/a.whl", size=3, sha256="cd" * 32)
    s.update("b", status=SUCCEEDED, attempts=1, packages=[pkg], queue=0)
    s.add_published("b", "file:///m/whl/a.whl", pkg.sha256)
    old = json.loads(day.state_path.read_text())["builds"]["b"]
    assert (old["status"], old.get("attempts", 0), old["queue"]) == (SUCCEEDED, 1, 0)
    assert old.get("packages", []) == [{"name": "a.whl", "path": "packages/wheel/cpu/a.whl",
                                        "size": 3, "sha256": "cd" * 32}]
    assert (old.get("published") or {}) == {"file:///m/whl/a.whl": pkg.sha256}
    assert old["upload_error"] is None


def test_mark_stale_running(day: Day) -> None:
    s = State(day.state_path)
    s.update("a", status=RUNNING)
    s.update("b", status=SUCCEEDED)
    s.update("c", status=RUNNING)
    assert sorted(State(day.state_path).mark_stale_running()) == ["a", "c"]
    s2 = State(day.state_path)
    assert s2.status("a") == s2.status("c") == INTERRUPTED
    assert "died" in (s2.get("a").reason or "")
    assert s2.status("b") == SUCCEEDED
    assert s2.mark_stale_running() == []


def test_state_is_thread_safe(day: Day) -> None:
    s = State(day.state_path)

    def work(i: int) -> None:
        for n in range(5):
            s.update(f"b{i}", status=RUNNING, n=n)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    on_disk = json.loads(day.state_path.read_text())["builds"]
    assert sorted(on_disk) == [f"b{i}" for i in range(8)]
    assert all(e["n"] == 4 for e in on_disk.values())
    assert [p.name for p in day.path.iterdir() if p.name.startswith(".")] == []


def test_state_is_written_outside_its_lock_and_never_goes_back(
        day: Day, monkeypatch: pytest.MonkeyPatch) -> None:
    """While one thread's change is being written (its fsync), another changes the state in
    memory and reads it without waiting; and a write that comes late never puts an older
    state on disk than the one there: every change is on disk when its call returns."""
    import nightly.workspace.state as state_mod
    from nightly.workspace.day import write_temporary

    s = State(day.state_path)
    s.update("a", status=RUNNING)
    writing, release = threading.Event(), threading.Event()
    real = write_temporary

    def slow(path: Path, data: bytes, *, sync: bool = True) -> Path:
        if b'"late"' in data and not writing.is_set():
            writing.set()
            assert release.wait(30)
        return real(path, data, sync=sync)

    monkeypatch.setattr(state_mod, "write_temporary", slow)
    late = threading.Thread(target=lambda: s.update("a", status=SUCCEEDED, reason="late"))
    late.start()
    assert writing.wait(30)
    # The in-memory state is not held by the write in progress (before, this waited for it).
    def read() -> None:
        s.note("b", attempts=3)
        s.get("a")

    reader = threading.Thread(target=read)
    reader.start()
    reader.join(20)
    free = not reader.is_alive()
    release.set()
    assert free, "a read of the state waited for another thread's write"
    assert s.get("a").reason == "late"
    newer = threading.Thread(target=lambda: s.update("b", status=RUNNING))
    newer.start()
    late.join()
    newer.join()
    on_disk = State(day.state_path)
    assert on_disk.get("a").status == SUCCEEDED
    assert (on_disk.get("b").status, on_disk.get("b").attempts) == (RUNNING, 3)


def test_a_change_already_written_by_a_later_write_is_synced_not_rewritten(
        day: Day, monkeypatch: pytest.MonkeyPatch) -> None:
    import nightly.workspace.state as state_mod

    s = State(day.state_path)
    with s._lock:
        older = s._snapshot()  # a change whose write came after a later one's
    s.start("x", status=RUNNING)  # written, not synced
    synced: list[Path] = []
    monkeypatch.setattr(state_mod, "sync_file", synced.append)
    s._write(older)
    assert State(day.state_path).status("x") == RUNNING  # the older state is not put back
    assert synced == [day.state_path]  # the file that holds it is synced instead
    s._write(older)
    assert synced == [day.state_path]  # once
    assert [p.name for p in day.path.iterdir() if p.name.startswith(".")] == []


def test_unreadable_state_is_an_error_that_says_what_to_do(day: Day) -> None:
    day.state_path.write_text("{ half written")
    with pytest.raises(NightlyError, match=r"not JSON.*kept as state\.json\.bad-") as e:
        State(day.state_path)
    assert e.value.exit_code == 2
    (kept,) = day.path.glob("state.json.bad-*")
    assert kept.read_text() == "{ half written"
    assert not day.state_path.exists()


@pytest.mark.parametrize("text", [
    "[]", "{}", "null", '"hello"', '{"builds": null}', '{"builds": {"b": "a string"}}',
    '{"builds": {"b": {"status": 3}}}', '{"builds": {"b": {"packages": {}}}}',
    '{"builds": {}, "meta": []}', "[" * 100_000 + "]" * 100_000,
])
def test_state_of_the_wrong_shape_is_an_error_and_kept_aside(day: Day, text: str) -> None:
    day.state_path.write_text(text)
    with pytest.raises(NightlyError, match=re.escape(f"{day.state_path}: not a state.json")) as e:
        State(day.state_path)
    assert e.value.exit_code == 2
    assert "\n" not in str(e.value)
    (kept,) = day.path.glob("state.json.bad-*")
    assert kept.read_text() == text


# ---------------------------------------------------------------------------- DayLock


def test_lock_refuses_a_second_holder_naming_the_first(tmp_path: Path) -> None:
    path = tmp_path / "2019_01_31.lock"
    first = DayLock(path).acquire("run")
    try:
        holder = json.loads(path.read_text())
        assert holder["pid"] == os.getpid()
        assert holder["host"] == socket.gethostname()
        assert is_locked(tmp_path / "2019_01_31")
        with pytest.raises(LockHeld) as exc:
            DayLock(path).acquire("run")
        msg = str(exc.value)
        assert f"pid {os.getpid()}" in msg
        assert socket.gethostname() in msg
        assert f"started {holder['started']}" in msg
        assert exc.value.exit_code == 4
    finally:
        first.release()
    assert not is_locked(tmp_path / "2019_01_31")
    assert "released" in json.loads(path.read_text())
    again = DayLock(path).acquire()
    assert again.taken_over is None  # released cleanly: nothing to take over
    again.release()


def test_lock_held_by_another_process(tmp_path: Path) -> None:
    path = tmp_path / "d.lock"
    code = (
        "import sys, time; from pathlib import Path; from nightly.workspace import DayLock;"
        f"DayLock(Path({str(path)!r})).acquire(); print('held', flush=True); sys.stdin.read()"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(LockHeld, match=f"pid {holder.pid}"):
            DayLock(path).acquire()
    finally:
        holder.communicate("")
    # It exited without releasing: the kernel dropped the flock; the JSON is taken over.
    lock = DayLock(path).acquire()
    try:
        assert lock.taken_over is not None
        assert lock.taken_over["pid"] == holder.pid
    finally:
        lock.release()


def test_stale_lock_file_is_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "d.lock"
    stale = {"host": socket.gethostname(), "pid": 999999, "started": "2019-01-31T01:00:00"}
    path.write_text(json.dumps(stale))
    with DayLock(path).acquire() as lock:
        assert lock.taken_over == stale
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert not is_locked(tmp_path / "d")


def test_is_locked_without_a_lock_file(tmp_path: Path) -> None:
    assert not is_locked(tmp_path / "2019_01_31")
