"""nightly.images.transfer: a long transfer as a rich bar on a terminal, as plain timestamped
lines (start, every ~10 s or tenth, end; no control codes) otherwise; an image build's steps."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from nightly.images import engine, transfer

LINE = re.compile(r"^\d\d:\d\d:\d\d ")


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_at_the_start_each_tenth_every_ten_seconds_and_the_end() -> None:
    lines: list[str] = []
    clock = Clock()
    m = transfer.Meter("toolchain: ziglang download", 50_000_000, lines.append, clock=clock,
                       terminal=None)
    assert len(lines) == 1
    assert "started, 50.0 MB" in lines[0]
    m.update(1_000_000)  # 2 %, 0 s: nothing to say yet
    assert len(lines) == 1
    m.update(5_500_000)  # past the first tenth
    assert lines[-1].endswith("toolchain: ziglang download: 5.5 MB of 50.0 MB (11%)")
    m.update(6_000_000)  # same tenth, no time passed
    assert len(lines) == 2
    clock.t += 10.5  # ten seconds later, even without a new tenth
    m.update(7_000_000)
    assert lines[-1].endswith("7.0 MB of 50.0 MB (14%)")
    clock.t += 2
    m.update(50_000_000)
    m.finish()
    m.finish()  # said once
    assert lines[-1].endswith("toolchain: ziglang download: done, 50.0 MB in 12 s")
    assert len(lines) == 5
    assert all(LINE.match(line) for line in lines), lines
    assert not any("\x1b" in line or "\r" in line for line in lines)


def test_a_failed_transfer_says_so_once() -> None:
    lines: list[str] = []
    m = transfer.Meter("x", None, lines.append, terminal=None)
    m.update(2048)
    m.__exit__(RuntimeError, RuntimeError("boom"), None)
    m.finish()
    assert lines[0].endswith("x: started")
    assert lines[-1].endswith("x: failed, 2.0 kB in 0 s")
    assert len(lines) == 2  # no total: a line only each 10 s, and none passed


def test_on_a_terminal_a_bar_with_bytes_done_of_the_total() -> None:
    tty = Tty()
    lines: list[str] = []
    with transfer.on_terminal(tty), \
            transfer.Meter("CUDA 12.8: wheels download", 4_000_000, lines.append) as m:
        m.update(2_000_000)
        m.update(4_000_000)
    out = tty.getvalue()
    assert "CUDA 12.8: wheels download" in out
    assert "4.0/4.0 MB" in out, out
    assert "\x1b[" in out  # drawn with control codes, not logged as lines
    assert lines == []


def test_not_a_terminal_means_plain_lines_even_inside_on_terminal() -> None:
    pipe = io.StringIO()
    lines: list[str] = []
    with transfer.on_terminal(pipe), transfer.Meter("x", 10, lines.append, unit="steps") as m:
        m.update(5)
    assert pipe.getvalue() == ""
    assert [line[9:] for line in lines] == ["x: started, 10 steps", "x: 5 steps of 10 steps (50%)",
                                            "x: done, 5 steps in 0 s"]


def test_sizes_in_words() -> None:
    assert transfer.size(734) == "734 B"
    assert transfer.size(12_345) == "12.3 kB"
    assert transfer.size(98_100_000) == "98.1 MB"
    assert transfer.size(1_200_000_000) == "1.20 GB"


def test_a_folder_filling_is_followed(tmp_path: Path) -> None:
    """run_filling: the bytes a process writes into the folder (and its partial/) while it
    runs, and the exit status with the output's tail."""
    (tmp_path / "partial").mkdir()
    writer = ("import time, pathlib\n"
              "for i in range(4):\n"
              "    pathlib.Path('partial/f.part').open('ab').write(b'x' * 300_000)\n"
              "    time.sleep(0.3)\n"
              "pathlib.Path('partial/f.part').rename('f.deb')\nprint('fetched f.deb')\n")
    lines: list[str] = []
    code, tail = transfer.run_filling([sys.executable, "-c", writer], tmp_path, 1_200_000,
                                      "debs", lines.append, poll_s=0.05)
    assert code == 0
    assert tail == "fetched f.deb"
    assert lines[0].endswith("debs: started, 1.2 MB")
    assert any(line.endswith("of 1.2 MB (25%)") or line.endswith("of 1.2 MB (50%)")
               for line in lines[1:-1]), lines
    assert "debs: done, 1.2 MB in" in lines[-1]


def test_apt_download_takes_its_total_from_apts_listing(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in apt-get (PATH): --print-uris lists two files (sizes 1000 + 2500); the
    download writes them. The meter's total is their sum, its end the folder's bytes."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "apt-get"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        "  *--print-uris*) echo \"'http://deb.example/a.deb' a.deb 1000 SHA256:aa\"\n"
        "                  echo \"'http://deb.example/b.deb' b.deb 2500 SHA256:bb\" ;;\n"
        "  *) head -c 1000 /dev/zero > a.deb; head -c 2500 /dev/zero > b.deb; echo got ;;\n"
        "esac\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    folder = tmp_path / "debs"
    folder.mkdir()
    lines: list[str] = []
    code, tail = transfer.apt_download(["a", "b"], folder, "glibc .debs", lines.append)
    assert (code, tail) == (0, "got")
    assert lines[0].endswith("glibc .debs: started, 3.5 kB")
    assert "glibc .debs: done, 3.5 kB in" in lines[-1]


class _Images:
    def get(self, tag: str) -> Any:
        class Image:
            def __init__(self) -> None:
                self.id = "sha256:1"
                self.attrs = {"Created": "2024-05-01T00:00:00Z", "Size": 1}
                self.labels: dict[str, str] = {}
        return Image()


class _Api:
    def build(self, **kwargs: Any) -> Any:
        for i in range(1, 5):
            yield {"stream": f"STEP {i}/4: RUN step {i}\n"}
            yield {"stream": "output\n"}


class _Client:
    api = _Api()
    images = _Images()


def test_an_image_build_shows_its_steps_and_context_size(tmp_path: Path) -> None:
    ctx = tmp_path / "ctx.tar"
    ctx.write_bytes(b"\0" * 2_500_000)
    lines: list[str] = []
    engine._build(_Client(), ctx, "nightly/x:1", tmp_path / "log", lines.append)  # type: ignore[arg-type]
    meter = [line for line in lines if "image build" in line]
    assert meter[0].endswith("nightly/x:1: image build (context 2.5 MB): started")
    assert any(line.endswith("1 steps of 4 steps (25%)") for line in meter), meter
    assert "done, 4 steps in" in meter[-1]
    assert "nightly/x:1: STEP 3/4: RUN step 3" in lines
