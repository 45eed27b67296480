"""Inputs that are not the night's own, through the `nightly` command (issue 39): a project's
pyproject.toml of the wrong shape (row 8), a corrupt history database (row 9), and paths
recorded in state.json that lead out of the day folder.

- A pyproject.toml that is not what PEP 517/621 say: `nightly plan` and `nightly init` stop
  with one line naming the file and the key (exit 2); `nightly run` fails each build with
  that line as its reason and still writes the summary and the report, and notifies.
- A history.sqlite that is garbage or truncated is kept aside as history.sqlite.bad-<time>
  with a warning; status, report and run work, and the night's builds run and are recorded.
- state.json's `log` naming `../../secret.txt` or an absolute path: status and report show
  the build's own log, never that file, and never a traceback.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.support.projects import run_args

MATRIX = '[matrix.linux.manywheel]\npythons = ["3.8", "3.9"]\ncudas = ["cpu"]\n'
BUILDS = ("manywheel_3.8_cpu", "manywheel_3.9_cpu")

# (pyproject.toml bytes, what the one line names)
BAD_PYPROJECTS = {
    "build-system-string": (b'build-system = "x"\n', "build-system"),
    "tool-int": (b"tool = 5\n", "tool"),
    "dynamic-int": (b'[project]\nname = "demo"\ndynamic = 5\n', "project.dynamic"),
    "hatch-int": (b"[tool]\nhatch = 5\n", "tool.hatch"),
    "requires-strings": (b"[build-system]\nrequires = [1, 2]\n", "build-system.requires"),
    "deep-array": (b"a = " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested too deeply"),
    "not-utf8": (b'[project]\nname = "\xff\xfe"\n', "not UTF-8"),
    "not-toml": (b"[project\nname = \n", "not TOML"),
}


def _one_line(code: int, err: str, expect: int = 2) -> str:
    assert code == expect, err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("case", sorted(BAD_PYPROJECTS))
def test_a_bad_pyproject_stops_plan_and_init_with_one_line(
    case: str, night_project: Any, run_cli: Any, tmp_path: Path
) -> None:
    text, key = BAD_PYPROJECTS[case]
    p = night_project(matrix=MATRIX)
    pyproject = p.path / "src" / "pyproject.toml"
    pyproject.write_bytes(text)
    line = _one_line(*run_cli(run_args(p.config, command="plan"))[::2])
    assert str(pyproject) in line, line
    assert key in line, line
    config = tmp_path / "init.toml"
    line = _one_line(*run_cli(["init", str(p.path / "src"), "--config", str(config)])[::2])
    assert key in line, line
    assert not config.exists()


@pytest.mark.parametrize("case", ["build-system-string", "deep-array", "not-utf8"])
def test_a_bad_pyproject_fails_the_builds_and_the_night_still_reports_and_notifies(
    case: str, night_project: Any, run_cli: Any, tmp_path: Path
) -> None:
    text, key = BAD_PYPROJECTS[case]
    notified = tmp_path / "notified.json"
    script = tmp_path / "notify.sh"
    script.write_text(f'#!/bin/sh\ncat > "{notified}"\n')
    script.chmod(0o755)
    # The wheelhouse (prepared before any build, from the same pyproject.toml) is skipped.
    p = night_project(matrix=MATRIX, extra=f'[notify]\ncommand = "{script}"\n'
                                           '[build]\nwheelhouse = true\n')
    (p.path / "src" / "pyproject.toml").write_bytes(text)
    code, out, err = run_cli(run_args(p.config))
    assert code == 1, (out, err)
    assert "Traceback" not in out + err
    summary = p.summary()
    for bid in BUILDS:
        reason = summary["builds"][bid]["reason"]
        assert "pyproject.toml" in reason, reason
        assert key in reason, reason
        assert p.starts(bid) == 0  # failed before its recipe ran
    assert (p.day / "report.html").is_file()
    assert "wheelhouse: not prepared: " in (p.day / "logs" / "master" / "run.log").read_text()
    assert json.loads(notified.read_text())["builds"].keys() >= set(BUILDS)


# ---------------------------------------------------------------------------- row 9


def _history(p: Any) -> Path:
    return Path(p.path) / "nightlies" / "history.sqlite"


def _recorded(history: Path) -> set[str]:
    with sqlite3.connect(history) as conn:
        return {r[0] for r in conn.execute("SELECT build_id FROM builds")}


def _damage(history: Path, how: str) -> bytes:
    if how == "garbage":
        history.write_bytes(b"this is not a database\n" * 500)
    else:  # a real history with many rows, cut in half
        conn = sqlite3.connect(history)
        with conn:
            conn.execute("CREATE TABLE IF NOT EXISTS filler (x TEXT)")
            conn.executemany("INSERT INTO filler VALUES (?)", [("x" * 500,)] * 2000)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        data = history.read_bytes()
        history.write_bytes(data[: len(data) // 2])
    return history.read_bytes()


def _kept(history: Path) -> list[Path]:
    return sorted(history.parent.glob("history.sqlite.bad-*[0-9]"))


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_corrupt_history_is_kept_aside_and_costs_no_build(
    damage: str, night_project: Any, run_cli: Any
) -> None:
    p = night_project(matrix=MATRIX)
    code, out, err = run_cli(run_args(p.config))
    assert code == 0, (out, err)
    history = _history(p)
    before = _damage(history, damage)
    code, out, err = run_cli(run_args(p.config, command="status"))
    assert code == 0, (out, err)
    assert "kept as history.sqlite.bad-" in err
    assert "Traceback" not in out + err
    code, out, err = run_cli(run_args(p.config, command="report"))
    assert code == 0, (out, err)
    assert "Traceback" not in out + err
    assert [k.read_bytes() for k in _kept(history)] == [before]  # kept as it was
    # Broken again before the next night: the night runs, records, reports.
    before = _damage(history, damage)
    code, out, err = run_cli(["run", "--config", str(p.config), "--date", "2024_05_02"])
    assert code == 0, (out, err)
    assert "Traceback" not in out + err
    assert "kept as history.sqlite.bad-" in err
    assert before in [k.read_bytes() for k in _kept(history)]
    assert all(p.delivered(bid) == 2 for bid in BUILDS)
    assert _recorded(history) == set(BUILDS)  # the night is in the fresh history
    assert (p.path / "nightlies" / "2024_05_02" / "report.html").is_file()


# ---------------------------------------------------------------------------- log paths


@pytest.mark.parametrize("where", ["relative", "absolute"])
def test_a_log_path_in_state_json_never_leaves_the_day_folder(
    where: str, night_project: Any, run_cli: Any, tmp_path: Path
) -> None:
    p = night_project(matrix=MATRIX, behaviours={BUILDS[0]: "fail"})
    code, out, err = run_cli(run_args(p.config))
    assert code == 1, (out, err)
    secret = p.path / "secret.txt"
    secret.write_text("TOP-SECRET-LINE-7f3a\n")
    state_path = p.day / "state.json"
    state = json.loads(state_path.read_text())
    recorded = "../../secret.txt" if where == "relative" else str(secret)
    assert (p.day / recorded).resolve() == secret.resolve()
    for bid in BUILDS:
        state["builds"][bid]["log"] = recorded
    state_path.write_text(json.dumps(state))
    code, out, err = run_cli(run_args(p.config, "--tail", "20", command="status"))
    assert code in (0, 1), (out, err)
    assert "Traceback" not in out + err
    assert "TOP-SECRET" not in out + err
    assert "error: the compiler failed" in out  # the build's own log, found where it is
    report = tmp_path / "r.html"
    code, out, err = run_cli(run_args(p.config, "--out", str(report), command="report"))
    assert code == 0, (out, err)
    assert "Traceback" not in out + err
    assert "TOP-SECRET" not in report.read_text()
    assert "error: the compiler failed" in report.read_text()
