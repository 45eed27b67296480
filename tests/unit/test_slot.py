"""The stable build folder (nightly/builds/area/slot.py): one night at a time, a fresh source of
links never followed, failed builds' folders moved into their day."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from nightly.builds.area import slot


def test_a_second_night_never_gets_a_slot_another_holds(tmp_path: Path) -> None:
    with contextlib.ExitStack() as first:
        held = slot.claim(tmp_path, first)
        assert held == tmp_path / slot.NAME
        with contextlib.ExitStack() as second:
            assert slot.claim(tmp_path, second) is None
    with contextlib.ExitStack() as third:  # released when the holder's stack closed
        assert slot.claim(tmp_path, third) == held


def test_a_slot_that_is_a_link_is_never_used(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / slot.NAME).symlink_to(tmp_path / "elsewhere")
    with contextlib.ExitStack() as stack:
        assert slot.claim(tmp_path, stack) is None
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_fill_copies_the_source_afresh_and_copies_links_as_links(tmp_path: Path) -> None:
    source = tmp_path / "day" / "source"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "a.c").write_text("int a;\n")
    secret = tmp_path / "secret"
    secret.write_text("root's\n")
    (source / "escape").symlink_to(secret)
    held = tmp_path / slot.NAME
    held.mkdir()
    (held / "source").mkdir()
    (held / "source" / "left-by-last-night.o").write_text("old")
    slot.fill(held, source)
    dest = held / "source"
    assert sorted(p.name for p in dest.iterdir()) == ["escape", "pkg"]
    # A copy, never a hard link: a build writing in place never reaches the day's source.
    assert (dest / "pkg" / "a.c").read_text() == "int a;\n"
    assert not os.path.samefile(dest / "pkg" / "a.c", source / "pkg" / "a.c")
    assert (dest / "escape").is_symlink()
    assert os.readlink(dest / "escape") == str(secret)
    assert (held / "work").is_dir()


def test_park_moves_a_failed_build_into_its_day(tmp_path: Path) -> None:
    folder = tmp_path / slot.NAME / "work" / "manywheel_3.11_cpu"
    (folder / "scratch").mkdir(parents=True)
    (folder / "scratch" / "build.log").write_text("why it failed\n")
    assert slot.in_slot(folder)
    assert not slot.in_slot(tmp_path / "2024_05_01" / "work" / "manywheel_3.11_cpu")
    dest = tmp_path / "2024_05_01" / "work" / "manywheel_3.11_cpu"
    dest.mkdir(parents=True)
    (dest / "an-earlier-attempt").write_text("")
    notes: list[str] = []
    slot.park(folder, dest, notes.append)
    assert notes == []
    assert not folder.exists()
    assert (dest / "scratch" / "build.log").read_text() == "why it failed\n"
    assert not (dest / "an-earlier-attempt").exists()


def test_a_dry_run_shows_the_stable_folder_where_host_builds_will_run(
    nightly: Any, write_config: Any, minimal_config_text: str, tmp_path: Path
) -> None:
    """`nightly run --dry-run` shows the paths the night's host builds get (the stable build
    folder, not the day folder), and makes nothing."""
    config = write_config(minimal_config_text)
    result = nightly("run", "--dry-run", "--config", str(config), "--date", "2024_05_01")
    assert result.code == 0, result
    stable = tmp_path / "nightlies" / slot.NAME
    assert f'"cwd": "{stable / "work" / "manywheel_3.7m_cpu" / "scratch"}"' in result.out
    assert f'"SOURCE_DIR": "{stable / "source"}"' in result.out
    assert "2024_05_01/work" not in result.out
    assert not stable.exists()
