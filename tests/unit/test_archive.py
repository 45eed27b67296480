"""nightly.workspace.archive: the one unpacker (sdists, staged sources, wheels)."""

from __future__ import annotations

import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

from nightly.errors import NightlyError
from nightly.workspace import archive
from nightly.workspace.archive import Limits, unpack, unpack_into


def _tar(path: Path, members: list[tuple[str, bytes | str | None, int]]) -> Path:
    """(name, data: bytes for a file, str for a symlink's target, None for a folder, mode)."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data, mode in members:
            info = tarfile.TarInfo(name)
            info.mode = mode
            if isinstance(data, str):
                info.type, info.linkname = tarfile.SYMTYPE, data
                tar.addfile(info)
            elif data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def test_files_folders_and_links_inside_are_unpacked(tmp_path: Path) -> None:
    src = _tar(tmp_path / "a.tar.gz", [("pkg", None, 0o755), ("pkg/run.sh", b"#!/bin/sh\n", 0o4755),
                                       ("pkg/data.txt", b"x", 0o600),
                                       ("pkg/alias.txt", "data.txt", 0o777)])
    dest = unpack(src, tmp_path / "out", links=True)
    assert (dest / "pkg" / "data.txt").read_bytes() == b"x"
    assert (dest / "pkg" / "run.sh").stat().st_mode & 0o7777 == 0o755  # never set-uid
    assert (dest / "pkg" / "data.txt").stat().st_mode & 0o777 == 0o644
    assert os.readlink(dest / "pkg" / "alias.txt") == "data.txt"


@pytest.mark.parametrize(("members", "why"), [
    ([("../evil", b"x", 0o644)], "leads out"),
    ([("/etc/evil", b"x", 0o644)], "absolute"),
    ([("a/link", "../../etc", 0o777)], "leads out"),
    ([("a/link", "/etc", 0o777)], "leads out"),
    # Each link inside by itself, out together: d is the folder itself, so d/.. is its parent.
    ([("d", ".", 0o777), ("l", "d/../outside", 0o777)], "leads out"),
    ([("d", "sub", 0o777), ("sub", None, 0o755), ("d/x", b"x", 0o644)], "no folder"),
])
def test_what_leads_out_is_refused_and_nothing_is_left(
        tmp_path: Path, members: list[tuple[str, bytes | str | None, int]], why: str) -> None:
    src = _tar(tmp_path / "bad.tar.gz", members)
    (tmp_path / "out-parent").mkdir()
    with pytest.raises(NightlyError, match=why):
        unpack(src, tmp_path / "out-parent" / "out", links=True)
    assert list((tmp_path / "out-parent").iterdir()) == []


def test_links_are_refused_unless_asked_for(tmp_path: Path) -> None:
    src = _tar(tmp_path / "l.tar.gz", [("a", b"x", 0o644), ("b", "a", 0o777)])
    with pytest.raises(NightlyError, match="symbolic link"):
        unpack(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_size_and_member_bounds(tmp_path: Path) -> None:
    src = _tar(tmp_path / "z.tar.gz", [("zeros", bytes(1 << 20), 0o644), ("b", b"x", 0o644)])
    with pytest.raises(NightlyError, match="MiB"):
        unpack(src, tmp_path / "o1", limits=Limits(total_bytes=1 << 19, ratio=1, ratio_floor=0))
    with pytest.raises(NightlyError, match="more than 1 members"):
        unpack(src, tmp_path / "o2", limits=Limits(members=1))


def test_wheels_side_by_side_replace_a_shared_file(tmp_path: Path) -> None:
    for n in (1, 2):
        with zipfile.ZipFile(tmp_path / f"w{n}.whl", "w") as z:
            z.writestr("nvidia/__init__.py", f"# {n}\n")
            info = zipfile.ZipInfo(f"nvidia/bin{n}/tool")
            info.external_attr = 0o100755 << 16
            z.writestr(info, "#!/bin/sh\n")
        unpack_into(tmp_path / f"w{n}.whl", tmp_path / "site")
    assert (tmp_path / "site" / "nvidia" / "__init__.py").read_text() == "# 2\n"
    assert os.access(tmp_path / "site" / "nvidia" / "bin1" / "tool", os.X_OK)


def test_a_cross_test_s_wheel_past_its_bound_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """cross.unpack_wheel extracted every member whatever its size before; it now goes
    through the one unpacker and its bounds."""
    from nightly.images import cross

    monkeypatch.setattr(cross, "WHEEL_LIMITS", Limits(total_bytes=1000, ratio=1, ratio_floor=0))
    with zipfile.ZipFile(tmp_path / "big.whl", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("pkg/zeros.bin", bytes(100_000))
    with pytest.raises(cross.CrossError, match="unpacks to more than"):
        cross.unpack_wheel(tmp_path / "big.whl", tmp_path / "site")
    assert archive.WHEEL_LIMITS.total_bytes > 1000
