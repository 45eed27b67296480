"""recipes/common/rewrite_wheel.py: a wheel built by setuptools with its own version,
rewritten to a nightly version, is a valid wheel of that version (wheel unpack/pack, RECORD
hashes, pip install, importlib.metadata)."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REWRITE = Path(__file__).resolve().parents[2] / "recipes" / "common" / "rewrite_wheel.py"
NIGHTLY = "1.2.3.dev20261124+cu130"


@pytest.fixture(scope="module")
def release_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel of version 1.2.3 built by setuptools (no isolation: the test venv's), with a
    data script so the .data folder is renamed too."""
    src = tmp_path_factory.mktemp("proj")
    (src / "tiny_pkg").mkdir()
    (src / "tiny_pkg" / "__init__.py").write_text('__version__ = "1.2.3"\n')
    (src / "tool.sh").write_text("#!/bin/sh\necho tiny\n")
    (src / "setup.py").write_text(
        "from setuptools import setup\n"
        "setup(name='tiny-pkg', version='1.2.3', packages=['tiny_pkg'], scripts=['tool.sh'],\n"
        "      long_description='Version: 9.9 in the body must stay\\n\\nsecond paragraph')\n"
    )
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(out), str(src)], check=True,
    )
    (wheel,) = out.glob("*.whl")
    return wheel


@pytest.fixture
def rewritten(release_wheel: Path, tmp_path: Path) -> Path:
    proc = subprocess.run(
        [sys.executable, str(REWRITE), str(release_wheel), NIGHTLY, str(tmp_path)],
        capture_output=True, text=True, check=True,
    )
    path = Path(proc.stdout.strip())
    assert path.parent == tmp_path
    return path


def test_name_dist_info_data_and_metadata_carry_the_new_version(rewritten: Path) -> None:
    assert rewritten.name == f"tiny_pkg-{NIGHTLY}-py3-none-any.whl"
    with zipfile.ZipFile(rewritten) as z:
        names = z.namelist()
        meta = z.read(f"tiny_pkg-{NIGHTLY}.dist-info/METADATA").decode()
    assert not any("1.2.3.dist-info" in n or "1.2.3.data" in n for n in names)
    assert f"tiny_pkg-{NIGHTLY}.data/scripts/tool.sh" in names
    assert f"\nVersion: {NIGHTLY}\n" in meta
    # Only the header field changes: the description is the project's own text.
    assert "Version: 9.9 in the body must stay" in meta
    # The code itself still says the release (the recipe warns about it).
    with zipfile.ZipFile(rewritten) as z:
        assert z.read("tiny_pkg/__init__.py") == b'__version__ = "1.2.3"\n'


def test_record_lists_every_file_with_its_sha256_and_size(rewritten: Path) -> None:
    record_name = f"tiny_pkg-{NIGHTLY}.dist-info/RECORD"
    with zipfile.ZipFile(rewritten) as z:
        rows = list(csv.reader(io.StringIO(z.read(record_name).decode())))
        files = {n for n in z.namelist() if not n.endswith("/")}
        listed = {r[0] for r in rows}
        assert listed == files
        for path, digest, size in rows:
            if path == record_name:
                assert (digest, size) == ("", "")
                continue
            data = z.read(path)
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={want}", path
            assert int(size) == len(data), path


def test_wheel_unpack_and_pack_accept_it(rewritten: Path, tmp_path: Path) -> None:
    # `wheel unpack` checks every file against RECORD's hashes.
    subprocess.run([sys.executable, "-m", "wheel", "unpack", "-d", str(tmp_path / "u"),
                    str(rewritten)], check=True, capture_output=True)
    unpacked = tmp_path / "u" / f"tiny_pkg-{NIGHTLY}"
    assert (unpacked / "tiny_pkg" / "__init__.py").is_file()
    (tmp_path / "p").mkdir()
    subprocess.run([sys.executable, "-m", "wheel", "pack", "-d", str(tmp_path / "p"),
                    str(unpacked)], check=True, capture_output=True)
    assert [p.name for p in (tmp_path / "p").iterdir()] == [rewritten.name]


def test_pip_installs_it_and_importlib_metadata_says_the_nightly_version(
    rewritten: Path, tmp_path: Path
) -> None:
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--target", str(target), str(rewritten)], check=True)
    got = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m; print(m.version('tiny-pkg'))"],
        env={"PYTHONPATH": str(target)}, capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert got == NIGHTLY


def test_a_wheel_already_of_that_version_is_refused(release_wheel: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(REWRITE), str(release_wheel), "1.2.3", str(release_wheel.parent)],
        capture_output=True, text=True,
    )
    assert proc.returncode != 0
    assert "already has version 1.2.3" in proc.stderr


def test_still_says_names_the_files_with_the_old_version_and_only_those(
    release_wheel: Path, tmp_path: Path
) -> None:
    """Issue 57: the rewrite warned "a version compiled into the code still says 0.7.1"
    for a project whose code reads its version from the metadata (its smoke test printed
    0.7.1.dev...). The warning now names the files that hold the old literal, if any."""
    def still(wheel: Path) -> list[str]:
        p = subprocess.run([sys.executable, str(REWRITE), "--still-says", str(wheel), "1.2.3"],
                           capture_output=True, text=True, check=True)
        return p.stdout.split()

    assert still(release_wheel) == ["tiny_pkg/__init__.py"]  # __version__ = "1.2.3"
    from_metadata = tmp_path / release_wheel.name
    with zipfile.ZipFile(release_wheel) as src, zipfile.ZipFile(from_metadata, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "tiny_pkg/__init__.py":
                data = (b"from importlib.metadata import version\n"
                        b"__version__ = version('tiny-pkg')\n")
            dst.writestr(info, data)
    assert still(from_metadata) == []  # the dist-info says 1.2.3: not the code
    compiled = tmp_path / "c" / release_wheel.name
    compiled.parent.mkdir()
    with zipfile.ZipFile(from_metadata) as src, zipfile.ZipFile(compiled, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info))
        dst.writestr("tiny_pkg/_ext.so", b"\x7fELF...tiny 1.2.3\x00more")
    assert still(compiled) == ["tiny_pkg/_ext.so"]
