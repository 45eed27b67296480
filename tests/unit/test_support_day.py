"""tests/support/day.py finds the day folder as nightly does, whatever else the root holds
and whatever order the file system lists it in (issue: a test took the day's lock file,
listed first, for the day folder)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from nightly.workspace import Day
from tests.support.day import find_day


def _night(root: Path, name: str) -> Path:
    day = root / name
    day.mkdir(parents=True)
    (day / "state.json").write_text('{"builds": {}}\n')
    return day


def test_the_night_beside_its_lock_file_and_other_entries(tmp_path: Path) -> None:
    root = tmp_path / "nightlies"
    root.mkdir()
    (root / "2026_11_24.lock").write_text("")  # the day's lock file, a plain file
    (root / "history.sqlite").write_text("")
    (root / "2026_11_23").mkdir()  # a day folder without a night (no state.json)
    (root / "2026_02_30").mkdir()  # not a date
    night = _night(root, "2026_11_24")
    found = find_day(root)
    assert found.path == night
    assert found.date == dt.date(2026, 11, 24)
    assert found.state_path == Day(root, dt.date(2026, 11, 24)).state_path


def test_a_named_day_is_that_day(tmp_path: Path) -> None:
    _night(tmp_path, "2024_05_01")
    _night(tmp_path, "2024_05_02")
    assert find_day(tmp_path, "2024_05_01").path == tmp_path / "2024_05_01"
    assert find_day(tmp_path, dt.date(2024, 5, 2)).path == tmp_path / "2024_05_02"
    with pytest.raises(AssertionError, match="expected one night"):
        find_day(tmp_path)  # two nights: which one is for the caller to say
    with pytest.raises(AssertionError, match="no night in"):
        find_day(tmp_path, "2024_05_03")
