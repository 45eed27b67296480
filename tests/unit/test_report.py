"""The night report (HTML) and status (terminal), on synthesized day folders."""

from __future__ import annotations

import datetime as dt
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from nightly.errors import UsageError
from nightly.history.db import History
from nightly.report import html as report
from nightly.report import status as status_view
from nightly.report import view as nightview
from nightly.workspace import Day

DATE = dt.date(2024, 5, 1)
T0 = dt.datetime(2024, 5, 1, 1, 0).timestamp()
# A build id that is not HTML (file names take no '/', so the closing tag is in the reason).
EVIL = "evil<script>alert(1)&\"'"
EVIL_REASON = "reason <script>alert(2)</script> <b>bold</b>"


class Page(HTMLParser):
    """Every element's tag and attributes, and the text, of an HTML page."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def having(self, attr: str) -> list[dict[str, str | None]]:
        return [a for _, a in self.elements if attr in a]

    def classed(self, cls: str) -> list[dict[str, str | None]]:
        return [a for _, a in self.elements if cls in (a.get("class") or "").split()]


def build_entry(
    status: str, start: float, duration: float, *, queue: int, size: int = 0, reason: str | None = None,
    name: str = "pkg.whl",
) -> dict[str, Any]:
    ok = status == "succeeded"
    return {
        "status": status,
        "reason": reason,
        "exit_status": 0 if ok else 3,
        "started": T0 + start,
        "ended": T0 + start + duration,
        "duration_s": duration,
        "attempts": 1,
        "machine": "linux-1",
        "queue": queue,
        "executor": "local",
        "packages": [{"name": name, "path": f"packages/x/cpu/{name}", "size": size, "sha256": "00"}]
        if ok and size else [],
        "published": {},
    }


def make_day(root: Path, builds: dict[str, dict[str, Any]], *, logs: bool = True) -> Day:
    """A day folder with state.json and logs as the runner leaves them."""
    day = Day(root, DATE)
    day.create()
    for bid, e in builds.items():
        ok = e["status"] == "succeeded"
        folder = day.succeeded if ok else day.failed
        if e["status"] == "running":
            folder = day.logs
        log = folder / f"{bid}.log"
        if logs:
            body = "".join(f"compiling unit {i}\n" for i in range(60))
            if not ok:
                body += f"error: the compiler failed on {bid}\n"
            footer = "\n" + "=" * 78 + f"\nresult:      {e['status'].upper()}\n" + "=" * 78 + "\n"
            log.write_text("=" * 78 + "\nnightly build x\n" + "=" * 78 + "\n" + body + footer)
            e["log"] = str(log.relative_to(day.path))
    state = {"builds": builds, "meta": {"commit": "0123456789abcdef0123", "version": "1.0.0.dev20240501",
                                        "channel": "nightly", "date": day.name}}
    (day.state_path).write_text(json.dumps(state))
    return day


def standard_builds() -> dict[str, dict[str, Any]]:
    return {
        "manywheel_3.7m_cpu": build_entry("succeeded", 0, 1300, queue=0, size=1_000_000),
        "manywheel_3.7m_cu100": build_entry("succeeded", 1300, 1100, queue=0, size=1_000_000),
        "conda_3.7_cpu": build_entry("succeeded", 0, 1000, queue=1, size=1_300_000),
        "conda_3.7_cu100": build_entry("succeeded", 1000, 1000, queue=1, size=1_100_000),
        "libtorch_shared-with-deps_cpu": build_entry(
            "failed", 2000, 300, queue=1, reason="recipe failed with exit status 3"
        ),
    }


def past_nights(history: History, n: int = 5) -> None:
    """n earlier nights: every build took 1000 s and made 1,000,000 bytes."""
    for i in range(1, n + 1):
        day = f"2024_04_{i:02d}"
        start = T0 - (31 - i) * 86400
        for bid in standard_builds():
            history.record(day, bid, {
                "status": "succeeded", "attempts": 1, "started": start, "ended": start + 1000,
                "duration_s": 1000.0 + (i % 3),  # a little noise
                "packages": [{"name": "pkg.whl", "size": 1_000_000 + i, "sha256": "00"}],
            }, commit="c")


def test_escapes_every_string(tmp_path: Path) -> None:
    builds = standard_builds()
    builds[EVIL] = build_entry("failed", 10, 20, queue=0, reason=EVIL_REASON)
    day = make_day(tmp_path, builds)
    (day.failed / f"{EVIL}.log").write_text(f"output {EVIL}\n")
    page = report.render_html(day, None)
    assert "<script" not in page.lower()
    assert "</script>" not in page
    assert "<b>bold" not in page
    assert "evil&lt;script&gt;alert(1)&amp;&quot;&#x27;" in page
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in page
    parsed = Page(page)
    # The parser unescapes attributes: the build id survives intact as data.
    assert EVIL in [a.get("data-build") for a in parsed.having("data-build")]
    assert EVIL_REASON in "".join(parsed.text)
    assert f"output {EVIL}" in "".join(parsed.text)


def test_log_links_are_relative_to_the_day_folder(tmp_path: Path) -> None:
    day = make_day(tmp_path, standard_builds())
    page = report.render_html(day, None)
    links = [a["href"] for a in Page(page).having("href") if a.get("href")]
    assert links
    assert "logs/failed/libtorch_shared-with-deps_cpu.log" in links
    for link in links:
        assert link is not None
        assert not link.startswith("/")
        assert ":" not in link
        assert (day.path / link).is_file(), link


def test_no_external_reference(tmp_path: Path) -> None:
    builds = standard_builds()
    builds["manywheel_3.7m_cpu"]["reason"] = "see https://example.com/x and http://example.org"
    builds["conda_3.7_cu100"] = build_entry(
        "failed", 1000, 10, queue=1, reason="fetching http://mirror.example/pkg failed"
    )
    day = make_day(tmp_path, builds)
    history = History(tmp_path / "history.sqlite")
    past_nights(history)
    page = report.render_html(day, history)
    assert "http://" not in page
    assert "https://" not in page
    assert "//" not in re.sub(r"<style>.*?</style>", "", page, flags=re.S).replace(":&#47;&#47;", "")
    parsed = Page(page)
    for _, attrs in parsed.elements:
        for name in ("src", "href", "srcset", "action", "xlink:href", "data"):
            value = attrs.get(name)
            assert value is None or (":" not in value and not value.startswith("/")), (name, value)
    assert not [t for t, _ in parsed.elements if t in ("script", "link", "img", "iframe", "object")]
    # The text still reads as written.
    assert "fetching http://mirror.example/pkg failed" in "".join(parsed.text)
    # The page forbids the browser every request.
    csp = [a for t, a in parsed.elements if t == "meta" and a.get("http-equiv")]
    assert csp
    assert "default-src 'none'" in str(csp[0].get("content"))


def test_regressions_over_twenty_percent_are_highlighted(tmp_path: Path) -> None:
    day = make_day(tmp_path, standard_builds())
    history = History(tmp_path / "history.sqlite")
    past_nights(history)
    page = report.render_html(day, history)
    parsed = Page(page)
    rows = {a["data-row"]: a for a in parsed.having("data-row")}
    regression_rows = {k for k, a in rows.items() if "regression" in (a.get("class") or "")}
    # 1300 s vs a median of ~1001 s: +30%, flagged; 1100 s (+10%) is not.
    # 1.3 MB vs 1.0 MB: +30%, flagged; 1.1 MB is not. The failed build is never a regression.
    assert regression_rows == {"manywheel_3.7m_cpu", "conda_3.7_cpu"}
    slower = [a for a in parsed.having("data-slower")]
    larger = [a for a in parsed.having("data-larger")]
    assert len(slower) == 1
    assert float(str(slower[0]["data-slower"])) == pytest.approx(1300 / 1001 - 1, abs=1e-3)
    assert len(larger) == 1
    assert float(str(larger[0]["data-larger"])) == pytest.approx(1_300_000 / 1_000_003 - 1, abs=1e-3)
    bars = {a["data-build"]: a for a in parsed.classed("bar")}
    assert "regression" in str(bars["manywheel_3.7m_cpu"]["class"])
    assert "regression" not in str(bars["manywheel_3.7m_cu100"]["class"])
    assert {a["data-regression"] for a in parsed.having("data-regression")} == regression_rows
    counts = {a["data-count"]: a for a in parsed.having("data-count")}
    assert "regressions" in counts
    # Sparklines: one per build and per measure, inline SVG.
    assert page.count('<svg class="spark"') == 2 * len(rows)


def test_a_small_slowdown_of_a_short_build_is_noise(tmp_path: Path) -> None:
    builds = {"tiny": build_entry("succeeded", 0, 3.0, queue=0, size=100)}
    day = make_day(tmp_path, builds)
    history = History(tmp_path / "history.sqlite")
    for i in range(1, 4):
        history.record(f"2024_04_{i:02d}", "tiny", {
            "status": "succeeded", "attempts": 1, "started": T0 - i * 86400, "duration_s": 2.0,
            "packages": [{"name": "t", "size": 100}]}, commit="c")
    parsed = Page(report.render_html(day, history))
    assert not parsed.having("data-slower")


def test_gantt_has_one_bar_per_started_build(tmp_path: Path) -> None:
    builds = standard_builds()
    builds["conda_3.8_cpu"] = {"status": "pending", "attempts": 0}
    running = build_entry("running", 2400, 0, queue=0)
    running["ended"] = None
    running["duration_s"] = None
    builds["manywheel_3.8_cpu"] = running
    day = make_day(tmp_path, builds)
    parsed = Page(report.render_html(day, None, now=T0 + 3000))
    bars = parsed.classed("bar")
    ids = sorted(str(a["data-build"]) for a in bars)
    assert ids == sorted(set(builds) - {"conda_3.8_cpu"})
    by_id = {a["data-build"]: a for a in bars}
    assert "running" in str(by_id["manywheel_3.8_cpu"]["class"])
    assert "failed" in str(by_id["libtorch_shared-with-deps_cpu"]["class"])
    lanes = {a["data-queue"] for a in parsed.having("data-queue")}
    assert lanes == {"0", "1"}
    # The first build starts at the left edge; the last ends at the right.
    assert "left:0.000%" in str(by_id["manywheel_3.7m_cpu"]["style"])
    failures = {a["data-failure"] for a in parsed.having("data-failure")}
    assert failures == {"libtorch_shared-with-deps_cpu"}


def test_failure_shows_the_log_tail_without_the_footer(tmp_path: Path) -> None:
    day = make_day(tmp_path, standard_builds())
    page = report.render_html(day, None, tail=5)
    text = "".join(Page(page).text)
    assert "error: the compiler failed on libtorch_shared-with-deps_cpu" in text
    assert "compiling unit 56" in text
    assert "compiling unit 55" not in text
    lines = nightview.log_tail(day.failed / "libtorch_shared-with-deps_cpu.log", 3)
    assert lines == ["compiling unit 58", "compiling unit 59",
                     "error: the compiler failed on libtorch_shared-with-deps_cpu"]


def test_write_report_is_in_the_day_folder_and_out(tmp_path: Path) -> None:
    day = make_day(tmp_path / "root", standard_builds())
    out = tmp_path / "site" / "reports" / "night.html"
    path = report.write_report(day, None, out)
    assert path == day.path / "report.html"
    assert path.read_text().startswith("<!DOCTYPE html>")
    assert out.exists()
    links = [a["href"] for a in Page(out.read_text()).having("href")]
    assert links
    for link in links:
        assert link is not None
        assert not link.startswith("/")
        assert (out.parent / link).resolve().is_file(), link
    assert not list(day.path.glob(".report.html.*"))  # no temporary left behind


def test_report_without_a_night_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"no state\.json"):
        report.render_html(Day(tmp_path, DATE), None)


def test_status_prints_failures_first_with_log_tails(tmp_path: Path) -> None:
    builds = standard_builds()
    builds[EVIL] = build_entry("failed", 10, 20, queue=0, reason="[bold]not markup[/bold]")
    day = make_day(tmp_path, builds)
    console = Console(record=True, width=200, color_system=None)
    code = status_view.show(day, tail=4, console=console)
    out = console.export_text()
    assert code == 1
    assert "4 succeeded" in out
    assert "2 failed" in out
    assert out.index("libtorch_shared-with-deps_cpu") < out.index("manywheel_3.7m_cpu")
    assert "error: the compiler failed on libtorch_shared-with-deps_cpu" in out
    assert "compiling unit 57" in out
    assert "compiling unit 56" not in out
    assert "[bold]not markup[/bold]" in out  # printed as text, not interpreted
    assert "evil<script>" in out


def test_status_all_good_is_zero(tmp_path: Path) -> None:
    builds = standard_builds()
    del builds["libtorch_shared-with-deps_cpu"]
    day = make_day(tmp_path, builds)
    console = Console(record=True, width=160, color_system=None)
    assert status_view.show(day, console=console) == 0
    assert "4 succeeded" in console.export_text()


def test_a_build_left_running_by_a_dead_run_ends_when_last_heard_of(tmp_path: Path) -> None:
    builds = standard_builds()
    stale = build_entry("interrupted", 100, 0, queue=0, reason="interrupted (the run that started it died)")
    stale.update(ended=None, duration_s=None, updated=T0 + 200)
    builds["stale"] = stale
    day = make_day(tmp_path, builds)
    page = report.render_html(day, None, now=T0 + 100_000)
    parsed = Page(page)
    bar = next(a for a in parsed.classed("bar") if a["data-build"] == "stale")
    # The night spans 0..2400 s: 100 s of it is 4.167%, not the day that passed since.
    assert "width:4.167%" in str(bar["style"])
    assert "after 1m 40s" in "".join(parsed.text)


LONG_WHEEL = "nightlydemo-0.1.0.dev20240501-cp311-cp311-manylinux_2_28_x86_64.manylinux2014_x86_64.whl"
LONG_ID = "libtorch_shared-without-deps_cu126"
LONG_ZIP = "libtorch-shared-without-deps-1.0.0.dev20240501.zip"


def long_named_builds() -> dict[str, dict[str, Any]]:
    builds = standard_builds()
    builds["manywheel_3.11_cu126"] = build_entry(
        "succeeded", 0, 900, queue=2, size=2_000_000, name=LONG_WHEEL
    )
    builds[LONG_ID] = build_entry(
        "succeeded", 900, 900, queue=2, size=3_000_000, name=LONG_ZIP
    )
    return builds


def test_status_in_80_columns_shows_every_package_and_build_whole(tmp_path: Path) -> None:
    day = make_day(tmp_path, long_named_builds())
    console = Console(record=True, width=80, force_terminal=True, color_system=None)
    status_view.show(day, tail=2, console=console)
    text = console.export_text()
    assert LONG_WHEEL in text
    assert LONG_ZIP in text
    assert any(LONG_ID in line and LONG_WHEEL not in line for line in text.splitlines())
    assert "…" not in text


def test_status_in_a_non_terminal_prints_every_package_in_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    monkeypatch.delenv("COLUMNS", raising=False)
    day = make_day(tmp_path, long_named_builds())
    out = io.StringIO()
    console = Console(file=out)  # cron: not a terminal (rich lays out for 80 columns)
    assert not console.is_terminal
    status_view.show(day, tail=2, console=console)
    lines = out.getvalue().splitlines()
    # Each package whole, on one line beside its build.
    assert any("manywheel_3.11_cu126" in line and LONG_WHEEL in line for line in lines), lines
    assert any(LONG_ID in line and LONG_ZIP in line for line in lines), lines
    for bid in ("conda_3.7_cpu", "conda_3.7_cu100", "manywheel_3.7m_cpu", "manywheel_3.7m_cu100"):
        assert any(bid in line and "pkg.whl" in line for line in lines), bid
    assert "…" not in out.getvalue()


def test_a_one_off_build_is_marked_manual_in_status_and_report(tmp_path: Path) -> None:
    builds = standard_builds()
    builds["conda_3.7_cu100"]["manual"] = {
        "by": "alice", "at": "2024-05-01T14:02:00+00:00", "command": "nightly build conda 3.7 cu100",
    }
    day = make_day(tmp_path, builds)
    console = Console(record=True, width=200, color_system=None)
    status_view.show(day, console=console, tail=0)
    out = console.export_text()
    assert "1 manual" in out
    row = next(line for line in out.splitlines() if "conda_3.7_cu100" in line and "succeeded" in line)
    assert "(manual)" in row
    assert not any("manual" in line for line in out.splitlines() if "conda_3.7_cpu " in line)
    listed = [line for line in out.splitlines() if "manual build by" in line]
    assert listed == [
        "  conda_3.7_cu100  manual build by alice, 2024-05-01 14:02: nightly build conda 3.7 cu100"
    ]

    page = Page(report.render_html(day, None))
    marked = page.having("data-manual")
    assert [a["data-manual"] for a in marked] == ["alice"]
    assert marked[0]["title"] == "nightly build conda 3.7 cu100"
    assert [a for a in page.having("data-count") if a["data-count"] == "manual"]
    (bar,) = [a for a in page.classed("bar") if a["data-build"] == "conda_3.7_cu100"]
    assert "manual" in str(bar["class"]).split()
    assert "manual build by alice" in str(bar["title"])
