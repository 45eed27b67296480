"""A build user's build area (nightly/builds/area/userarea.py): made only where root alone writes,
filled with readable copies whatever the originals' modes, the user's own folders given to
it, old days forgotten once their day folder is gone."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nightly.builds.area import userarea
from nightly.builds.cache.wiring import CacheSettings
from nightly.errors import ConfigError
from nightly.executors.base import Job
from nightly.hardening import BuildUser


def _user() -> BuildUser:
    """`nobody` as root (the area's user folders are handed over); else this account."""
    entry = pwd.getpwnam("nobody") if os.geteuid() == 0 else pwd.getpwuid(os.geteuid())
    return BuildUser(name=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid, home=entry.pw_dir)


@pytest.fixture
def base() -> Iterator[Path]:
    top = Path(tempfile.mkdtemp(prefix="nightly-area-", dir="/tmp"))
    top.chmod(0o755)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def _area(base: Path, day: str = "2024_05_01") -> userarea.BuildArea:
    return userarea.area_for(str(base / "area"), _user(), day, project="demo x",
                             nightlies=base / "nightlies")


def test_the_area_is_made_for_root_alone_and_a_planted_one_is_refused(base: Path) -> None:
    area = _area(base)
    userarea.make_root(area, "/x/nightly.toml")
    assert stat.S_IMODE(area.root.stat().st_mode) == 0o755
    assert area.day.parent.name.startswith("demo_x-")
    area.root.chmod(0o777)  # someone else could have made it
    with pytest.raises(ConfigError, match=r"\[executor.local.user\].*must be owned and written"):
        userarea.make_root(area, "/x/nightly.toml")
    shutil.rmtree(area.root)
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    area.root.symlink_to(elsewhere)
    with pytest.raises(ConfigError, match="is not a folder"):
        userarea.make_root(area, "/x/nightly.toml")


def _job(area: userarea.BuildArea) -> Job:
    work = area.work / "manywheel_3.11_cpu"
    return Job(build_id="manywheel_3.11_cpu", package="manywheel", python="3.11", cuda="cpu",
               env={}, recipes_dir=area.recipes, source_dir=area.source,
               output_dir=work / "out", work_dir=work / "scratch", timeout_s=60)


def test_copies_are_readable_and_the_users_folders_are_its_own(base: Path) -> None:
    source, recipes = base / "src", base / "recipes"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "a.c").write_text("int a;\n")
    (source / "pkg" / "a.c").chmod(0o600)  # root's umask 077: still readable in the copy
    (source / "pkg").chmod(0o700)
    (recipes / "manywheel").mkdir(parents=True)
    (recipes / "manywheel" / "build.sh").write_text("#!/bin/bash\n")
    (recipes / "manywheel" / "build.sh").chmod(0o700)
    binary = base / "sccache"
    binary.write_bytes(b"\x7fELF-not-really")
    binary.chmod(0o700)
    area = _area(base)
    userarea.make_root(area, None)
    cache = area.cache_settings(CacheSettings())
    assert cache.dir == area.sccache  # root's ~/.cache is never the user's cache
    userarea.stage(area, source=source, stamp="abc", recipes=recipes, wheelhouse=None,
                   sccache=binary, cache=cache, jobs=[_job(area)])
    assert stat.S_IMODE((area.source / "pkg").stat().st_mode) == 0o755
    assert stat.S_IMODE((area.source / "pkg" / "a.c").stat().st_mode) == 0o644
    assert stat.S_IMODE((area.recipes / "manywheel" / "build.sh").stat().st_mode) == 0o755
    assert (area.day / userarea.SMOKE_SCRIPTS / "wheel" / "build.sh").is_file()
    assert area.sccache_bin.read_bytes() == binary.read_bytes()
    assert stat.S_IMODE(area.sccache_bin.stat().st_mode) == 0o755
    # The compiler cache's store is root's alone: the user's builds get copies (views).
    st = area.sccache.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (os.geteuid(), 0o700)
    assert cache.copy_view
    assert area.cache_settings(CacheSettings()).binary == area.sccache_bin
    configured = CacheSettings(dir=base / "mine")
    assert area.cache_settings(configured).dir == base / "mine"  # a folder set is kept


def test_a_days_copies_go_once_its_day_folder_is_gone(base: Path) -> None:
    nightlies = base / "nightlies"
    (nightlies / "2024_05_01").mkdir(parents=True)
    source = base / "src"
    source.mkdir()
    for day in ("2024_04_30", "2024_05_01", "2024_05_02"):
        area = _area(base, day)
        userarea.make_root(area, None)
        userarea.stage(area, source=source, stamp="s", recipes=base / "none", wheelhouse=None,
                       sccache=None, cache=CacheSettings(enabled=False), jobs=[])
    not_ours = _area(base).days / "kept"  # no mark: never nightly's to remove
    not_ours.mkdir()
    userarea.forget_old_days(_area(base, "2024_05_02"), nightlies)
    left = sorted(p.name for p in _area(base).days.iterdir())
    assert left == ["2024_05_01", "2024_05_02", "kept"]
