"""nightly's one retry policy (nightly.config.retry): the pauses, the tries, the numbers read
from defaults.toml's [backoff.<use>] tables and a configuration's own, used by the loops."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nightly.config import DEFAULTS_PATH, load, retry
from nightly.config.reader import read_defaults
from nightly.config.retry import default_backoffs
from nightly.errors import ConfigError, PublishError
from nightly.stores import Store, open_store
from nightly.stores.base import cas_rounds

WriteConfig = Callable[..., Path]


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
        got = getattr(retry.default_backoffs(), use)
        assert (got.attempts, got.first_s, got.cap_s) == (
            table[use]["attempts"], table[use]["first"], table[use]["cap"])


def test_a_configuration_sets_the_policy_every_loop_uses(
    write_config: WriteConfig, minimal_config_text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[backoff.store] attempts = 3: a writer gives up after 3 rounds (it was 12 rounds
    hard-coded in stores/base.py, whatever the configuration)."""
    monkeypatch.setattr(time, "sleep", lambda s: None)
    config = load(write_config(minimal_config_text + "\n[backoff.store]\nattempts = 3\n"))
    assert config.backoff.store.attempts == 3
    seen: list[int] = []

    def rounds() -> None:
        seen.extend(cas_rounds("the index", config.backoff.store))

    with pytest.raises(PublishError, match="during 3 rounds"):
        rounds()
    assert seen == [1, 2, 3]


def test_two_configurations_in_one_process_keep_their_own_policies(
    tmp_path: Path, minimal_config_text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading a second configuration changes nothing of the first: each Config carries its
    policies, and a store opened for one retries by that one's (the process held the last
    loaded configuration's, for every loop, before)."""
    monkeypatch.setattr(time, "sleep", lambda s: None)
    paths = []
    for name, attempts in (("a", 2), ("b", 5)):
        folder = tmp_path / name
        folder.mkdir()
        path = folder / "nightly.toml"
        path.write_text(minimal_config_text + f"\n[backoff.store]\nattempts = {attempts}\n"
                        f"[backoff.engine]\nattempts = {attempts + 1}\n")
        paths.append(path)
    first, second = load(paths[0]), load(paths[1])
    assert (first.backoff.store.attempts, second.backoff.store.attempts) == (2, 5)
    assert (first.backoff.engine.attempts, second.backoff.engine.attempts) == (3, 6)
    stores = [open_store((tmp_path / n / "store").as_uri(), backoffs=c.backoff)
              for n, c in (("a", first), ("b", second))]
    for store, rounds in zip(stores, (2, 5), strict=True):
        store.put_bytes("k", b"0", "text/plain")
        calls: list[int] = []

        def change(current: bytes | None, store: Store = store, calls: list[int] = calls) -> bytes:
            # Another writer changes the object after each read: every round loses.
            calls.append(1)
            store.put_bytes("k", str(len(calls)).encode(), "text/plain")
            return b"mine"

        with pytest.raises(PublishError, match=f"during {rounds} rounds"):
            store.update("k", change, "text/plain", what="k")
        assert len(calls) == rounds
    assert default_backoffs().store.attempts == 12  # defaults.toml's, untouched


def test_a_bad_value_is_a_config_error(write_config: WriteConfig, minimal_config_text: str,
                                       tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="attempts"):
        load(write_config(minimal_config_text + "\n[backoff.s3]\nattempts = 0\n"))
    with pytest.raises(ConfigError, match="unknown key"):
        load(write_config(minimal_config_text + "\n[backoff.s3]\npause = 1\n"))
