"""Release candidates, the pure parts: names, versions, completeness, promotion records,
`nightly status` of a candidate."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from nightly import config as cfg
from nightly.errors import UsageError
from nightly.publish import promote
from nightly.workspace import FAILED, SUCCEEDED, Day, PackageFile, State
from nightly.workspace import candidate as rel


def test_candidate_folder_names() -> None:
    assert rel.candidate_name("2.1.0", None) == "release/2.1.0"
    assert rel.candidate_name("2.1.0", 3) == "release/2.1.0-rc3"


@pytest.mark.parametrize("version", ["2.1.0", "2.1.0rc1", "1!2.0", "2.1.0.post1"])
def test_release_versions_are_accepted(version: str) -> None:
    assert rel.check_version(version) == version


@pytest.mark.parametrize(("version", "why"), [("2.1.0.dev20240501", "development version"),
                                              ("two", "not a version"), ("", "not a version")])
def test_bad_release_versions_say_why(version: str, why: str) -> None:
    with pytest.raises(UsageError, match=why):
        rel.check_version(version)


def test_completeness_allows_only_the_listed_gaps(
    tmp_path: Path, minimal_config_text: str, minimal_ids: list[str]
) -> None:
    path = tmp_path / "nightly.toml"
    path.write_text(minimal_config_text)
    config = cfg.load(path)
    state = State(tmp_path / "state.json")
    pkg = PackageFile(name="a.whl", path="packages/a.whl", size=1, sha256="0" * 64)
    for bid in minimal_ids[:4]:
        state.update(bid, status=SUCCEEDED, packages=[pkg])
    state.update("conda_3.7_cpu", status=FAILED)
    state.update("conda_3.7_cu100", status=SUCCEEDED)  # but no package: not complete
    assert rel.completeness(config, state, ()) == ([], ["conda_3.7_cpu", "conda_3.7_cu100"])
    assert rel.completeness(config, state, ("conda_*_cpu",)) == (["conda_3.7_cpu"],
                                                                 ["conda_3.7_cu100"])


def test_promotions_are_recorded_per_destination_and_sha256(tmp_path: Path) -> None:
    state = State(tmp_path / "state.json")
    assert not promote._recorded(state, "b", "s3://x/whl/a.whl", "1" * 64)
    promote._record(state, "b", "s3://x/whl/a.whl", "1" * 64)
    again = State(tmp_path / "state.json")
    assert promote._recorded(again, "b", "s3://x/whl/a.whl", "1" * 64)
    assert not promote._recorded(again, "b", "s3://x/whl/a.whl", "2" * 64)  # another file


def test_pypi_destinations_never_carry_a_password() -> None:
    dest = promote._pypi_dest("https://user:s3cret@pypi.example/legacy/", "demo-2.1.0.whl")
    assert "s3cret" not in dest
    assert dest.endswith("pypi.example/legacy/demo-2.1.0.whl")


def test_status_shows_a_candidate_not_the_dated_night(
    tmp_path: Path, minimal_config_text: str, nightly: Any
) -> None:
    """`nightly status --release VERSION --rc N` reads the candidate's folder (exit 1: a
    build failed there); --rc alone, or a candidate never built, is one line and exit 2."""
    config = tmp_path / "nightly.toml"
    config.write_text(f'root = "{tmp_path / "root"}"\n' + minimal_config_text)
    day = Day(tmp_path / "root", dt.date.today(), name=rel.candidate_name("1.2.0", 1))
    day.create()
    state = State(day.state_path)
    state.update("manywheel_3.6m_cpu", status=SUCCEEDED, package="manywheel", python="3.6m",
                 cuda="cpu")
    state.update("conda_3.7_cpu", status=FAILED, package="conda", python="3.7", cuda="cpu")
    r = nightly("status", "--release", "1.2.0", "--rc", "1", "--config", str(config))
    assert r.code == 1, r.err
    assert "release/1.2.0-rc1" in r.out
    assert "conda_3.7_cpu" in r.out
    r = nightly("status", "--release", "1.2.0", "--rc", "2", "--config", str(config))
    assert r.code == 2
    assert "no release candidate release/1.2.0-rc2" in r.err
    assert "nightly release 1.2.0 --rc 2" in r.err
    r = nightly("status", "--rc", "1", "--config", str(config))
    assert r.code == 2
    assert "--release VERSION" in r.err


def test_the_promotion_report_lists_what_the_state_records_and_is_kept_when_unchanged(
    tmp_path: Path,
) -> None:
    from nightly.publish import promote_report as pr
    from nightly.stores import open_store

    day = Day(tmp_path / "root", dt.date.today(), name=rel.candidate_name("1.2.0", 1))
    day.create()
    state = State(day.state_path)
    state.add_promoted("manywheel_3.11_cpu", "file:///m/whl/cpu/demo-1.2.0-x.whl", "a" * 64)
    state.add_promoted("manywheel_3.11_cpu", "pypi:https://idx/demo-1.2.0-x.whl", "a" * 64)
    store = open_store(f"file://{tmp_path / 'mirror'}")
    record = pr.PromoteRecord(version="1.2.0", candidate="release/1.2.0-rc1", machine="m1",
                              when="2026-11-26T10:00:00", twine="uploaded 1 wheel(s)",
                              lines=("<script>",))
    said: list[str] = []
    pr.write_report(day, state, store, record, changed=True, log=said.append)
    page = tmp_path / "mirror" / "whl" / "reports" / "release_1.2.0_m1.html"
    text = page.read_text()
    assert text.count("a" * 64) == 2
    assert "release/1.2.0-rc1" in text
    assert "uploaded 1 wheel(s)" in text
    assert "<script>" not in text  # escaped
    assert (day.path / "promote.html").read_text() == text
    again = dataclasses.replace(record, when="2026-11-27T10:00:00")
    pr.write_report(day, state, store, again, changed=False, log=said.append)
    assert page.read_text() == text  # a promotion that changed nothing leaves it
    assert "unchanged" in said[-1]
