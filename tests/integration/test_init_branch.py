"""`nightly init` of a git folder records the branch it has checked out (issue 50, point 4):
a folder on `master` (git's default without configuration) builds on the first `nightly
run`, and a branch the source does not have is one line naming the branches it has (exit 2).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.day import find_day
from tests.support.fixture_types import RunCli

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "tinymaster"
version = "0.3.0"
requires-python = ">=3.8"
"""


def _git_project(base: Path) -> Path:
    proj = base / "proj"
    (proj / "tinymaster").mkdir(parents=True)
    (proj / "pyproject.toml").write_text(PYPROJECT)
    (proj / "tinymaster" / "__init__.py").write_text("")
    git = ["git", "-c", "init.defaultBranch=master", "-c", "user.name=t", "-c", "user.email=t@e"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "one"], ["branch", "dev"]):
        subprocess.run([*git, *args], cwd=proj, check=True, capture_output=True)
    return proj


def test_init_and_run_of_a_git_folder_on_master(tmp_path: Path, run_cli: RunCli) -> None:
    _git_project(tmp_path)
    code, out, err = run_cli(["init", "proj"], cwd=tmp_path)
    assert code == 0, (out, err)
    text = (tmp_path / "nightly.toml").read_text()
    assert 'branch = "master"' in text, text
    mirror = (tmp_path / "mirror").as_uri()
    assert f"--index-url {mirror}/whl/nightly/cpu/" in out, out
    assert "YYYYMMDD" not in out, out
    code, out, err = run_cli(["run"], cwd=tmp_path, timeout=600)
    assert code == 0, (out, err)
    day = find_day(tmp_path / "nightlies")
    assert "(master, last commit before" in day.state_path.read_text()
    assert "install tonight's tinymaster" in out


def test_a_branch_the_source_lacks_is_one_line_naming_its_branches(tmp_path: Path, run_cli: RunCli) -> None:
    _git_project(tmp_path)
    code, out, err = run_cli(["init", "proj"], cwd=tmp_path)
    assert code == 0, (out, err)
    config = tmp_path / "nightly.toml"
    config.write_text(config.read_text().replace('branch = "master"', 'branch = "main"'))
    code, out, err = run_cli(["run"], cwd=tmp_path)
    assert code == 2, (out, err)
    line = err.strip()
    assert "\n" not in line, err
    assert "Traceback" not in err, err
    assert 'branch = "main"' in line, line
    assert "(its branches: dev, master)" in line, line
