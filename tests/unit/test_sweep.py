"""A finished build's folder is removed beside the queues (nightly.builds.run.sweep): out of
the build's path at once, gone when the run returns, and what a run killed meanwhile left
is removed by the next run before its first build."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from nightly.builds.run import sweep
from nightly.builds.run.sweep import GONE, Sweeper
from nightly.workspace import remove_tree
from tests.unit.test_runner import Env


def _gone(work: Path) -> list[str]:
    return sorted(p.name for p in work.iterdir() if p.name.startswith(GONE))


def test_queued_builds_leave_no_folder_when_the_run_returns(tmp_path: Path) -> None:
    env = Env(tmp_path)
    builds = [env.build(b) for b in ("manywheel_3.7m_cpu", "manywheel_3.7m_cu100",
                                     "manywheel_3.6m_cpu")]
    outcomes = env.runner().run_queues([builds[:2], builds[2:]])
    assert sorted(o.build_id for o in outcomes if o.ok) == sorted(b.id for b in builds)
    # Neither the build folders nor their renamed selves are left.
    assert [p.name for p in env.day.work.iterdir() if p.is_dir()] == []


def test_a_folder_left_renamed_by_a_killed_run_is_removed_by_the_next(tmp_path: Path) -> None:
    env = Env(tmp_path)
    left = env.day.work / f"{GONE}manywheel_3.7m_cpu-0badc0de"
    (left / "scratch" / "deep").mkdir(parents=True)
    (left / "scratch" / "deep" / "object.o").write_bytes(b"\0" * 1024)
    (env.day.work / "unrelated").mkdir()  # not nightly's to remove
    outcomes = env.runner().run_queues([[env.build("manywheel_3.7m_cu100")]])
    assert [o.ok for o in outcomes] == [True]
    assert _gone(env.day.work) == []
    assert (env.day.work / "unrelated").is_dir()


def test_the_build_path_is_free_before_the_folder_is_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rename is the build's only cost: its folder's path is free at once (a retry or
    the next night's build of the same id starts there), the removal comes after."""
    folder = tmp_path / "work" / "b"
    (folder / "scratch").mkdir(parents=True)
    (folder / "scratch" / "f").write_text("x")
    release = threading.Event()
    real = remove_tree

    def held(path: Path, before_retry: Callable[[], object] | None = None) -> None:
        release.wait(30)
        real(path, before_retry=before_retry)

    monkeypatch.setattr(sweep, "remove_tree", held)
    sweeper = Sweeper()
    sweeper.remove(folder, lambda *_: None)
    assert not folder.exists()
    (renamed,) = _gone(tmp_path / "work")
    assert renamed.startswith(f"{GONE}b-")
    assert (tmp_path / "work" / renamed / "scratch" / "f").read_text() == "x"  # not yet removed
    release.set()
    sweeper.drain()
    assert list((tmp_path / "work").iterdir()) == []


def test_a_build_run_alone_removes_its_folder_before_it_returns(tmp_path: Path) -> None:
    env = Env(tmp_path)
    out = env.runner().run_build(env.build("manywheel_3.7m_cpu"))
    assert out.ok
    assert [p.name for p in env.day.work.iterdir() if p.is_dir()] == []
    assert not any(t.name == "sweeper" for t in threading.enumerate())


def test_a_folder_that_cannot_be_removed_is_reported_under_its_own_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "work" / "b"
    (folder / "x").mkdir(parents=True)

    def fail(path: Path, before_retry: Callable[[], object] | None = None) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(sweep, "remove_tree", fail)
    told: list[tuple[Path, str]] = []
    sweeper = Sweeper()
    sweeper.remove(folder, lambda was, e: told.append((was, str(e))))
    sweeper.drain()
    # The build's own path, not the name it was renamed to, and left for the next run.
    assert told == [(folder, "disk on fire")]
    assert len(_gone(tmp_path / "work")) == 1
