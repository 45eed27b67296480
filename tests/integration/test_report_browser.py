"""The night report in a real browser: a small real night (`nightly run` with bash recipes, two
queues, two failures), recorded in the history beside earlier nights, written as report.html,
then opened by headless Chromium (Debian's package, installed by scripts/browser.sh when
missing): the rendered DOM has one Gantt bar per build, and a screenshot shows them."""

from __future__ import annotations

import datetime as dt
import os
import struct
import subprocess
import zlib
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from nightly import config as cfg
from nightly.history.db import History, history_path
from nightly.history.feeds import estimator
from nightly.plan.schedule import make_plan
from nightly.report import html as report
from nightly.report import status as status_view
from nightly.workspace import Day, State

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")

MATRIX = """
[matrix.linux.manywheel]
pythons = ["3.7m", "3.8"]
cudas = ["cpu", "cu100"]

[matrix.linux.conda]
pythons = ["3.7"]
cudas = ["cpu", "cu100"]
"""
BEHAVIOURS = {
    "manywheel_3.7m_cpu": "sleep:2",
    "manywheel_3.7m_cu100": "sleep:1",
    "manywheel_3.8_cpu": "sleep:1",
    "manywheel_3.8_cu100": "sleep:1+fail",
    "conda_3.7_cpu": "sleep:1",
    "conda_3.7_cu100": "fail",
}
FAILING = {"manywheel_3.8_cu100", "conda_3.7_cu100"}


@pytest.fixture(scope="module")
def chromium() -> Path:
    """Debian's Chromium, installed now if it is missing (never skipped)."""
    if not os.access(CHROMIUM, os.X_OK):
        proc = subprocess.run(
            ["bash", str(REPO / "scripts" / "browser.sh")],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert proc.returncode == 0, f"scripts/browser.sh failed:\n{proc.stdout}\n{proc.stderr}"
    assert os.access(CHROMIUM, os.X_OK)
    return CHROMIUM


def run_chromium(chromium: Path, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(chromium), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--disable-dev-shm-usage", "--hide-scrollbars",
            # Any name the page tried to resolve would fail: the page must need none.
            "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--user-data-dir={profile}", *args,
        ],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "HOME": str(profile)},
    )  # fmt: skip


class Dom(HTMLParser):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def classed(self, cls: str) -> list[dict[str, str | None]]:
        return [a for _, a in self.elements if cls in (a.get("class") or "").split()]


def png_pixels(path: Path) -> tuple[int, int, list[tuple[int, int, int]]]:
    """Decode an 8-bit RGB/RGBA, non-interlaced PNG (what Chromium writes): width, height,
    pixels (RGB)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    width = height = channels = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert (depth, interlace) == (8, 0)
            assert color in (2, 6), color
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    prev = bytearray(stride)
    pixels: list[tuple[int, int, int]] = []
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        pixels += [tuple(line[i : i + 3]) for i in range(0, stride, channels)]  # type: ignore[misc]
        prev = line
    return width, height, pixels


def near(px: tuple[int, int, int], rgb: tuple[int, int, int], tol: int = 12) -> bool:
    return all(abs(a - b) <= tol for a, b in zip(px, rgb, strict=True))


def earlier_nights(history: History, ids: list[str], date: dt.date) -> None:
    """Ten earlier nights in the history: every build succeeded in ~1 s with a ~7 KB package
    (tonight's are ~7.5 KB: not a regression), except manywheel_3.7m_cpu, whose package was
    5 KB: tonight's is 50% larger, a regression."""
    for n in range(1, 11):
        d = date - dt.timedelta(days=n)
        start = dt.datetime.combine(d, dt.time(1, 0)).timestamp()
        for bid in ids:
            history.record(f"{d:%Y_%m_%d}", bid, {
                "status": "succeeded", "attempts": 1, "started": start, "ended": start + 1,
                "duration_s": 1.0 + (n % 3) * 0.05, "machine": "m", "queue": 0, "executor": "local",
                "packages": [{"name": f"{bid}.tar.gz", "sha256": "0" * 64,
                              "size": 5000 if bid == "manywheel_3.7m_cpu" else 7000 + n}],
            }, commit="0" * 40)  # fmt: skip


@pytest.fixture
def date() -> str:
    """The day every integration night runs for (see tests/support/projects.py DATE)."""
    return "2024_05_01"


def test_report_of_a_real_night_in_chromium(
    chromium: Path,
    night_project: Callable[..., Any],
    run_cli: Callable[..., tuple[int, str, str]],
    date: str,
    tmp_path: Path,
) -> None:
    p = night_project(matrix=MATRIX, behaviours=BEHAVIOURS, queues=2)
    code, out, err = run_cli(["run", "--config", str(p.config), "--date", date], cwd=p.path)
    assert code == 1, (out, err)  # two builds failed, the rest went on
    state = p.state()["builds"]
    assert set(state) == set(BEHAVIOURS)
    assert {b for b, e in state.items() if e["status"] == "failed"} == FAILING
    assert {e["queue"] for e in state.values()} == {0, 1}

    config = cfg.load(p.config)
    day = Day(config.root, dt.date(int(date[:4]), int(date[5:7]), int(date[8:])))
    assert day.path == p.day
    with History(history_path(config.root)) as history:
        earlier_nights(history, sorted(BEHAVIOURS), day.date)
        assert history.record_state(day.name, State(day.state_path)) == len(BEHAVIOURS)
        # The history feeds the next night's plan: ~1-2 s builds, not the configured minutes.
        est = estimator(config, history)
        plan = make_plan(config, estimate=est)
        for pb in plan.builds:
            if pb.build.id in FAILING:
                continue
            assert pb.estimate_s < 10, (pb.build.id, pb.estimate_s)
        report_path = report.write_report(day, history)
    assert report_path == p.day / "report.html"
    page = report_path.read_text()
    assert "http://" not in page
    assert "https://" not in page

    # The terminal view of the same night.
    console = Console(record=True, width=180, color_system=None)
    assert status_view.show(day, console=console, tail=5) == 1
    text = console.export_text()
    assert "4 succeeded" in text
    assert "2 failed" in text
    assert "error: the compiler failed" in text
    assert text.index("conda_3.7_cu100") < text.index("conda_3.7_cpu")

    # The rendered DOM: one bar per build, each with its outcome; failures link their logs.
    profile = tmp_path / "chromium-profile"
    url = report_path.as_uri()
    dumped = run_chromium(chromium, profile, "--dump-dom", url)
    assert dumped.returncode == 0, dumped.stderr[-3000:]
    dom = Dom(dumped.stdout)
    bars = dom.classed("bar")
    assert sorted(str(a.get("data-build")) for a in bars) == sorted(BEHAVIOURS)
    for a in bars:
        status = "failed" if a["data-build"] in FAILING else "succeeded"
        assert status in str(a.get("class")).split(), a
    lanes = {a.get("data-queue") for _, a in dom.elements if "data-queue" in a}
    assert lanes == {"0", "1"}
    links = {a.get("href") for t, a in dom.elements if t == "a"}
    for bid in FAILING:
        assert f"logs/failed/{bid}.log" in links
        assert (p.day / "logs" / "failed" / f"{bid}.log").is_file()
    regressions = [a.get("data-row") for a in dom.classed("regression") if "data-row" in a]
    assert regressions == ["manywheel_3.7m_cpu"]
    assert len([a for _, a in dom.elements if "data-larger" in a]) == 1

    # The screenshot: the bars are there in green and red, over a page that is not blank.
    shot = tmp_path / "report.png"
    taken = run_chromium(chromium, profile, f"--screenshot={shot}", "--window-size=1400,1000", url)
    assert taken.returncode == 0, taken.stderr[-3000:]
    assert shot.exists()
    assert shot.stat().st_size > 20_000
    width, height, pixels = png_pixels(shot)
    assert (width, height) == (1400, 1000)
    green = sum(1 for px in pixels if near(px, (0x2E, 0x9D, 0x57)))
    red = sum(1 for px in pixels if near(px, (0xD6, 0x45, 0x45)))
    white = sum(1 for px in pixels if px == (255, 255, 255))
    assert green > 2000, green  # four succeeded bars (and the counts' digits)
    assert red > 500, red  # two failed bars
    assert white < 0.97 * len(pixels)
    keep = os.environ.get("NIGHTLY_SCREENSHOT_DIR")
    if keep:  # for a person to look at
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / "report.png").write_bytes(shot.read_bytes())
