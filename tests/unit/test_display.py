"""What a person (or cron's mail) reads at the end of a night or a `nightly build`: the summary
table. Package names are the information wanted, so they are never cut, in an 80-column
terminal or in a non-terminal."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from nightly.report import terminal as display
from nightly.workspace.summary import Summary

WHEELS = [
    "nightlydemo-0.1.0.dev20261122-cp311-cp311-manylinux_2_28_x86_64.manylinux2014_x86_64.whl",
    "nightlydemo-0.1.0.dev20261122-cp311-cp311-linux_x86_64.whl",
]
LIBTORCH = "libtorch-shared-without-deps-0.1.0.dev20261122%2Bcu126.zip"


def summary() -> Summary:
    def build(outcome: str, packages: list[str], reason: str | None = None) -> dict[str, Any]:
        return {
            "outcome": outcome,
            "reason": reason,
            "duration_s": 95.0,
            "packages": [{"name": n, "size": 12_345 + i} for i, n in enumerate(packages)],
        }

    builds = {
        "manywheel_3.11_cpu": build("succeeded", WHEELS),
        "libtorch_shared-without-deps_cu126": build("succeeded", [LIBTORCH]),
        "conda_3.7_cu100": build("failed", [], reason="exit status 1 (CUDA 10.0 is not installed)"),
    }
    return Summary.from_json({
        "date": "2026_11_22",
        "machine": "0",
        "source": "abc1234",
        "path": "/srv/nightlies/2026_11_22/summary.json",
        "counts": {"total": 3, "succeeded": 2, "failed": 1, "interrupted": 0},
        "builds": builds,
    })


def test_an_80_column_terminal_shows_every_package_name_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    con = Console(record=True, width=80, force_terminal=True, color_system=None)
    monkeypatch.setattr(display, "console", con)
    display.print_summary(summary())
    text = con.export_text()
    for name in [*WHEELS, LIBTORCH]:
        assert name in text, text
    for bid in summary().builds:
        assert bid in text, text
    assert "…" not in text
    assert "2 succeeded, 1 failed of 3" in text


def test_a_non_terminal_gets_every_package_in_full(monkeypatch: pytest.MonkeyPatch) -> None:
    # cron: stdout is a file or a pipe; rich then lays tables out for 80 columns.
    out = io.StringIO()
    monkeypatch.delenv("COLUMNS", raising=False)
    con = Console(file=out)
    assert not con.is_terminal
    monkeypatch.setattr(display, "console", con)
    display.print_summary(summary())
    text = out.getvalue()
    for name in [*WHEELS, LIBTORCH]:
        # On a line of its own with its build: what a mail reader greps for.
        assert any(name in line and "_" in line.split(name)[0] for line in text.splitlines()), text
    assert "…" not in text
    assert "\x1b[" not in text  # no terminal codes in a mail


def _failed_night(reason: str) -> Summary:
    return Summary.from_json({
        "date": "2026_11_22", "machine": "0", "source": "abc1234",
        "counts": {"total": 2, "succeeded": 1, "failed": 1, "interrupted": 0},
        "builds": {
            "manywheel_3.9_cpu": {"outcome": "failed", "reason": reason, "duration_s": 60.0,
                                  "packages": [], "log": "logs/failed/manywheel_3.9_cpu.log"},
            "manywheel_3.10_cpu": {"outcome": "succeeded", "duration_s": 60.0,
                                   "packages": [{"name": WHEELS[0], "size": 1}],
                                   "log": "logs/succeeded/manywheel_3.10_cpu.log"},
        },
    })


def test_the_night_ends_with_the_failed_logs_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 57: the end named summary.json and no failed log."""
    out = io.StringIO()
    monkeypatch.setattr(display, "console", Console(file=out, width=80))
    display.print_summary(_failed_night("recipe failed"),
                          path="/srv/nightlies/2026_11_22/summary.json")
    lines = out.getvalue().splitlines()
    at = lines.index("failed log:")
    assert lines[at + 1] == ("  manywheel_3.9_cpu: "
                             "/srv/nightlies/2026_11_22/logs/failed/manywheel_3.9_cpu.log")
    assert "succeeded/manywheel_3.10_cpu.log" not in out.getvalue()


def test_a_piped_summary_folds_a_long_reason_instead_of_a_240_column_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 57: cron's mail got a table as wide as the longest reason (~240 columns)."""
    out = io.StringIO()
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(display, "console", None)
    monkeypatch.setattr("sys.stdout", out)
    reason = "recipe failed with exit status 1: [manywheel] ERROR: " + "cmake said no " * 16
    display.print_summary(_failed_night(reason.strip()))
    table = [line for line in out.getvalue().splitlines() if line[:1] in "┏┃┡│└"]
    assert table
    assert max(len(line) for line in table) <= 150, out.getvalue()
    assert "cmake said no" in out.getvalue()


NAME, OTHER = "qxzvk-host-7", "wjqpy-gpu-9"  # names whose pieces nothing else contains


def _pieces(name: str, text: str) -> list[str]:
    """The three-letter pieces of `name` left in `text` once its whole copies are gone: a
    name folded over two lines leaves some."""
    rest = text.replace(name, "")
    return [name[i:i + 3] for i in range(len(name) - 2) if name[i:i + 3] in rest]


def _printed(width: int, machine: str, built_on: str, tested_on: str,
             monkeypatch: pytest.MonkeyPatch) -> str:
    data = summary().to_json()
    data["machine"] = machine
    builds = data["builds"]
    assert isinstance(builds, dict)
    for b in builds.values():
        b["built_on"], b["tested_on"] = built_on, tested_on
    con = Console(record=True, width=width, force_terminal=True, color_system=None)
    monkeypatch.setattr(display, "console", con)
    display.print_summary(Summary.from_json(data))
    return con.export_text()


def test_an_80_column_terminal_never_splits_a_machine_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """A local night: every build ran on the title's machine, so no `where` column says it
    again (at 80 columns it folded the name in two, issue 57); the name stands whole once."""
    text = _printed(80, NAME, NAME, "", monkeypatch)
    assert text.count(NAME) == 1, text
    assert _pieces(NAME, text) == [], text
    assert f"2026_11_22 on machine {NAME}" in text
    assert "where" not in text
    assert "…" not in text


def test_builds_that_ran_elsewhere_name_their_machines_whole(
        monkeypatch: pytest.MonkeyPatch) -> None:
    text = _printed(120, "0", NAME, OTHER, monkeypatch)
    assert "where" in text
    assert text.count(NAME) == 3, text
    assert text.count(OTHER) == 3, text
    assert _pieces(NAME, text) == _pieces(OTHER, text) == [], text
    assert "…" not in text
