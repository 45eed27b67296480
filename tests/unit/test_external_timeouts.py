"""[external_timeouts] (nightly.config.timeouts): how long nightly waits for outside work, read
from defaults.toml, set in a project's nightly.toml, refused when misspelt, and reaching the
code that waits."""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from nightly import procs
from nightly.config import DEFAULTS_PATH, load
from nightly.config.reader import parse_duration, read_defaults
from nightly.config.timeouts import KEYS, ExternalTimeouts, default_timeouts
from nightly.errors import ConfigError
from nightly.night import notify
from nightly.workspace.summary import Summary
from tests.unit.conftest import CliResult

WriteConfig = Callable[..., Path]


def test_every_key_is_read_from_defaults_toml(write_config: WriteConfig,
                                              minimal_config_text: str) -> None:
    table = read_defaults(DEFAULTS_PATH)["external_timeouts"]
    assert isinstance(table, dict)
    assert set(table) == set(KEYS) == {f.name for f in dataclasses.fields(ExternalTimeouts)}
    expected = {k: parse_duration(v) for k, v in table.items()}
    assert dataclasses.asdict(default_timeouts()) == expected
    assert dataclasses.asdict(load(write_config(minimal_config_text)).external_timeouts) == expected


def test_a_project_sets_its_own(write_config: WriteConfig, minimal_config_text: str,
                                tmp_path: Path) -> None:
    config = load(write_config(minimal_config_text
                               + '\n[external_timeouts]\ndiffoscope = "1h"\nsmtp = 5\n'))
    assert (config.external_timeouts.diffoscope, config.external_timeouts.smtp) == (3600.0, 5.0)
    assert config.external_timeouts.git_checkout == default_timeouts().git_checkout
    # Another configuration loaded in the same process keeps the defaults.
    (tmp_path / "other").mkdir()
    other = load(write_config(minimal_config_text, "other/nightly.toml"))
    assert other.external_timeouts.diffoscope == default_timeouts().diffoscope == 900.0


def test_a_misspelt_key_is_refused_with_the_closest_one(
    nightly: Callable[..., CliResult], write_config: WriteConfig, minimal_config_text: str
) -> None:
    path = write_config(minimal_config_text + '\n[external_timeouts]\ndifoscope = "1h"\n')
    with pytest.raises(ConfigError, match="unknown key") as e:
        load(path)
    assert e.value.hint is not None
    assert "diffoscope" in e.value.hint
    got = nightly("plan", "--config", str(path))
    assert got.code == 2, got
    assert "external_timeouts.difoscope" in got.err
    assert "did you mean 'diffoscope'?" in got.err
    assert "Traceback" not in got.err
    bad = write_config(minimal_config_text + '\n[external_timeouts]\nsmtp = "soon"\n')
    got = nightly("plan", "--config", str(bad))
    assert got.code == 2, got
    assert "external_timeouts.smtp" in got.err


def test_the_configured_wait_reaches_the_command(monkeypatch: pytest.MonkeyPatch,
                                                 write_config: WriteConfig,
                                                 minimal_config_text: str) -> None:
    """notify's command waits [external_timeouts] notify_command, not a number of its own."""
    config = load(write_config(minimal_config_text + "\n[external_timeouts]\nnotify_command = 7\n"
                               '[notify]\ncommand = "true"\nalways = true\n'))
    seen: list[float] = []

    def call(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        timeout = kw.get("timeout")
        assert isinstance(timeout, float)
        seen.append(timeout)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(procs, "call", call)
    summary = Summary(date="2026_11_22", exit_code=0)
    notify.send(config.notify, summary, timeouts=config.external_timeouts)
    notify.send(config.notify, summary)
    assert seen == [7.0, default_timeouts().notify_command]
