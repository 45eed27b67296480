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
