"""state.json's meta read as DayMeta: typed fields, the stored object kept as written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nightly.workspace import DayMeta, State


def test_fields_are_typed_and_every_key_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"builds": {}, "meta": {
        "commit": "abc", "channel": "test", "gpu_workers": ["tcp://g:1"], "from_later": {"x": 1},
        "version": 7, "held_back": None}}))
    state = State(path)
    meta = state.meta
    assert (meta.commit, meta.channel, meta.channel_name) == ("abc", "test", "test")
    assert meta.version == "7"  # a number where text belongs reads as its text
    assert meta.gpu_workers == ("tcp://g:1",)
    assert meta.held_back == {}  # recorded as none held, not "never recorded"
    assert meta["from_later"] == {"x": 1}
    state.set_meta(publish_error="disk full")
    stored = json.loads(path.read_text())["meta"]
    assert stored["from_later"] == {"x": 1}  # a key of another version survives a write
    assert stored["held_back"] is None
    assert State(path).meta.publish_error == "disk full"


def test_defaults_and_wrong_types_read_as_unset() -> None:
    meta = DayMeta.from_json({"channel": "", "gpu_workers": "tcp://g:1", "source": ["x"]})
    assert meta.channel_name == "nightly"
    assert meta.gpu_workers == ()
    assert meta.source == ""
    assert meta.held_back is None  # never recorded
    assert meta.publish_error is None


def test_an_unknown_field_is_refused(tmp_path: Path) -> None:
    state = State(tmp_path / "state.json")
    with pytest.raises(TypeError, match="publish_eror"):
        state.set_meta(publish_eror="x")
