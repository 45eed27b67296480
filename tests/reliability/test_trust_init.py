"""`nightly init` on a hostile project or sdist (issue 39, rows 1 and 2).

Row 1: an sdist's members land only under its own `<name>-<version>/` folder beside the
config; links, devices, fifos, absolute names, `..` and members outside that folder refuse
the archive with one line, exit 2, and leave nothing at all behind (the tree around the
config is byte for byte what it was), so a re-run never reuses a half-unpacked folder; a
decompression bomb is refused. Row 2: what the project says (names, versions,
requires-python, file names) never adds a key or a table to nightly.toml, whatever control
characters it holds; a hypothesis test feeds init random metadata and compares the written
file's keys with a benign project's.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import signal
import stat
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nightly.cli import main as cli
from nightly.config import load
from tests.support.cli import run_nightly

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

STEM = "victim-1.0"
PY = f"{sys.version_info[0]}.{sys.version_info[1]}"
GOOD = {
    "PKG-INFO": f"Metadata-Version: 2.1\nName: victim\nVersion: 1.0\nRequires-Python: >={PY}\n",
    "setup.py": "from setuptools import setup\nsetup(name='victim', version='1.0')\n",
    "victim/__init__.py": "",
}


def _tree(root: Path) -> dict[str, str]:
    """Every entry under root (links not followed): its kind and, for a file, its digest."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st_ = p.lstat()
            if stat.S_ISREG(st_.st_mode):
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[str(p.relative_to(root))] = stat.filemode(st_.st_mode)[0]
    return out


def _info(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"",
          **kw: object) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.mode = kind, len(data) if kind == tarfile.REGTYPE else 0, 0o644
    for k, v in kw.items():
        setattr(info, k, v)
    return info, data


def _sdist_members(extra: list[tuple[tarfile.TarInfo, bytes]]) -> list[tuple[tarfile.TarInfo, bytes]]:
    good = [_info(f"{STEM}/{rel}", data=text.encode()) for rel, text in GOOD.items()]
    return [_info(STEM, tarfile.DIRTYPE), *good, *extra]


def _tar_gz(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return path


ATTACKS = {
    # The probe's own: a file beside the config, a git hook, the config itself.
    "dotdot": [_info(f"{STEM}/../README.victim", data=b"owned\n")],
    "git-hook": [_info(".git/hooks/pre-commit", data=b"#!/bin/sh\ntouch pwned\n", mode=0o755)],
    "git-config-inside": [_info(f"{STEM}/.git/config",
                                data=b"[core]\n\tfsmonitor = touch pwned\n")],
    "config": [_info("nightly.toml", data=b"[notify]\ncommand = 'touch pwned'\n")],
    "absolute": [_info("/tmp/nightly-t39a-absolute", data=b"x")],
    "symlink": [_info(f"{STEM}/link", tarfile.SYMTYPE, linkname="../../README.victim")],
    "symlink-then-write": [_info(f"{STEM}/d", tarfile.SYMTYPE, linkname=".."),
                           _info(f"{STEM}/d/README.victim", data=b"owned\n")],
    "hardlink": [_info(f"{STEM}/hard", tarfile.LNKTYPE, linkname="README.victim")],
    "fifo": [_info(f"{STEM}/fifo", tarfile.FIFOTYPE)],
    "device": [_info(f"{STEM}/dev", tarfile.CHRTYPE, devmajor=1, devminor=3)],
    "other-top": [_info("victim-2.0/setup.py", data=b"")],
}


@pytest.fixture
def place(tmp_path: Path) -> tuple[Path, Path]:
    """(work, downloads): the config's folder, with a file of the user's beside it, and
    where the sdist is."""
    work, downloads = tmp_path / "work", tmp_path / "downloads"
    work.mkdir()
    downloads.mkdir()
    (work / "README.victim").write_text("the user's own file\n")
    return work, downloads


def _refused(code: int, err: str) -> str:
    assert code == 2, err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_hostile_sdist_is_refused_and_leaves_nothing(
    attack: str, place: tuple[Path, Path], tmp_path: Path
) -> None:
    work, downloads = place
    sdist = _tar_gz(downloads / f"{STEM}.tar.gz", _sdist_members(ATTACKS[attack]))
    before = _tree(tmp_path)
    for _ in range(2):  # a re-run is refused the same way: nothing half-unpacked is reused
        code, _out, err = run_nightly(["init", str(sdist)], cwd=work)
        line = _refused(code, err)
        assert str(sdist) in line, line
        assert "refused" in line, line
        assert _tree(tmp_path) == before
    assert not Path("/tmp/nightly-t39a-absolute").exists()


def test_a_zip_sdist_with_a_link_or_an_escape_is_refused(place: tuple[Path, Path], tmp_path: Path) -> None:
    work, downloads = place
    for n, (name, mode) in enumerate([(f"{STEM}/link", stat.S_IFLNK | 0o777),
                                      (f"{STEM}/../README.victim", stat.S_IFREG | 0o644)]):
        sdist = downloads / str(n) / f"{STEM}.zip"
        sdist.parent.mkdir()
        with zipfile.ZipFile(sdist, "w") as z:
            for rel, text in GOOD.items():
                z.writestr(f"{STEM}/{rel}", text)
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            z.writestr(info, "../../README.victim")
        before = _tree(tmp_path)
        code, _out, err = run_nightly(["init", str(sdist)], cwd=work)
        _refused(code, err)
        assert _tree(tmp_path) == before


def test_a_decompression_bomb_is_refused(place: tuple[Path, Path], tmp_path: Path) -> None:
    """70 MiB of zeros in a ~70 KB archive: above 100 times its size and the 64 MiB floor."""
    work, downloads = place
    size = 70 << 20
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for info, data in _sdist_members([]):
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
        big = tarfile.TarInfo(f"{STEM}/zeros.bin")
        big.size = size
        tar.addfile(big, io.BytesIO(bytes(size)))
    sdist = downloads / f"{STEM}.tar.gz"
    import gzip

    sdist.write_bytes(gzip.compress(raw.getvalue(), compresslevel=1))
    assert sdist.stat().st_size < 1 << 20
    before = _tree(tmp_path)
    code, _out, err = run_nightly(["init", str(sdist)], cwd=work)
    line = _refused(code, err)
    assert "MiB" in line, line
    assert _tree(tmp_path) == before


def test_a_good_sdist_writes_its_folder_and_the_config_only(place: tuple[Path, Path]) -> None:
    work, downloads = place
    sdist = _tar_gz(downloads / f"{STEM}.tar.gz", _sdist_members(
        [_info(f"{STEM}/run.sh", data=b"#!/bin/sh\n", mode=0o4755)]))
    code, _out, err = run_nightly(["init", str(sdist)], cwd=work)
    assert code == 0, err
    assert sorted(p.name for p in work.iterdir()) == sorted(["README.victim", STEM, "nightly.toml"])
    assert (work / "README.victim").read_text() == "the user's own file\n"
    assert stat.S_IMODE((work / STEM / "run.sh").stat().st_mode) == 0o755  # no set-uid
    assert load(work / "nightly.toml").project.name == "victim"
    # The folder is never reused silently: a second init (config removed) says so.
    (work / "nightly.toml").unlink()
    code, _out, err = run_nightly(["init", str(sdist)], cwd=work)
    assert "unpacked before?" in _refused(code, err)
    assert not (work / "nightly.toml").exists()


def test_a_good_zip_sdist_unpacks_and_too_many_members_are_refused(
    place: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work, downloads = place
    sdist = downloads / f"{STEM}.zip"
    with zipfile.ZipFile(sdist, "w") as z:
        for rel, text in GOOD.items():
            z.writestr(f"{STEM}/{rel}", text)
    code, _out, err = _invoke(["init", str(sdist), "--config", str(work / "nightly.toml")])
    assert code == 0, err
    assert (work / STEM / "victim" / "__init__.py").is_file()
    # The member bound (100,000) lowered for the test: refused, nothing left.
    monkeypatch.setattr("nightly.cli.unpack.MAX_MEMBERS", len(GOOD) - 1)
    other = tmp_path / "other"
    other.mkdir()
    before = _tree(tmp_path)
    code, _out, err = _invoke(["init", str(sdist), "--config", str(other / "nightly.toml")])
    assert f"more than {len(GOOD) - 1} members" in _refused(code, err)
    assert _tree(tmp_path) == before


def test_init_failing_after_unpacking_removes_the_folder(place: tuple[Path, Path]) -> None:
    work, downloads = place
    members = [_info(STEM, tarfile.DIRTYPE),
               _info(f"{STEM}/PKG-INFO", data=b"Metadata-Version: 2.1\nName: victim\n"
                                               b"Version: 1.0\nRequires-Python: >=9.0\n")]
    sdist = _tar_gz(downloads / f"{STEM}.tar.gz", members)
    code, _out, err = run_nightly(["init", str(sdist)], cwd=work)
    assert "no interpreter" in _refused(code, err)
    assert sorted(p.name for p in work.iterdir()) == ["README.victim"]


def test_a_dangling_link_at_the_config_path_is_one_line(place: tuple[Path, Path], tmp_path: Path) -> None:
    work, downloads = place
    (work / "nightly.toml").symlink_to(tmp_path / "elsewhere.toml")
    sdist = _tar_gz(downloads / f"{STEM}.tar.gz", _sdist_members([]))
    code, _out, err = run_nightly(["init", str(sdist)], cwd=work)
    assert "never overwrites" in _refused(code, err)
    assert not (tmp_path / "elsewhere.toml").exists()
    assert not (work / STEM).exists()


# ---------------------------------------------------------------------------- row 2


INJECTION = '\n[notify]\ncommand = "touch pwned"\n'


def _toml_str(text: str) -> str:
    """A TOML basic string for the test's own pyproject.toml (everything escaped)."""
    return '"' + "".join(c if c.isalnum() or c in " .-_>=<,!*~^@:/" else f"\\U{ord(c):08X}"
                         for c in text) + '"'


def _project(root: Path, *, name: str, version: str, requires: str, c_file: str) -> Path:
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        f"[project]\nname = {_toml_str(name)}\nversion = {_toml_str(version)}\n"
        f"requires-python = {_toml_str(requires)}\n", encoding="utf-8")
    (root / "src").mkdir()
    (root / "src" / c_file).write_text("int x;\n")
    return root


def test_a_newline_in_project_metadata_adds_no_table(tmp_path: Path) -> None:
    src = _project(tmp_path / "proj", name="victim" + INJECTION, version="1.0" + INJECTION,
                   requires=f">={PY}" + INJECTION, c_file="x" + INJECTION.replace("/", "_") + ".c")
    config = tmp_path / "conf" / "nightly.toml"
    config.parent.mkdir()
    code, _out, err = run_nightly(["init", str(src), "--config", str(config)])
    assert code == 0, err
    data = tomllib.loads(config.read_text(encoding="utf-8"))
    assert "notify" not in data
    assert data["project"]["name"] == "victim" + INJECTION  # the value, kept whole
    assert load(config).notify.command in ("", None, ())
    for line in config.read_text(encoding="utf-8").splitlines():
        assert not line.startswith("command"), line


def _invoke(args: list[str]) -> tuple[int, str, str]:
    """`nightly ARGS` in this process (hypothesis runs many): exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    old = signal.getsignal(signal.SIGTERM)
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli.main(args)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        signal.signal(signal.SIGTERM, old)
    return code, out.getvalue(), err.getvalue()


def _shape(data: dict[str, object], prefix: str = "") -> set[str]:
    """The dotted keys of a parsed nightly.toml; the builder's name and the Pythons (which
    follow the project's name and requires-python by design) as '*'."""
    keys: set[str] = set()
    for k, v in data.items():
        k = "*" if prefix in ("builders.", "builders.*.pythons.") else k
        keys.add(prefix + k)
        if isinstance(v, dict):
            keys |= _shape(v, f"{prefix}{k}.")
    return keys


ANY = st.characters(exclude_categories=["Cs"])  # every code point a str holds, controls too
CONTROLS = st.sampled_from([chr(c) for c in [*range(32), 127, 0x85, 0x2028, 0x2029, 0x202E]])
TEXT = st.lists(st.one_of(ANY, CONTROLS), max_size=40).map("".join)
FILE_NAME = TEXT.map(lambda t: (t.replace("/", "_").replace("\0", "_") or "x")[:60] + ".c")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=TEXT.filter(lambda t: t.strip() != ""), version=TEXT, requires=TEXT, c_file=FILE_NAME)
def test_any_project_metadata_gives_the_same_keys(
    tmp_path_factory: pytest.TempPathFactory, name: str, version: str, requires: str, c_file: str
) -> None:
    base = tmp_path_factory.mktemp("h")
    benign = _project(base / "benign", name="benign", version="1.0", requires="", c_file="a.c")
    hostile = _project(base / "hostile", name=name, version=version, requires=requires,
                       c_file=c_file)
    shapes = []
    for src in (benign, hostile):
        config = src.parent / f"{src.name}.toml"
        code, _out, err = _invoke(["init", str(src), "--config", str(config)])
        if code == 2 and src is hostile:  # e.g. a requires-python no Python here meets
            assert len(err.strip().splitlines()) == 1, err
            assert not config.exists()
            return
        assert code == 0, err
        data = tomllib.loads(config.read_text(encoding="utf-8"))
        shapes.append(_shape(data))
        if src is hostile:
            assert data["project"]["name"] == name
    assert shapes[0] == shapes[1]


def test_the_escaper_keeps_every_code_point() -> None:
    from nightly.cli.scaffold import _q

    text = "".join(chr(c) for c in range(0x800) if not 0xD800 <= c <= 0xDFFF) + "\U0001F600"
    assert tomllib.loads(f"v = {_q(text)}")["v"] == text
