"""nightly's one retry policy (nightly.config.retry): the pauses, the tries, the numbers read
from defaults.toml's [backoff.<use>] tables and a configuration's own, used by the loops."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nightly.config import DEFAULTS_PATH, load, retry
from nightly.config.reader import read_defaults
from nightly.errors import ConfigError, PublishError
from nightly.stores.base import cas_rounds

WriteConfig = Callable[..., Path]


@pytest.fixture(autouse=True)
def _defaults_after() -> Iterator[None]:
    yield
    retry._configured.clear()


def test_pauses_double_up_to_the_cap_jittered(monkeypatch: pytest.MonkeyPatch) -> None:
    b = retry.Backoff(attempts=6, first_s=0.5, cap_s=3.0)
    monkeypatch.setattr(random, "uniform", lambda lo, hi: 1.0)
    assert [b.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    monkeypatch.setattr(random, "uniform", lambda lo, hi: lo)
    assert b.delay(2) == 0.5
    monkeypatch.setattr(random, "uniform", lambda lo, hi: hi)
    assert b.delay(2) == 1.5


def test_tries_pause_between_tries_only(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    monkeypatch.setattr(random, "uniform", lambda lo, hi: 1.0)
    assert list(retry.Backoff(attempts=3, first_s=0.1, cap_s=1.0).tries()) == [1, 2, 3]
    assert slept == [0.1, 0.2]
    assert retry.Backoff(attempts=3, first_s=1, cap_s=1).replace(attempts=0).attempts == 1


def test_the_numbers_come_from_defaults_toml() -> None:
    table = read_defaults(DEFAULTS_PATH)["backoff"]
    assert isinstance(table, dict)
    assert set(table) == set(retry.USES)
    for use in retry.USES:
        got = retry.policy(use)
        assert (got.attempts, got.first_s, got.cap_s) == (
            table[use]["attempts"], table[use]["first"], table[use]["cap"])


def test_a_configuration_sets_the_policy_every_loop_uses(
    write_config: WriteConfig, minimal_config_text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[backoff.store] attempts = 3: a writer gives up after 3 rounds (it was 12 rounds
    hard-coded in stores/base.py, whatever the configuration)."""
    monkeypatch.setattr(time, "sleep", lambda s: None)
    load(write_config(minimal_config_text + "\n[backoff.store]\nattempts = 3\n"))
    assert retry.policy("store").attempts == 3
    seen: list[int] = []

    def rounds() -> None:
        seen.extend(cas_rounds("the index"))

    with pytest.raises(PublishError, match="during 3 rounds"):
        rounds()
    assert seen == [1, 2, 3]


def test_a_bad_value_is_a_config_error(write_config: WriteConfig, minimal_config_text: str,
                                       tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="attempts"):
        load(write_config(minimal_config_text + "\n[backoff.s3]\nattempts = 0\n"))
    with pytest.raises(ConfigError, match="unknown key"):
        load(write_config(minimal_config_text + "\n[backoff.s3]\npause = 1\n"))
