"""The lenient reading of JSON values (nightly.jsonvalues): wrong types read as unset."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from nightly import jsonvalues as jv


@pytest.mark.parametrize(
    ("value", "expected"),
    [(3, 3), (2.7, 2), ("4", 4), (None, None), (True, None), (False, None), ("x", None),
     ("3.5", None), ([1], None), ({"a": 1}, None), (math.inf, None), (math.nan, None)],
)
def test_opt_int(value: object, expected: int | None) -> None:
    assert jv.opt_int(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(3, 3.0), (2.5, 2.5), ("1.5", 1.5), (None, None), (True, None), ("x", None), ([], None)],
)
def test_opt_float(value: object, expected: float | None) -> None:
    assert jv.opt_float(value) == expected


def test_defaults_and_text() -> None:
    assert jv.as_int("x", 7) == 7
    assert jv.as_int(None) == 0
    assert jv.as_float(True, 1.5) == 1.5
    assert jv.as_str(None, "d") == "d"
    assert jv.as_str(5) == "5"
    assert jv.opt_str(None) is None
    assert jv.opt_str(0) == "0"
    assert jv.str_map({"a": 1, "b": None}) == {"a": "1"}
    assert jv.str_map([("a", 1)]) == {}
    assert jv.opt_mapping([1]) is None
    assert jv.opt_mapping({"a": 1}) == {"a": 1}


# ---------------------------------------------------------------------------- bounded reading


def test_loads_bounded_keeps_values_and_booleans() -> None:
    from nightly.jsonvalues import loads_bounded

    data = loads_bounded('{"a": [1, 2.5, true, false, null, "x"], "n": -9223372036854775808}')
    assert data == {"a": [1, 2.5, True, False, None, "x"], "n": -(1 << 63)}
    assert isinstance(data, dict)
    assert data["a"][2] is True
    assert data["a"][3] is False


@pytest.mark.parametrize(("text", "why"), [
    ("[" * 100_000 + "]" * 100_000, "nested deeper than 64 levels"),
    ("[" * 65 + "]" * 65, "nested deeper than 64 levels"),
    ('{"a": 9223372036854775808}', "integer out of range"),
    ('{"a": ' + "9" * 5000 + "}", "integer out of range"),
    ('{"a": 1e999}', "number out of range"),
    ('{"a": NaN}', "NaN is not JSON"),
    ('{"a": -Infinity}', "-Infinity is not JSON"),
    ("{ not json", "not JSON"),
])
def test_loads_bounded_refuses_what_nightly_never_writes(text: str, why: str) -> None:
    from nightly.jsonvalues import JSONInputError, loads_bounded

    with pytest.raises(JSONInputError, match=why):
        loads_bounded(text)


def test_loads_bounded_takes_its_own_depth() -> None:
    from nightly.jsonvalues import loads_bounded

    assert loads_bounded("[" * 64 + "]" * 64) is not None


def test_read_json_file_never_waits_on_a_fifo_nor_follows_a_link(tmp_path: Path) -> None:
    from nightly.jsonvalues import JSONInputError, read_json_file

    good = tmp_path / "good.json"
    good.write_text('{"x": 1}')
    assert read_json_file(good, 100) == {"x": 1}
    with pytest.raises(JSONInputError, match="larger than 5 bytes"):
        read_json_file(good, 5)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(JSONInputError, match="a FIFO"):
        read_json_file(fifo, 100)  # no writer: a blocking open would wait forever
    link = tmp_path / "link.json"
    link.symlink_to(good)
    with pytest.raises(JSONInputError, match="symbolic link"):
        read_json_file(link, 100)
    with pytest.raises(JSONInputError, match="a folder"):
        read_json_file(tmp_path, 100)
    with pytest.raises(FileNotFoundError):
        read_json_file(tmp_path / "missing.json", 100)


# ---------------------------------------------------------------------------- the one reader


def test_read_json_object_is_lenient_and_bounded(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text('{"ok": true, "n": 3}')
    assert jv.read_json_object(good) == {"ok": True, "n": 3}
    assert jv.read_json_object(good)["ok"] is True
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "big.json").write_text('{"x": "' + "a" * 200 + '"}')
    os.symlink(good, tmp_path / "link.json")
    for name in ("list.json", "bad.json", "missing.json", "link.json"):
        assert jv.read_json_object(tmp_path / name) == {}, name
    assert jv.read_json_object(tmp_path / "big.json", 100) == {}
    assert jv.json_object(b'{"a": false}') == {"a": False}
    assert jv.json_object(b"[]") is None
    assert jv.json_object(b'{"a": 1e999}') is None  # out of range: never infinity


def test_true_stays_true_through_state_json(tmp_path: Path) -> None:
    """A boolean in state.json stays a boolean and is never read as the number 1: an
    `exit_status`, `attempts` or `queue` written as `true` reads as unset (the old reader
    took `true` as 1 through int()), and `infra` is set only by a JSON boolean (the text
    "false" was True through bool())."""
    import json

    from nightly.workspace.state import State

    path = tmp_path / "state.json"
    path.write_text(json.dumps({"builds": {
        "a": {"status": "failed", "infra": True, "exit_status": True, "attempts": True,
              "queue": True, "started": True, "tested": {"ok": True},
              "packages": [{"name": "p.whl", "path": "p", "size": True, "sha256": "x"}]},
        "b": {"status": "failed", "infra": "false", "exit_status": 2, "attempts": 3},
    }, "meta": {}}))
    state = State(path)
    a, b = state.get("a"), state.get("b")
    assert a.infra is True
    assert a.exit_status is None
    assert a.queue is None
    assert a.started is None
    assert a.attempts == 0
    assert a.tested is not None
    assert a.tested.to_json()["ok"] is True  # an unknown key, kept as it was
    assert a.packages[0].size == 0
    assert b.infra is False
    assert b.exit_status == 2
    assert b.attempts == 3
    state.update("a", reason="x")  # written back: the boolean is still a boolean
    assert json.loads(path.read_text())["builds"]["a"]["infra"] is True
    assert json.loads(path.read_text())["builds"]["a"]["tested"]["ok"] is True
