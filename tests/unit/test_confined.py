"""nightly.files.confined: the one check that a name from outside stays in its folder."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path, PurePosixPath

import pytest

from nightly.errors import PublishError
from nightly.files import confined
from nightly.stores.base import check_key
from nightly.workspace.day import Day


@pytest.mark.parametrize("name", ["a", "a/b.whl", "whl/nightly/cpu", "x..y", ".hidden"])
def test_plain_relative_names_stay(name: str) -> None:
    assert confined(name) == PurePosixPath(name)


@pytest.mark.parametrize("name", ["", "/etc/passwd", "..", "a/../b", "a/./b", "a//b", "a/",
                                  "./a", "a\\b", "a\x00b", "logs/x\x01", "a\nb"])
def test_names_that_could_lead_out_or_mean_two_things_are_refused(name: str) -> None:
    assert confined(name) is None
    with pytest.raises(PublishError):
        check_key(name)


def test_a_link_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "day"
    (folder / "logs").mkdir(parents=True)
    (folder / "logs" / "a.log").write_text("x")
    (tmp_path / "secret").write_text("s")
    os.symlink(tmp_path / "secret", folder / "logs" / "out.log")
    os.symlink(folder / "logs" / "loop", folder / "logs" / "loop")
    assert confined("logs/a.log", folder) == PurePosixPath("logs/a.log")
    assert confined("logs/missing.log", folder) == PurePosixPath("logs/missing.log")
    assert confined("logs/out.log", folder) is None
    assert confined("logs/loop/x", folder) is None


def test_a_day_folder_path_with_a_control_character_is_refused(tmp_path: Path) -> None:
    """A path recorded in state.json is read through the one check: a control character
    (a NUL only, before) or an empty part no longer names a file."""
    day = Day(tmp_path, dt.date(2026, 1, 1))
    day.path.mkdir()
    assert day.inside("logs/a.log") == day.path / "logs" / "a.log"
    assert day.inside("logs/a\x01.log") is None
    assert day.inside("logs//a.log") is None
    assert day.inside("../other/state.json") is None
    assert day.inside(3) is None
