"""The box of a build user's build (nightly/executors/box.py): what of the build area's
nights/ it shows, read-only or not, and when there is none. The box itself, run by root
against another build, is tests/integration/test_build_alone.py."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from nightly.builds.area import toolstage
from nightly.executors import box
from nightly.executors.base import Job
from nightly.executors.local import NotFound


def _job(area: Path | None, *, root: Path, build: str = "b1") -> Job:
    nights = root / "nights" / "proj-0123456789"
    return Job(build_id=build, package="manywheel", python="3.11", cuda="cpu",
               env={"NIGHTLY_WHEELHOUSE": str(nights / "D" / "wheelhouse"),
                    "ZIG_GLOBAL_CACHE_DIR": str(root / "zig-cache" / nights.name / build)},
               recipes_dir=nights / "D" / "recipes", source_dir=nights / ".builds" / "source",
               output_dir=nights / ".builds" / "work" / build / "out",
               work_dir=nights / ".builds" / "work" / build / "scratch", timeout_s=60,
               area=area)


def test_a_box_shows_its_own_build_folder_writable_and_its_inputs_read_only() -> None:
    root = Path("/var/tmp/nightly-nb")
    job = _job(root, root=root)
    nights = root / "nights" / "proj-0123456789"
    assert box.shown(job) == [
        (nights / ".builds" / "work" / "b1", True),
        (root / "zig-cache" / "proj-0123456789" / "b1", True),
        (nights / ".builds" / "source", False),
        (nights / "D" / "recipes", False),
        (nights / "D" / ".nightly-smoke-scripts", False),
        (nights / "D" / "wheelhouse", False),
    ]
    script = box.wrap(job, ["setpriv", "--", "bash", "build.sh"], 9)
    text = " ".join(script)
    assert text.startswith("unshare --mount --pid --ipc --fork --kill-child --mount-proc")
    stage = root / ".box"
    # The nights/ and zig-cache/ folders are tmpfs, staged in the box's own stage.
    assert f"'{root}/nights {stage}/n none rbind,X-mount.mkdir=0700 0 0' " in text
    assert f"'nightly-box {root}/nights tmpfs mode=0755,size=1m,nosuid,nodev 0 0'" in text
    assert f"'nightly-box {root}/zig-cache tmpfs mode=0755,size=1m,nosuid,nodev 0 0'" in text
    zig = root / "zig-cache" / "proj-0123456789"
    assert f"'{stage}/z/proj-0123456789/b1 {zig}/b1 none rbind,X-mount.mkdir 0 0'" in text
    assert "work/b2" not in text  # its own zig cache, and no other
    assert str(nights / "D" / "work") not in text
    for rel in ("D/recipes", ".builds/work/b1"):  # each shown where it exists
        assert (f"[ ! -e {nights}/{rel} ] || printf '%s\\n' "
                f"'{stage}/n/proj-0123456789/{rel} {nights}/{rel} none rbind,X-mount.mkdir 0 0'"
                ) in text
    assert f"'{job.work_dir / 'tmp'} /tmp none bind 0 0'" in text
    # One mount for the whole table, the stage (and the real folders in it) gone after.
    assert text.count("mount --all") == 1
    assert f'mount --all --fstab "$tab"\numount -l {stage}\n' in text
    assert script[-4:] == ["setpriv", "--", "bash", "build.sh"]
    assert '"$@" 9>&-' in text  # the recipe never holds the report pipe


def test_no_box_outside_a_build_area_and_no_tmp_of_its_own_for_an_area_under_tmp() -> None:
    outside = _job(None, root=Path("/var/tmp/nightly-nb"))
    assert box.nights_of(outside) is None
    assert box.wrap(outside, ["bash", "x"], 9) == ["bash", "x"]
    assert box.boxed(outside, ["bash", "x"]) == (["bash", "x"], -1, -1, None)
    under_tmp = _job(Path("/tmp/area"), root=Path("/tmp/area"))
    assert " /tmp none bind" not in box.wrap(under_tmp, ["bash", "x"], 9)[-4]  # /tmp kept


def test_without_root_there_is_no_box_and_the_log_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    box.unavailable.cache_clear()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    try:
        job = _job(Path("/var/tmp/nightly-nb"), root=Path("/var/tmp/nightly-nb"))
        command, r, w, why = box.boxed(job, ["bash", "x"])
        assert (command, r, w) == (["bash", "x"], -1, -1)
        assert why is not None
        assert why.startswith("namespaces: nightly runs as uid 1000, not root")
    finally:
        box.unavailable.cache_clear()


def test_the_box_report_is_read_whole_and_bounded() -> None:
    r, w = os.pipe()
    os.write(w, b"pid 7 (uid 1002): sleep 100\n\npid 9 (uid 1002): python tamper.py\n")
    os.close(w)
    assert box.read_report(r) == ["pid 7 (uid 1002): sleep 100", "pid 9 (uid 1002): python tamper.py"]
    os.close(r)


def test_staged_tools_link_to_an_interpreter_the_user_can_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    private = tmp_path / "home" / "bin" / "python3"
    monkeypatch.setattr(toolstage, "base_interpreter", lambda: private)
    assert toolstage.reachable_base(None) == private
    assert toolstage.reachable_base(lambda p: True) == private
    # Out of the user's reach: one of this version it can run, found like the builds' own.
    mine = os.path.realpath(sys.executable)
    found = toolstage.reachable_base(lambda p: p != str(private))
    assert found != private
    assert toolstage._same_version(str(found))
    assert toolstage._same_version(mine)
    with pytest.raises(NotFound, match="out of the build user's reach"):
        toolstage.reachable_base(lambda p: False)


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a folder to another account: root only")
def test_a_builds_own_zig_cache_is_made_for_the_build_user_and_nothing_else(tmp_path: Path) -> None:
    area = tmp_path / "area"
    job = _job(area, root=area)
    box.own_caches(job, 65534, 65534)
    own = area / "zig-cache" / "proj-0123456789" / "b1"
    assert own.is_dir()
    assert (own.stat().st_uid, own.stat().st_mode & 0o777) == (65534, 0o700)
    assert (area / "zig-cache").stat().st_uid == 0  # the folder above stays root's
    # A zig cache outside the area's zig-cache/ (the user's own setting) is left alone.
    other = _job(area, root=area)
    elsewhere = tmp_path / "elsewhere"
    box.own_caches(replace(other, env={"ZIG_GLOBAL_CACHE_DIR": str(elsewhere)}), 65534, 65534)
    assert not elsewhere.exists()


def test_the_mount_table_escapes_blanks_and_backslashes_as_fstab_reads_them() -> None:
    """A build area whose path has a blank, a tab or a backslash: each mount table field
    is one word, as mount(8) reads fstab(5) (octal escapes), and the shell line quotes it."""
    root = Path("/var/tmp/night ly\\x\tz")
    text = box.wrap(_job(root, root=root), ["bash", "x"], 9)[-4]
    assert "/var/tmp/night\\040ly\\134x\\011z/nights /var/tmp/night\\040ly\\134x\\011z/.box/n " \
        "none rbind,X-mount.mkdir=0700 0 0" in text
    for line in text.splitlines():
        if line.startswith("printf '%s\\n' "):
            entries = line.split("printf '%s\\n' ", 1)[1].rsplit(' >>"$tab"', 1)[0]
            for entry in entries.split("' '"):
                assert len(entry.strip("'").split(" ")) == 6, entry
