"""The stable build folder (ROOT/.builds, builds/slot.py; issue 48, point 4): through a real
night of a project whose source is a local git repository,

- the folder's source shares no inode with the original repository (its tree or its .git)
  nor with the day's copy: a build that writes a file in place reaches neither;
- the lock that keeps the folder for one night cannot be opened by another user, so no
  local user can hold it and push every later night out of the folder.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.integration.test_build_user import RECIPE
from tests.support.projects import local_machine

RunCli = Callable[..., tuple[int, str, str]]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
                        "GIT_AUTHOR_DATE": "2024-04-30T12:00:00", "GIT_COMMITTER_DATE":
                        "2024-04-30T12:00:00"})


def _inodes(top: Path) -> set[tuple[int, int]]:
    out = set()
    for root, _dirs, files in os.walk(top):
        for name in files:
            st = os.lstat(os.path.join(root, name))
            if stat.S_ISREG(st.st_mode):
                out.add((st.st_dev, st.st_ino))
    return out


def _night(tmp_path: Path, run_cli: RunCli) -> Path:
    """One night of a small git project built on the host; its nightlies root."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    for i in range(3):
        (repo / f"f{i}.c").write_text(f"int f{i}(int x) {{ return x * {i + 2}; }}\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "one")
    recipe = tmp_path / "recipes" / "manywheel" / "build.sh"
    recipe.parent.mkdir(parents=True)
    recipe.write_text(RECIPE.replace("@PROBES@", "").replace("$CC ", "${CC:-cc} "))
    config = tmp_path / "nightly.toml"
    config.write_text(f"""
root = "nightlies"
recipes = "recipes"

[project]
name = "userdemo"
source = "{repo}"
branch = "main"
base_version = "0.1.0"

[matrix.linux.manywheel]
pythons = ["3.11"]
cudas = ["cpu"]

{local_machine()}
[cache]
enabled = false
""")
    code, out, err = run_cli(["run", "--config", str(config), "--date", "2024_05_01",
                              "--no-upload"], cwd=tmp_path, timeout=600)
    assert code == 0, out + err
    return tmp_path / "nightlies"


def test_the_stable_folder_shares_no_inode_with_the_repository(
    tmp_path: Path, run_cli: RunCli
) -> None:
    nightlies = _night(tmp_path, run_cli)
    slot_source = nightlies / ".builds" / "source"
    assert (slot_source / ".git" / "objects").is_dir()
    assert (slot_source / "f0.c").is_file()
    original = _inodes(tmp_path / "repo")
    day = _inodes(nightlies / "2024_05_01" / "source")
    ours = _inodes(slot_source)
    assert ours, "the stable folder holds no source"
    assert not ours & original, "the stable folder shares files with the original repository"
    assert not ours & day, "the stable folder shares files with the day's source"
    assert not day & original, "the day's source shares files with the original repository"


def test_no_other_user_can_open_the_stable_folders_lock(
    tmp_path: Path, run_cli: RunCli
) -> None:
    nightlies = _night(tmp_path, run_cli)
    stable = nightlies / ".builds"
    locks = [Path(root, name) for root, dirs, files in os.walk(stable)
             for name in files if "source" not in Path(root).relative_to(stable).parts[:1]
             and "work" not in Path(root).relative_to(stable).parts[:1]]
    assert locks, "no lock file in the stable folder"
    for lock in locks:
        st = os.stat(lock)
        assert not st.st_mode & 0o077, f"{lock} is {stat.filemode(st.st_mode)}"
        assert not stat.S_IMODE(os.stat(lock.parent).st_mode) & 0o077, lock.parent
        if os.geteuid() == 0:  # a real try as another user: neither open nor flock
            tried = subprocess.run(
                ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
                 "flock", "-n", str(lock), "true"], capture_output=True, check=False)
            assert tried.returncode != 0, f"another user could hold {lock}"
