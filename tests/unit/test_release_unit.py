"""Release candidates, the pure parts: names, versions, completeness, promotion records."""

from __future__ import annotations

from pathlib import Path

import pytest

from nightly import config as cfg
from nightly.errors import UsageError
from nightly.publish import promote
from nightly.workspace import FAILED, SUCCEEDED, PackageFile, State
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
