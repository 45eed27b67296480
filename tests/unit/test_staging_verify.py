"""Verified staging's pieces: the night's key, the seal, the package records."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from nightly.cluster import verify as sv
from nightly.cluster.messages import AttemptResult

PREFIX = "2024_05_01/builds/manywheel_3.7m_cpu/tok/"
SHA = "ab" * 32


def _result(**over: Any) -> dict[str, Any]:
    r: dict[str, Any] = {
        "build": "manywheel_3.7m_cpu", "token": "tok", "status": "succeeded",
        "packages": [{"name": "demo-1.0-py3-none-any.whl", "size": 10, "sha256": SHA,
                      "key": f"{PREFIX}packages/demo-1.0-py3-none-any.whl"}],
    }
    r.update(over)
    return r


def test_the_night_key_is_private_and_stable(tmp_path: Path) -> None:
    path = tmp_path / "work" / "cluster" / "seal.key"
    key = sv.night_key(path)
    assert len(key) == sv.KEY_BYTES
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sv.night_key(path) == key  # a rerun of the day reads it
    path.write_bytes(b"")  # a crash between create and write
    assert sv.night_key(path) != key
    assert len(path.read_bytes()) == sv.KEY_BYTES


def test_a_seal_covers_every_field() -> None:
    key = b"k" * 32
    r = _result()
    r[sv.SEAL] = sv.seal(key, r)
    assert sv.sealed(key, r)
    assert not sv.sealed(b"x" * 32, r)  # another night's key
    assert not sv.sealed(b"", r)
    for change in ({"status": "failed"}, {"commit": "evil"}):
        assert not sv.sealed(key, {**r, **change})
    evil = _result()
    evil["packages"][0]["sha256"] = "cd" * 32
    evil[sv.SEAL] = r[sv.SEAL]
    assert not sv.sealed(key, evil)
    assert not sv.sealed(key, _result())  # no seal at all


def test_package_records_are_checked() -> None:
    (p,) = sv.check_packages(_result()["packages"], PREFIX)
    assert p.size == 10
    assert sv.check_packages([], PREFIX) == []
    bad = [
        ({"name": "../x.whl", "key": f"{PREFIX}packages/../x.whl"}, "bad package name"),
        ({"key": "2024_05_01/builds/other/tok2/packages/demo-1.0-py3-none-any.whl"},
         "not under its attempt"),
        ({"sha256": "AB" * 32}, "is not a sha256"),
        ({"sha256": "ab" * 31}, "is not a sha256"),
        ({"size": -1}, "not a byte count"),
        ({"size": "10"}, "not a byte count"),
        ({"size": True}, "not a byte count"),
    ]
    for change, error in bad:
        r = _result()
        r["packages"][0].update(change)
        with pytest.raises(ValueError, match=error):
            sv.check_packages(r["packages"], PREFIX)
    with pytest.raises(ValueError, match="not a list"):
        sv.check_packages(AttemptResult.from_json(_result(packages="x")).packages, PREFIX)


def test_a_result_reads_back_as_written_and_its_seal_holds() -> None:
    """The typed result's JSON form is what the worker seals and stages; read back from
    staging (untrusted), it is the same record, and the seal still checks."""
    key = b"k" * 32
    raw = AttemptResult.from_json(_result()).to_json()
    raw[sv.SEAL] = sv.seal(key, raw)
    again = AttemptResult.from_json(json.loads(json.dumps(raw)))
    assert again.to_json() == raw
    assert sv.sealed(key, again.to_json())
    assert again.packages is not None
    assert again.packages[0]["size"] == 10
    odd = AttemptResult.from_json({"build": 3, "slot": "x", "attempts": None, "infra": 1})
    assert (odd.build, odd.slot, odd.attempts, odd.infra) == ("3", 0, 1, True)


def test_tokens_are_unpredictable() -> None:
    tokens = {sv.new_token_part() for _ in range(1000)}
    assert len(tokens) == 1000
    assert all(len(t) == 32 for t in tokens)


def test_the_key_is_never_in_a_tasks_repr() -> None:
    """Dask logs a failed task's arguments: the TaskSpec's repr must leave the key out."""
    import dataclasses

    from nightly.cluster.worker import TaskSpec

    field = {f.name: f for f in dataclasses.fields(TaskSpec)}["seal_key"]
    assert field.repr is False
