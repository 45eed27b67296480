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
