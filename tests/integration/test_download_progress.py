"""Long downloads say how far they are (issue 50): the zig toolchain's wheel and any pip
download, fetched by real pip from a real HTTP server on loopback, report bytes done of the
total in plain timestamped lines (no control codes) at the start, along the way and at the
end; in a night those lines land in the build's log, whose last line the live view shows."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from nightly.core import spec
from nightly.images import transfer, zig
from tests.support.servers import Serve
from tests.support.wheels import make_wheel

LINE = re.compile(r"^\d\d:\d\d:\d\d ")


def _index(base: Path, dist: str, version: str, mb: int, filename: str | None = None) -> Path:
    """A PEP 503 index folder holding one wheel of about `mb` MB (random, incompressible)."""
    folder = base / "simple" / dist
    folder.mkdir(parents=True, exist_ok=True)
    w = make_wheel(folder, dist, version, filename,
                   data={f"{dist}/blob.txt": os.urandom(mb * 500_000).hex()})
    links = "".join(f'<a href="{p.name}">{p.name}</a>\n' for p in sorted(folder.glob("*.whl")))
    (folder / "index.html").write_text(links)
    return w


@pytest.fixture
def isolated_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip sees only the test's index: no host configuration, find-links or extra index."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL", "PIP_NO_INDEX"):
        monkeypatch.delenv(name, raising=False)


def test_the_zig_wheel_download_reports_bytes(
    tmp_path: Path, http_server: Serve, isolated_pip: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # scripts/test.sh upgrades the venv's pip; the meter needs its --progress-bar raw (24.1).
    assert transfer.raw_progress_pip(), "pip >= 24.1 needed: run the tests through scripts/test.sh"
    name = f"ziglang-{spec.ZIG_VERSION}-py3-none-manylinux_2_12_x86_64.whl"
    wheel = _index(tmp_path / "srv", "ziglang", spec.ZIG_VERSION, 3, name)
    monkeypatch.setenv("PIP_INDEX_URL", http_server(tmp_path / "srv") + "simple/")
    lines: list[str] = []
    got = zig.fetch_wheel(tmp_path / "cache", lines.append)
    assert got.name == name
    assert got.read_bytes() == wheel.read_bytes()
    meter = [line for line in lines if "ziglang" in line and "download:" in line]
    total = transfer.size(wheel.stat().st_size)
    assert meter[0].endswith(f"toolchain: ziglang {spec.ZIG_VERSION} download: started"), lines
    assert any(line.endswith(f" of {total} (100%)") for line in meter), meter
    assert f"download: done, {total} in" in meter[-1], meter
    assert all(LINE.match(line) for line in meter)
    assert not any("\x1b" in line or "\r" in line for line in lines)


def test_a_pip_download_of_several_files_counts_them_all(
    tmp_path: Path, http_server: Serve, isolated_pip: None
) -> None:
    # scripts/test.sh upgrades the venv's pip; the meter needs its --progress-bar raw (24.1).
    assert transfer.raw_progress_pip(), "pip >= 24.1 needed: run the tests through scripts/test.sh"
    dep = _index(tmp_path / "srv", "bigdep", "1.0", 2)
    main = tmp_path / "srv" / "simple" / "bigmain"
    main.mkdir(parents=True)
    top = make_wheel(main, "bigmain", "1.0", requires=("bigdep",),
                     data={"bigmain/blob.txt": os.urandom(1_500_000).hex()})
    (main / "index.html").write_text(f'<a href="{top.name}">{top.name}</a>\n')
    index = http_server(tmp_path / "srv") + "simple/"
    lines: list[str] = []
    code, tail = transfer.pip_download(tmp_path / "out", ["--index-url", index, "bigmain"],
                                       "deps download", lines.append)
    assert code == 0, tail
    both = top.stat().st_size + dep.stat().st_size
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted([dep.name, top.name])
    assert lines[-1].endswith(f"deps download: done, {transfer.size(both)} in "
                              f"{lines[-1].rsplit(' in ', 1)[1]}")


def test_a_failed_pip_download_says_why(tmp_path: Path, http_server: Serve, isolated_pip: None) -> None:
    (tmp_path / "srv" / "simple").mkdir(parents=True)
    index = http_server(tmp_path / "srv") + "simple/"
    lines: list[str] = []
    code, tail = transfer.pip_download(tmp_path / "out", ["--index-url", index,
                                       "nosuchthing==1.0"], "x download", lines.append)
    assert code != 0
    assert "nosuchthing" in tail
    assert lines[-1].endswith("x download: failed, 0 B in " + lines[-1].rsplit(" in ", 1)[1])
    assert sum("failed" in line for line in lines) == 1
