"""The lenient reading of JSON values (nightly.jsonvalues): wrong types read as unset."""

from __future__ import annotations

import math

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
