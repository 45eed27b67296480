"""Day locks: one `<day>.lock` a night would pile up for ever; pruned with their days. And a
lock file no other user can open, so no one else can hold a night's lock."""

from __future__ import annotations

import os
import stat
from datetime import date
from pathlib import Path

from nightly.workspace import DayLock, is_locked
from nightly.workspace.prune import prune_day_locks


def test_the_locks_of_pruned_days_go_and_no_others(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    for name in ("2024_01_01", "2024_01_02", "2024_03_06", "2024_03_09"):
        (root / f"{name}.lock").write_text("{}")
    (root / "2024_01_02").mkdir()  # its folder is still there: its lock stays
    (root / "not_a_day.lock").write_text("{}")
    (root / "2024_01_03.lock").symlink_to(root / "2024_03_06.lock")  # never through a link
    held = DayLock(root / "2024_01_04.lock").acquire()
    try:
        removed = prune_day_locks(root, date(2024, 3, 10), 5, is_locked)
    finally:
        held.release()
    assert sorted(p.name for p in removed) == ["2024_01_01.lock"]
    assert sorted(os.listdir(root)) == [
        "2024_01_02", "2024_01_02.lock", "2024_01_03.lock", "2024_01_04.lock",
        "2024_03_06.lock", "2024_03_09.lock", "not_a_day.lock",
    ]


def test_a_day_lock_is_open_to_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "2024_01_01.lock"
    path.write_text("{}")
    path.chmod(0o644)  # made by an earlier version
    lock = DayLock(path).acquire()
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        lock.release()
    fresh = DayLock(tmp_path / "2024_01_02.lock").acquire()
    try:
        assert stat.S_IMODE((tmp_path / "2024_01_02.lock").stat().st_mode) == 0o600
    finally:
        fresh.release()
