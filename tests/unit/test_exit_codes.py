"""One exit-code path: commands raise the errors of nightly.errors, cli.main alone maps them
to exit codes (README: 0 ok, 1 builds or uploads failed, 2 bad usage, 3 nothing selected,
4 lock held)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from nightly import errors
from nightly.workspace import FAILED, SUCCEEDED, Day, DayLock, State


def _day(tmp_path: Path, text: str, statuses: dict[str, str]) -> Path:
    config = tmp_path / "nightly.toml"
    config.write_text(f'root = "{tmp_path / "root"}"\n' + text)
    day = Day(tmp_path / "root", dt.date(2024, 5, 1))
    day.create()
    state = State(day.state_path)
    for bid, status in statuses.items():
        state.update(bid, status=status, package="manywheel", python="3.7m", cuda="cpu")
    return config


def test_every_error_class_has_the_designs_exit_code() -> None:
    assert errors.BuildsFailed("x").exit_code == 1
    assert errors.UsageError("x").exit_code == errors.ConfigError("x").exit_code == 2
    assert errors.NothingSelected("x").exit_code == 3
    assert errors.LockHeld("x").exit_code == 4


def test_a_failed_build_is_exit_1_without_an_error_line_when_already_shown(
    tmp_path: Path, minimal_config_text: str, nightly: Any
) -> None:
    config = _day(tmp_path, minimal_config_text,
                  {"manywheel_3.6m_cpu": SUCCEEDED, "manywheel_3.7m_cpu": FAILED})
    r = nightly("status", "--config", str(config), "--date", "2024_05_01")
    assert r.code == 1
    assert "manywheel_3.7m_cpu" in r.out  # the table said what failed
    assert "nightly: error" not in r.err


def test_all_good_is_exit_0(tmp_path: Path, minimal_config_text: str, nightly: Any) -> None:
    config = _day(tmp_path, minimal_config_text, {"manywheel_3.6m_cpu": SUCCEEDED})
    assert nightly("status", "--config", str(config), "--date", "2024_05_01").code == 0


def test_a_held_lock_is_exit_4_with_one_error_line(
    tmp_path: Path, minimal_config_text: str, nightly: Any
) -> None:
    config = _day(tmp_path, minimal_config_text + '\n[publish]\nurl = "mirror"\n',
                  {"manywheel_3.6m_cpu": SUCCEEDED})
    with DayLock(tmp_path / "root" / "2024_05_01.lock").acquire("run"):
        r = nightly("upload", "--config", str(config), "--date", "2024_05_01")
    assert r.code == 4
    assert r.err.startswith("nightly: error: another nightly run holds the lock")


@pytest.mark.parametrize(("reported", "shown"), [(True, False), (False, True)])
def test_builds_failed_is_printed_unless_the_command_showed_it(
    reported: bool, shown: bool, nightly: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nightly.cli import main as cli

    @cli.cli.command(name="fail-for-test")
    def fail() -> None:
        raise errors.BuildsFailed("2 of 3 builds failed", reported=reported)

    try:
        r = nightly("fail-for-test")
    finally:
        cli.cli.commands.pop("fail-for-test")
    assert r.code == 1
    assert ("nightly: error: 2 of 3 builds failed" in r.err) is shown
