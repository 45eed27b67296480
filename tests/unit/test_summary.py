"""summary.py: the night's summary.json refreshed after a later command, one-off marks."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from nightly.workspace import Day, State, summary, write_json

DATE = dt.date(2024, 5, 1)


def night(tmp_path: Path) -> tuple[Day, State]:
    day = Day(tmp_path, DATE)
    day.create()
    state = State(day.state_path)
    pkgs = {b: [{"name": f"{b}.whl", "path": f"packages/x/cpu/{b}.whl", "size": 1, "sha256": "00"}]
            for b in ("a", "b")}
    for bid in ("a", "b"):
        state.update(bid, status="succeeded", packages=pkgs[bid])
    state.update("b", upload_error="file:///m/whl/b.whl: disk full")
    state.set_meta(publish_error="file:///m/whl/b.whl: disk full")
    write_json(day.summary_path, {
        "date": day.name, "started": "2024-05-01T01:00:00", "counts": {"total": 2, "succeeded": 2},
        "builds": {b: {"outcome": "succeeded", "packages": pkgs[b], "published": {}} for b in ("a", "b")},
        "failed_uploads": ["b"], "publish_error": "file:///m/whl/b.whl: disk full", "exit_code": 1,
    })
    return day, state


def test_refresh_updates_publication_and_keeps_the_nights_record(tmp_path: Path) -> None:
    day, state = night(tmp_path)
    state.update("b", upload_error=None, published={"file:///m/whl/b.whl": "00"})
    state.set_meta(publish_error=None)
    state.update("c", status="failed", manual={"by": "bob", "at": "2024-05-01T15:00:00+00:00",
                                                "command": "nightly build x"})
    refreshed = summary.refresh(day, state, by="nightly upload")
    assert refreshed is not None
    new: dict[str, Any] = refreshed.to_json()
    on_disk = json.loads(day.summary_path.read_text())
    assert on_disk == new
    assert new["failed_uploads"] == []
    assert new["publish_error"] is None
    assert new["exit_code"] == 0
    assert new["builds"]["b"]["published"] == {"file:///m/whl/b.whl": "00"}
    assert sorted(new["builds"]) == ["a", "b"]  # the one-off build is not one of the night's
    # The night's counts stay; of the succeeded, how many are published now is refreshed.
    assert new["counts"] == {"total": 2, "succeeded": 2, "published": 1, "not_published": 0}
    assert new["builds"]["b"]["publication"] == "published"
    assert new["started"] == "2024-05-01T01:00:00"
    assert new["manual"] == [{"id": "c", "outcome": "failed", "by": "bob", "at": "2024-05-01T15:00:00+00:00",
                              "command": "nightly build x"}]
    assert new["updated"]["by"] == "nightly upload"


def test_a_night_build_rebuilt_by_hand_keeps_its_night_record(tmp_path: Path) -> None:
    day, state = night(tmp_path)
    rebuilt = [{"name": "b2.whl", "path": "packages/x/cpu/b2.whl", "size": 1, "sha256": "11"}]
    state.update("b", manual={"by": "bob", "at": "x", "command": "nightly build"},
                 packages=rebuilt, published={"file:///m/whl/b2.whl": "11"})
    refreshed = summary.refresh(day, state, by="nightly build")
    assert refreshed is not None
    new: dict[str, Any] = refreshed.to_json()
    assert new["builds"]["b"]["published"] == {}  # the night's b was never published
    assert new["failed_uploads"] == []  # b's upload error, if any, is the one-off build's now
    assert [m["id"] for m in new["manual"]] == ["b"]


def test_a_summary_of_another_version_keeps_what_this_one_does_not_know(tmp_path: Path) -> None:
    """summary.json read and rewritten by this version keeps the keys it does not know
    (written by a later version, or by an earlier one), at the top and per build."""
    day, state = night(tmp_path)
    data = json.loads(day.summary_path.read_text())
    data["from_the_future"] = {"x": 1}
    data["builds"]["a"]["gpu_test"] = "passed"
    write_json(day.summary_path, data)
    again = summary.read_summary(day.summary_path)
    assert again is not None
    assert again.extra == {"from_the_future": {"x": 1}}
    assert again.builds["a"].extra == {"gpu_test": "passed"}
    refreshed = summary.refresh(day, state, by="nightly upload")
    assert refreshed is not None
    on_disk = json.loads(day.summary_path.read_text())
    assert on_disk["from_the_future"] == {"x": 1}
    assert on_disk["builds"]["a"]["gpu_test"] == "passed"
    assert summary.Summary.from_json(on_disk).to_json() == on_disk


def test_no_night_no_summary(tmp_path: Path) -> None:
    day = Day(tmp_path, DATE)
    day.create()
    assert summary.refresh(day, State(day.state_path), by="nightly upload") is None
    assert not day.summary_path.exists()


def test_who_is_user_else_the_login_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("USER", "alice")
    assert summary.who() == "alice"
    monkeypatch.delenv("USER")
    monkeypatch.setenv("LOGNAME", "bob")
    assert summary.who() == "bob"


def test_manual_summaries_never_overwrite_each_other(tmp_path: Path) -> None:
    day = Day(tmp_path, DATE)
    day.create()
    at = dt.datetime(2024, 5, 1, 14, 2, 3).timestamp()
    first = summary.manual_summary_path(day, at)
    assert first.name == "manual-20240501T140203.json"
    first.write_text("{}")
    assert summary.manual_summary_path(day, at).name == "manual-20240501T140203-2.json"


def test_package_destinations_match_by_file_name() -> None:
    s = {"builds": {"x": {"packages": [{"name": "p.whl", "path": "packages/m/cpu/p.whl"},
                                       {"name": "q.whl", "path": "packages/m/cpu/q.whl"}],
                          "published": {"s3://b/whl/nightly/cpu/p.whl": "00", "anaconda:u/l/p.whl": "00"}}}}
    assert summary.package_destinations(summary.Summary.from_json(s)) == [
        ("x", "p.whl", "packages/m/cpu/p.whl", ["anaconda:u/l/p.whl", "s3://b/whl/nightly/cpu/p.whl"]),
        ("x", "q.whl", "packages/m/cpu/q.whl", []),
    ]
