"""Publishing a day's packages (nightly.publish.upload) into a folder mirror: what goes, what
is recorded in state.json, what a rerun skips, what a failure leaves. No server involved."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import cast

import pytest

from nightly import config as cfg
from nightly.publish.upload import publish_day
from nightly.workspace import FAILED, SUCCEEDED, Day, PackageFile, State

WHEEL = "demo-1.0.0.dev20240501-py3-none-any.whl"


def _night(tmp_path: Path, text: str, url: str) -> tuple[cfg.Config, Day, State]:
    path = tmp_path / "nightly.toml"
    path.write_text(text + f'\n[publish]\nurl = "{url}"\n')
    config = cfg.load(path, root_override=str(tmp_path / "root"))
    day = Day(config.root, dt.date(2024, 5, 1))
    day.create()
    state = State(day.state_path)
    for bid, status, name in (("manywheel_3.7m_cpu", SUCCEEDED, WHEEL),
                              ("manywheel_3.6m_cpu", FAILED, "broken-1.0-py3-none-any.whl")):
        f = day.package_dir("manywheel", "cpu") / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(name.encode())
        pkg = PackageFile(name=name, path=str(f.relative_to(day.path)), size=f.stat().st_size,
                          sha256=hashlib.sha256(f.read_bytes()).hexdigest())
        state.update(bid, status=status, package="manywheel", python="3.7m", cuda="cpu",
                     packages=[pkg] if status == SUCCEEDED else [])
    return config, day, state


def test_succeeded_packages_are_published_once_and_recorded(tmp_path: Path, minimal_config_text: str) -> None:
    mirror = tmp_path / "mirror"
    config, day, state = _night(tmp_path, minimal_config_text, mirror.as_uri())
    lines: list[str] = []
    report = publish_day(config, day, state, channel="nightly", log=lines.append)
    dest = f"{mirror.as_uri()}/whl/nightly/cpu/{WHEEL}"
    assert report.ok
    assert report.uploaded == [dest]
    assert (mirror / "whl/nightly/cpu" / WHEEL).read_bytes() == WHEEL.encode()
    assert not (mirror / "whl/nightly/cpu/broken-1.0-py3-none-any.whl").exists()
    entry = State(day.state_path).get("manywheel_3.7m_cpu")
    assert dict(entry.published) == {dest: entry.packages[0].sha256}
    assert entry.upload_error is None
    assert (mirror / "whl/nightly/cpu/index.html").exists()  # the folder's index page
    again = publish_day(config, day, State(day.state_path), channel="nightly", log=lines.append)
    assert (again.uploaded, again.skipped) == ([], [dest])


def test_the_test_channel_goes_to_its_own_folder(tmp_path: Path, minimal_config_text: str) -> None:
    mirror = tmp_path / "mirror"
    config, day, state = _night(tmp_path, minimal_config_text, mirror.as_uri())
    publish_day(config, day, state, channel="test", log=lambda _: None)
    assert (mirror / "whl/test/cpu" / WHEEL).exists()
    assert not (mirror / "whl/nightly").exists()


def test_a_failed_upload_is_recorded_and_the_package_stays(tmp_path: Path, minimal_config_text: str) -> None:
    blocker = tmp_path / "mirror"
    config, day, state = _night(tmp_path, minimal_config_text, blocker.as_uri())
    (blocker / "whl/nightly").mkdir(parents=True)
    (blocker / "whl/nightly/cpu").write_text("a file where the folder should be")
    report = publish_day(config, day, state, channel="nightly", log=lambda _: None)
    assert not report.ok
    entry = State(day.state_path).get("manywheel_3.7m_cpu")
    assert entry.upload_error is not None
    assert WHEEL in entry.upload_error
    assert dict(entry.published) == {}
    assert (day.path / entry.packages[0].path).exists()


def test_store_update_is_compare_and_swap_and_loses_no_change(tmp_path: Path) -> None:
    """Store.update: a writer that lost the race reads again and merges, and one that cannot
    win within its rounds says so (one mechanism for every read-change-write of nightly)."""
    from nightly.errors import PublishError
    from nightly.stores import open_store

    store = open_store(tmp_path.as_uri())
    calls = []

    def add(item: str) -> Callable[[bytes | None], bytes | None]:
        def change(current: bytes | None) -> bytes | None:
            calls.append(item)
            items = set(json.loads(current)) if current else set()
            if item == "a" and len(calls) == 1:  # another writer slips in between
                store.put_bytes("k.json", json.dumps(["b"]).encode(), "application/json")
            if item in items:
                return None
            return json.dumps(sorted(items | {item})).encode()

        return change

    store.update("k.json", add("a"), "application/json", what="k.json")
    assert json.loads(store.get_bytes("k.json")[0]) == ["a", "b"]  # type: ignore[index]
    assert calls == ["a", "a"]  # the first round lost the race and was done again
    assert store.update("k.json", add("b"), "application/json", what="k.json") is not None

    def always_raced(current: bytes | None) -> bytes:
        calls.append("raced")  # someone else writes something new every time
        store.put_bytes("k.json", json.dumps([len(calls)]).encode(), "application/json")
        return b'["x"]'

    with pytest.raises(PublishError, match="kept changing during 3 rounds"):
        store.update("k.json", always_raced, "application/json", what="k.json", rounds=3)


def test_atomic_holds_back_by_folder_or_night_and_force_partial_publishes(
    tmp_path: Path, minimal_config_text: str
) -> None:
    from nightly.publish import gate

    mirror = tmp_path / "mirror"
    config, day, state = _night(tmp_path, minimal_config_text, mirror.as_uri())
    # Another folder's good build: "folder" lets it through, "night" does not.
    f = day.package_dir("manywheel", "cu126") / "demo-1.0+other-py3-none-any.whl"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(b"other")
    state.update("manywheel_3.7m_cu126", status=SUCCEEDED, package="manywheel", cuda="cu126",
                 packages=[PackageFile(name=f.name, path=str(f.relative_to(day.path)), size=5,
                                       sha256=hashlib.sha256(b"other").hexdigest())])
    assert gate.held_back("build", state, "nightly") == {}
    held = gate.held_back("folder", state, "nightly")
    assert list(held) == ["manywheel_3.7m_cpu"]
    assert "whl/nightly/cpu/ waits for manywheel_3.6m_cpu" in held["manywheel_3.7m_cpu"]
    assert sorted(gate.held_back("night", state, "nightly")) == [
        "manywheel_3.7m_cpu", "manywheel_3.7m_cu126"]

    night = replace(config, publish=replace(config.publish, atomic="night"))
    report = publish_day(night, day, state, channel="nightly", log=lambda _: None)
    assert report.uploaded == []
    assert len(report.held_back) == 2
    assert sorted(cast("dict[str, str]", state.meta["held_back"])) == [
        "manywheel_3.7m_cpu", "manywheel_3.7m_cu126"]
    report = publish_day(night, day, state, channel="nightly", log=lambda _: None,
                         force_partial=True)
    assert len(report.uploaded) == 2
    assert report.held_back == {}
    assert state.meta["held_back"] is None
    assert (mirror / "whl/nightly/cu126/demo-1.0+other-py3-none-any.whl").read_bytes() == b"other"
