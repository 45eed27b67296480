"""Every way to run a build, as root with `[executor.local] user` and nightly installed the
README's way (a venv in root's 0700 home): the night, a one-off `nightly build`, its
`--check-reproducible`, a release candidate and its promotion, and `nightly bisect`. Each
build runs as the build user in its build area (nightly/builds/area/userarea.py, set up by the
one build session: nightly/builds/session/build_session.py), with nightly's Python and the tools it runs
(auditwheel, patchelf) staged there (nightly/builds/area/toolstage.py), and succeeds.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import pwd
import re
import stat
import subprocess
from pathlib import Path

import pytest

from nightly.reach import Account, denied
from nightly.workspace import Day
from nightly.workspace.candidate import candidate_name
from tests.support.accounts import PY, interpreter_in_home, user_project_config, venv_in_home
from tests.support.cluster import DaskCluster
from tests.support.staged import staged_nightly
from tests.support.wheelrecipe import wheel_step

pytestmark = pytest.mark.slow

BUILD = f"manywheel_{PY}_cpu"

# Compiles through $CC, says which nightly Python and auditwheel it was given (and that it can
# run them), and packs a pure wheel with fixed timestamps (the reproducibility check).
RECIPE = r"""#!/usr/bin/env bash
set -euo pipefail
echo "recipe as uid $(id -u)"
echo "work dir: $WORK_DIR"
echo "nightly python: $NIGHTLY_PYTHON"
"$NIGHTLY_PYTHON" -c "import auditwheel; print('nightly python imports auditwheel')"
echo "auditwheel: $(command -v auditwheel)"
auditwheel --version
echo "patchelf: $(command -v patchelf) $(patchelf --version)"
mkdir -p "$WORK_DIR/b" "$OUTPUT_DIR"
cd "$WORK_DIR/b"
for f in "$SOURCE_DIR"/*.c; do b="$(basename "$f" .c)"; ${CC:-cc} -O1 -c "$f" -o "$b.o"; done
""" + wheel_step(dist="userdemo")


def _project(home: Path, user: str, *, extra: str = "") -> Path:
    """The project under the home; `user` "": no build user in its configuration."""
    project = home / "project"
    (project / "src").mkdir(parents=True)
    for i in range(2):
        (project / "src" / f"f{i}.c").write_text(f"int f{i}(int x) {{ return x * {i + 2}; }}\n")
    _git(home, "init", "-q", "-b", "main")
    _git(home, "add", "-A")
    _git(home, "commit", "-qm", "good")
    recipe = project / "recipes" / "manywheel" / "build.sh"
    recipe.parent.mkdir(parents=True)
    recipe.write_text(RECIPE)
    return user_project_config(project, name="userdemo", user=user, base_version="0.3.0",
                               extra=f'[publish]\nurl = "file://{home / "mirror"}"\n{extra}')


def _git(home: Path, *args: str, when: str = "2024-04-30T12:00:00+0000") -> str:
    """git in the project's source; a commit made at `when` (a night builds the commits
    made before its day ends)."""
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_AUTHOR_DATE": when,
           "GIT_COMMITTER_DATE": when}
    return subprocess.run(["git", "-C", str(home / "project" / "src"), *args], env=env,
                          check=True, capture_output=True, text=True).stdout.strip()


def _built(day: Path, account: pwd.struct_passwd, what: str) -> str:
    """The build's log, once its state says it succeeded as the account, with the staged tools."""
    entry = json.loads((day / "state.json").read_text())["builds"][BUILD]
    log = (day / entry["log"]).read_text() if entry.get("log") else ""
    assert entry["status"] == "succeeded", (what, entry, log[-3000:])
    area = f"/var/tmp/nightly-{account.pw_name}/python/"
    assert f"recipe as uid {account.pw_uid}\n" in log, (what, log)
    assert f"nightly python: {area}" in log, (what, log)
    assert "nightly python imports auditwheel" in log, (what, log)
    assert f"auditwheel: {area}" in log, (what, log)
    assert f"patchelf: {area}" in log, (what, log)
    return log


def test_every_caller_builds_as_the_build_user_from_a_venv_in_a_private_home(
    account: pwd.struct_passwd, home: Path
) -> None:
    with staged_nightly(extras=("manylinux",), parent=home) as st:
        python = venv_in_home(home, st)
        config = _project(home, account.pw_name)
        env = {"HOME": str(home), "PATH": f"{python.parent}:{st.bin}:/usr/bin:/bin",
               "LANG": "C.UTF-8"}

        def nightly(*args: str) -> subprocess.CompletedProcess[str]:
            proc = subprocess.run([str(python), "-m", "nightly", *args, "--config", str(config)],
                                  env=env, capture_output=True, text=True, timeout=600,
                                  cwd=home, check=False)
            logs = "".join(f.read_text(errors="replace")[-6000:]
                           for f in (home / "project" / "nightlies").rglob("*.log"))
            assert proc.returncode == 0, (args, proc.stdout[-3000:], proc.stderr[-3000:], logs)
            return proc

        roots = home / "project" / "nightlies"
        nightly("run", "--date", "2024_05_01")
        _built(roots / "2024_05_01", account, "the night")

        nightly("build", "manywheel", PY, "cpu", "--date", "2024_05_02", "--no-upload")
        _built(roots / "2024_05_02", account, "a one-off build")

        nightly("build", "manywheel", PY, "cpu", "--date", "2024_05_03", "--no-upload",
                "--check-reproducible")
        log = _built(roots / "2024_05_03", account, "--check-reproducible")
        assert "reproducibility check: second build in" in log, log
        assert ": identical (sha256" in log, log

        nightly("release", "0.3.0", "--rc", "1", "--date", "2024_05_04")
        rc = Day(roots, dt.date(2024, 5, 4), name=candidate_name("0.3.0", 1))
        _built(rc.path, account, "the release candidate")
        nightly("promote", "0.3.0", "--rc", "1", "--date", "2024_05_04")
        promoted = list((home / "mirror").rglob("userdemo-0.3.0-py3-none-any.whl"))
        assert len(promoted) >= 2, promoted  # the test channel's and the release's

        # bisect: after the good nights, a commit that breaks the build; each step is built
        # by the build user in its build area.
        good = _git(home, "rev-parse", "HEAD")
        (home / "project" / "src" / "broken.c").write_text("int broken( {\n")
        _git(home, "add", "-A")
        _git(home, "commit", "-qm", "break", when="2024-05-06T06:00:00+0000")
        bad = _git(home, "rev-parse", "HEAD")
        (home / "project" / "src" / "f9.c").write_text("int f9;\n")
        _git(home, "add", "-A")
        _git(home, "commit", "-qm", "later", when="2024-05-06T07:00:00+0000")
        night = subprocess.run([str(python), "-m", "nightly", "run", "--date", "2024_05_06",
                                "--no-upload", "--config", str(config)], env=env,
                               capture_output=True, text=True, timeout=600, cwd=home, check=False)
        assert night.returncode == 1, (night.stdout[-3000:], night.stderr[-3000:])
        nightly("bisect", BUILD, "--date", "2024_05_06")
        folder = roots / "2024_05_06" / "bisect" / BUILD
        result = json.loads((folder / "result.json").read_text())
        assert result["first_bad"] == bad, result
        assert good != bad
        steps = list(folder.rglob(f"{BUILD}.log"))  # the bad commit's step, at least
        assert any(bad in p.parts for p in steps), steps
        for step in steps:
            log = step.read_text()
            assert f"recipe as uid {account.pw_uid}\n" in log, log
            assert f"nightly python: /var/tmp/nightly-{account.pw_name}/python/" in log, log

    # Nothing of root's was opened up to the build user.
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert denied(python, Account.of(account.pw_name), "x") is not None
    staged = Path(f"/var/tmp/nightly-{account.pw_name}/python")
    assert all(p.lstat().st_uid == 0 for p in staged.rglob("*")), "a staged file is the user's"
    assert not any(os.lstat(p).st_mode & 0o022 for p in staged.rglob("*") if not p.is_symlink())


def test_a_venv_made_from_an_interpreter_in_a_private_home_builds_as_the_build_user(
    account: pwd.struct_passwd, home: Path
) -> None:
    """nightly's venv made by `python3 -m venv` from an interpreter inside root's 0700 home
    (pyenv's, on this machine image): the staged tools' venv links to an interpreter of the
    same version the build user can run, so a night, a release candidate and its promotion
    build and repair as the account."""
    with staged_nightly(extras=("manylinux",), parent=home) as st:
        base = interpreter_in_home(home, st)
        python = venv_in_home(home, st, base)
        assert (home / "venv" / "pyvenv.cfg").read_text().count(str(base.parent)) >= 1
        who = Account.of(account.pw_name)
        assert denied(base, who, "x") is not None  # the case of issue 56, point 6
        config = _project(home, account.pw_name)
        env = {"HOME": str(home), "PATH": f"{python.parent}:{st.bin}:/usr/bin:/bin",
               "LANG": "C.UTF-8"}

        def nightly(*args: str) -> None:
            proc = subprocess.run([str(python), "-m", "nightly", *args, "--config", str(config)],
                                  env=env, capture_output=True, text=True, timeout=600,
                                  cwd=home, check=False)
            logs = "".join(f.read_text(errors="replace")[-6000:]
                           for f in (home / "project" / "nightlies").rglob("*.log"))
            assert proc.returncode == 0, (args, proc.stdout[-3000:], proc.stderr[-3000:], logs)

        roots = home / "project" / "nightlies"
        nightly("run", "--date", "2024_05_01")
        log = _built(roots / "2024_05_01", account, "the night")
        assert "bad interpreter" not in log, log
        nightly("release", "0.3.0", "--rc", "1", "--date", "2024_05_04")
        _built(Day(roots, dt.date(2024, 5, 4), name=candidate_name("0.3.0", 1)).path, account,
               "the release candidate")
        nightly("promote", "0.3.0", "--rc", "1", "--date", "2024_05_04")
        promoted = list((home / "mirror").rglob("userdemo-0.3.0-py3-none-any.whl"))
        assert len(promoted) >= 2, promoted
    # The staged venv links to an interpreter the account runs, never into the home.
    staged = Path(f"/var/tmp/nightly-{account.pw_name}/python")
    links = [p for p in staged.glob("*/bin/python") if p.is_symlink()]
    assert links, list(staged.rglob("*"))
    for link in links:
        target = Path(os.readlink(link))
        assert not target.is_relative_to(home), target
        assert denied(target, who, "x") is None, target


def _work_dir(log: str) -> str:
    (line,) = [x for x in log.splitlines() if x.startswith("work dir: ")]
    return line.removeprefix("work dir: ")


def test_a_cluster_night_builds_as_the_worker_hosts_build_user_in_a_stable_folder(
    account: pwd.struct_passwd, home: Path
) -> None:
    """A real Dask cluster, its worker started by root with `nightly cluster worker` from the
    venv in the home: the worker host's file ($NIGHTLY_WORKER_CONFIG) names the build user,
    the night's configuration names none. Each night's build runs as the build user in its
    build area, in the same stable folder both nights (what makes compiler cache hits)."""
    with staged_nightly(extras=("manylinux", "cluster"), parent=home) as st:
        python = venv_in_home(home, st)
        env = {"HOME": str(home), "PATH": f"{python.parent}:{st.bin}:/usr/bin:/bin",
               "LANG": "C.UTF-8"}
        host_file = home / "worker.toml"
        host_file.write_text(f'[executor.local]\nuser = "{account.pw_name}"\n')
        (home / "hosts").mkdir()
        cluster = DaskCluster(home / "hosts", workers={"w": "slots=1,platform-linux=1"},
                              worker_command=[str(python), "-m", "nightly", "cluster"],
                              worker_env={**env, "NIGHTLY_WORKER_CONFIG": str(host_file)},
                              worker_cwd=home)
        config = _project(home, "", extra=f"""
[cluster]
address = "{cluster.address}"
staging = "staging"
log_flush = 0.2
worker_wait = "60s"
connect_timeout = "20s"
""")
        roots = home / "project" / "nightlies"
        cluster.start()
        try:
            work, hits = [], []
            for date in ("2024_05_01", "2024_05_02"):
                proc = subprocess.run(
                    [str(python), "-m", "nightly", "run", "--date", date, "--config", str(config)],
                    env=env, capture_output=True, text=True, timeout=600, cwd=home, check=False)
                worker_log = (home / "hosts" / "w.log").read_text(errors="replace")[-4000:]
                assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:], worker_log)
                day = roots / date
                log = _built(day, account, f"the cluster night {date}")
                entry = json.loads((day / "state.json").read_text())["builds"][BUILD]
                assert entry["worker_name"] == "w", entry
                (package,) = entry["packages"]
                assert (day / package["path"]).is_file(), package  # filed in the day
                work.append(_work_dir(log))
                hits.append(re.findall(r"compiler cache: (\d+) hits", log))
        finally:
            cluster.close()
    area = f"/var/tmp/nightly-{account.pw_name}/nights/"
    assert work[0].startswith(area), work  # in the build user's build area
    assert "/slots/0/.builds/work/" in work[0], work  # the worker slot's stable folder
    assert work[0] == work[1], work  # the same paths every night:
    assert hits == [["0"], ["2"]], hits  # the second night's two compiles are cache hits
