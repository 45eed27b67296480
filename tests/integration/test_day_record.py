"""The day's record after the night (issue 14 items 1 and 5): a one-off `nightly build` is
recorded as manual (state.json, its own summary, status, report) and leaves the night's
summary.json the night's; `nightly upload` brings summary.json's publication fields up to date.

Real `nightly` subprocesses (not on a terminal, as cron runs them) on the integration suite's
bash recipes, publishing to a file:// mirror.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from tests.support.projects import DATE, run_args
from tests.support.wheels import publish_toml, wheel_name, wheel_recipe

MATRIX = """
[matrix.linux.manywheel]
pythons = ["3.7m", "3.8"]
cudas = ["cpu"]
"""
NIGHT = ["manywheel_3.7m_cpu", "manywheel_3.8_cpu"]


def project(night_project: Any, tmp_path: Path, store: Path, behaviours: dict[str, str]) -> Any:
    signals = tmp_path / "p" / "signals"
    return night_project(
        matrix=MATRIX,
        recipes={"manywheel": wheel_recipe(signals, behaviours)},
        extra=publish_toml(store),
    )


def read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def test_a_one_off_build_is_manual_and_leaves_the_nights_summary(
    night_project: Any, run_cli: Any, tmp_path: Path
) -> None:
    store = tmp_path / "mirror"
    p = project(night_project, tmp_path, store, {"manywheel_3.8_cpu": "fail"})
    code, out, err = run_cli(run_args(p.config))
    assert code == 1, (out, err)
    night = p.summary()
    assert sorted(night["builds"]) == NIGHT
    # smoke tests are off here: the succeeded build is counted untested
    assert night["counts"] == {"total": 2, "succeeded": 1, "failed": 1, "interrupted": 0,
                               "untested": 1, "published": 1, "not_published": 0}

    # By hand: the night's failed build again (fails again) and one the night does not have.
    code, out, err = run_cli(
        ["build", "manywheel", "3.8,3.9", "cpu", "--config", str(p.config), "--date", DATE],
        env={"USER": "alice"},
    )
    assert code == 1, (out, err)
    assert "Traceback" not in err

    # 1. summary.json is still the night's: its builds, counts and times.
    after = p.summary()
    for key in ("builds", "counts", "started", "ended", "duration_s", "date", "machine"):
        if key == "builds":
            assert sorted(after["builds"]) == NIGHT
            assert after["builds"]["manywheel_3.8_cpu"]["outcome"] == "failed"
        else:
            assert after[key] == night[key], key
    assert {(m["id"], m["outcome"], m["by"]) for m in after["manual"]} == {
        ("manywheel_3.8_cpu", "failed", "alice"),
        ("manywheel_3.9_cpu", "succeeded", "alice"),
    }

    # 2. state.json: the one-off builds are marked manual (who, when, the command).
    state = p.state()["builds"]
    for bid in ("manywheel_3.8_cpu", "manywheel_3.9_cpu"):
        mark = state[bid]["manual"]
        assert mark["by"] == "alice"
        at = dt.datetime.fromisoformat(mark["at"])
        assert abs((dt.datetime.now(dt.timezone.utc) - at).total_seconds()) < 600
        assert "build manywheel 3.8,3.9 cpu" in mark["command"]
    assert not state["manywheel_3.7m_cpu"].get("manual")

    # 3. Its own summary, with the same fields, for its builds only.
    (own,) = sorted((p.day / "logs" / "master").glob("manual-*.json"))
    mine = read(own)
    assert sorted(mine["builds"]) == ["manywheel_3.8_cpu", "manywheel_3.9_cpu"]
    assert mine["counts"]["total"] == 2
    assert mine["manual"]["by"] == "alice"
    assert mine["exit_code"] == 1
    assert str(own) in out
    assert "2024_05_01 on machine m, one-off build by alice" in out

    # 4. It says where its packages went: published to the nightly channel of the mirror.
    wheel = wheel_name("manywheel_3.9_cpu", "cpu")
    published = store / "whl" / "nightly" / "cpu" / wheel
    assert published.is_file()
    assert "where the packages went" in out
    assert f"published: {store.as_uri()}/whl/nightly/cpu/{wheel}" in out

    # 5. status and the report show them as manual.
    code, out, err = run_cli(["status", "--config", str(p.config), "--date", DATE])
    lines = out.splitlines()
    for bid in ("manywheel_3.8_cpu", "manywheel_3.9_cpu"):
        assert any(bid in line and "manual build by alice" in line and "nightly build manywheel" in line
                   for line in lines), out
    assert not any("manywheel_3.7m_cpu" in line and "manual" in line for line in lines), out
    page = (p.day / "report.html").read_text()
    assert page.count('data-manual="alice"') == 2

    # A night that rebuilds a build makes it the night's again.
    code, out, err = run_cli(run_args(p.config, "--rebuild", "manywheel_3.8_cpu"))
    assert code == 1, (out, err)
    assert not p.state()["builds"]["manywheel_3.8_cpu"].get("manual")
    assert p.state()["builds"]["manywheel_3.9_cpu"]["manual"]["by"] == "alice"


def test_a_one_off_build_with_no_upload_publishes_nothing_and_says_so(
    night_project: Any, run_cli: Any, tmp_path: Path
) -> None:
    store = tmp_path / "mirror"
    p = project(night_project, tmp_path, store, {})
    code, out, err = run_cli(
        ["build", "manywheel", "3.9", "cpu", "--no-upload", "--config", str(p.config), "--date", DATE]
    )
    assert code == 0, (out, err)
    assert not (store / "whl").exists()
    assert "not published: --no-upload" in out
    wheel = wheel_name("manywheel_3.9_cpu", "cpu")
    assert str(p.day / "packages" / "manywheel" / "cpu" / wheel) in out
    # No night yet: no summary.json is made up for the day.
    assert not (p.day / "summary.json").exists()


def test_nightly_upload_brings_the_summary_up_to_date(
    night_project: Any, run_cli: Any, tmp_path: Path
) -> None:
    store = tmp_path / "mirror"
    (store / "whl").mkdir(parents=True)
    (store / "whl" / "nightly").write_text("not a folder: every upload into it fails\n")
    p = project(night_project, tmp_path, store, {})
    code, out, err = run_cli(run_args(p.config))
    assert code == 1, (out, err)
    before = p.summary()
    assert sorted(before["failed_uploads"]) == NIGHT
    assert before["exit_code"] == 1

    (store / "whl" / "nightly").unlink()
    code, out, err = run_cli(["upload", "--config", str(p.config), "--date", DATE])
    assert code == 0, (out, err)
    after = p.summary()
    assert after["failed_uploads"] == []
    assert not after["publish_error"]
    assert after["exit_code"] == 0
    assert after["updated"]["by"] == "nightly upload"
    for bid in NIGHT:
        (dest,) = after["builds"][bid]["published"]
        assert dest.endswith(wheel_name(bid, "cpu"))
    # The night's own record is unchanged but for what is published now (issue 48).
    assert before["counts"]["not_published"] == 2
    assert after["counts"] == {**before["counts"], "published": 2, "not_published": 0}
    assert {after["builds"][bid]["publication"] for bid in NIGHT} == {"published"}
    assert after["started"] == before["started"]
