"""No process of a build outlives it, and the bytes tested are the bytes signed and published.
Root runs the night with `[executor.local] user` (a fresh account, as in test_build_user.py),
through the CLI:

- the project's build code starts a process in its own session (`setsid`) that holds the
  wheel open, waits until the smoke test is over and then rewrites the wheel: the published
  and signed bytes must be the ones tested, and the leftover is named and killed in the log;
- a process of the build account left running before the night is killed before the build
  starts, and named in its log;
- after a run killed with kill -9, the recorded process group's number held by an unrelated
  process started later is not killed by the next run's cleanup.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import re
import signal
import subprocess
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nightly.files import proc_stat
from tests.support.accounts import PY, nightly_as_root, root_env, user_project_config, world_writable_folder
from tests.support.staged import Staged, staged_nightly

DIST = "procdemo"

# Writes procdemo-<version>-py3-none-any.whl into OUTPUT_DIR (argv: folder, version, the
# text of procdemo/__init__.py's marker).
MAKE_WHEEL = r"""
import base64, hashlib, os, sys, time, zipfile
out, version, marker = sys.argv[1:4]
dist = "procdemo"
info = f"{dist}-{version}.dist-info"
files = {f"{dist}/__init__.py": f"__version__ = {version!r}\nMARK = {marker!r}\n".encode(),
         f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
         f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
record = [f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
          for n, d in files.items()] + [f"{info}/RECORD,,"]
files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
# Already in nightly's canonical form (nightly.builds.repro.reproducible.normalise_zip), so that
# nightly's normalising leaves the file (and its inode) as the build wrote it.
when = time.gmtime(max(int(os.environ["SOURCE_DATE_EPOCH"]), 315532800))[:6]
with zipfile.ZipFile(f"{out}/{dist}-{version}-py3-none-any.whl", "w") as z:
    for n, d in files.items():
        info = zipfile.ZipInfo(n, date_time=when)
        info.create_system = 3
        info.external_attr = 0o100644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(info, d, compresslevel=6)
"""

# The tamperer: holds the wheel open (fd 3, opened by the recipe before it ends), waits for
# the smoke test's folder to come and go, then rewrites the wheel through that fd and by
# its path, and says so in a file the test reads.
TAMPER = r"""
import glob, os, sys, time
whl, evil, folder, said = sys.argv[1:5]
data = open(evil, "rb").read()
open(os.path.join(folder, "tamper-ready"), "w").close()  # the recipe ends only after this
seen, end = False, time.time() + 300
while time.time() < end:
    if glob.glob(os.path.join(folder, "smoke-*")):
        seen = True
    elif seen:
        break
    time.sleep(0.005)
for _ in range(400):
    os.ftruncate(3, 0)
    os.pwrite(3, data, 0)
    try:
        with open(whl, "r+b") as f:
            f.truncate(0)
            f.write(data)
    except OSError:
        pass
    time.sleep(0.01)
open(said, "w").write("rewrote\n")
"""


def _project(home: Path, user: str, recipe: str, extra: str = "") -> Path:
    project = home / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "README").write_text("procdemo\n")
    path = project / "recipes" / "manywheel" / "build.sh"
    path.parent.mkdir(parents=True)
    path.write_text(recipe)
    (project / "recipes" / "make_wheel.py").write_text(MAKE_WHEEL)
    (project / "recipes" / "tamper.py").write_text(TAMPER)
    return user_project_config(project, name=DIST, user=user,
                               extra=f'[smoke]\nimport_name = "{DIST}"\n\n{extra}')


@pytest.fixture
def shared(home: Path) -> Iterator[Path]:
    """A folder the build user can write (outside root's 0700 home, and outside /tmp: a
    build's /tmp is its own, nightly.executors.box)."""
    with world_writable_folder("shared") as path:
        yield path


def _kill_account(uid: int) -> None:
    """Each process of the test's own account, by its pid (the test made the account)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    os.kill(int(entry.name), signal.SIGKILL)


def _log(day: Path, entry: dict[str, object]) -> str:
    return (day / str(entry["log"])).read_text()


def _entry(day: Path) -> dict[str, object]:
    builds = json.loads((day / "state.json").read_text())["builds"]
    entry: dict[str, object] = builds[f"manywheel_{PY}_cpu"]
    return entry


def _alive(pid: int) -> bool:
    return proc_stat(pid) is not None


@pytest.mark.slow
def test_a_setsid_process_cannot_change_the_wheel_after_its_smoke_test(
    account: pwd.struct_passwd, home: Path, shared: Path
) -> None:
    said = shared / "tamperer-said"
    recipe = f"""#!/usr/bin/env bash
set -euo pipefail
mkdir -p "$OUTPUT_DIR" "$WORK_DIR/evil"
here="$(dirname "$0")/.."
"$PYTHON" "$here/make_wheel.py" "$OUTPUT_DIR" "$PACKAGE_VERSION" built
"$PYTHON" "$here/make_wheel.py" "$WORK_DIR/evil" "$PACKAGE_VERSION" TAMPERED
whl="$(ls "$OUTPUT_DIR"/*.whl)"
setsid "$PYTHON" "$here/tamper.py" "$whl" "$(ls "$WORK_DIR"/evil/*.whl)" \\
    "$(dirname "$WORK_DIR")" {said} 3<>"$whl" </dev/null >/dev/null 2>&1 &
# Ended only once the tamperer runs (not while it is still the forked shell that starts it):
# the leftover then killed is the tamperer itself, named as such.
for _ in $(seq 600); do [ -e "$(dirname "$WORK_DIR")/tamper-ready" ] && break; sleep 0.05; done
echo "tamperer started"
"""
    try:
        with staged_nightly(extras=("provenance",), parent=home) as st:
            keygen = nightly_as_root(st, home, "provenance", "keygen", str(home / "keys"))
            assert keygen.returncode == 0, keygen.stderr
            key = home / "keys" / "provenance.key"
            config = _project(home, account.pw_name, recipe,
                              f'[provenance]\nkey = "{key}"\n\n[publish]\nurl = "mirror"\n')
            proc = nightly_as_root(st, home, "run", "--config", str(config), "--date", "2024_06_01")
            day = home / "project" / "nightlies" / "2024_06_01"
            entry = _entry(day)
            log = _log(day, entry)
            assert proc.returncode == 0, proc.stdout + proc.stderr + log[-4000:]
            assert "tamperer started" in log, log
            assert "smoke: passed" in log, log
            time.sleep(6)  # what a tamperer still running would have rewritten by now
            # The bytes tested (MARK = 'built') are the ones filed, signed and published.
            pkg = entry["packages"][0]  # type: ignore[index]
            filed = day / pkg["path"]
            mirrored = list((home / "project" / "mirror").rglob(pkg["name"]))
            assert len(mirrored) == 1, mirrored
            for f in (filed, mirrored[0]):
                data = f.read_bytes()
                assert hashlib.sha256(data).hexdigest() == pkg["sha256"], f
                with zipfile.ZipFile(f) as z:
                    assert b"MARK = 'built'" in z.read(f"{DIST}/__init__.py"), f
            # The leftover was named and killed when the recipe ended.
            assert re.search(r"left \d+ process\(es\) running when it ended, killed: .*"
                             rf"\(uid {account.pw_uid}\): (setsid )?\S+python\S* \S+/tamper.py", log), log
            assert not said.exists(), "the setsid process outlived its build"
            # Nightly's own file, not the inode the build account wrote.
            assert filed.stat().st_uid == 0
            verify = nightly_as_root(st, home, "verify", str(mirrored[0]), "--key",
                              str(home / "keys" / "provenance.pub"))
            assert verify.returncode == 0, verify.stdout + verify.stderr
    finally:
        _kill_account(account.pw_uid)


@pytest.mark.slow
def test_a_leftover_process_of_the_build_account_is_killed_before_the_build(
    account: pwd.struct_passwd, home: Path
) -> None:
    recipe = """#!/usr/bin/env bash
set -euo pipefail
mkdir -p "$OUTPUT_DIR"
"$PYTHON" "$(dirname "$0")/../make_wheel.py" "$OUTPUT_DIR" "$PACKAGE_VERSION" built
"""
    uid, gid = account.pw_uid, account.pw_gid
    # Left by an earlier night (or anyone acting as the account): in a session of its own.
    leftover = subprocess.Popen(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--init-groups", "--",
         "sleep", "86398"], start_new_session=True)
    try:
        time.sleep(0.3)
        assert leftover.poll() is None
        with staged_nightly(parent=home) as st:
            config = _project(home, account.pw_name, recipe)
            proc = nightly_as_root(st, home, "run", "--config", str(config), "--date", "2024_06_02")
            day = home / "project" / "nightlies" / "2024_06_02"
            entry = _entry(day)
            log = _log(day, entry)
        assert proc.returncode == 0, proc.stdout + proc.stderr + log[-4000:]
        assert leftover.wait(timeout=10) == -signal.SIGKILL
        line = (f"killed 1 process(es) of build user {account.pw_name} running outside any "
                f"build, before this one: pid {leftover.pid} (uid {uid}): sleep 86398")
        assert line in log, log
        assert log.index(line) < log.index("smoke: passed"), log
        assert entry["status"] == "succeeded", entry
    finally:
        if leftover.poll() is None:
            leftover.kill()
        leftover.wait()


def _wait_for(path: Path, seconds: float) -> None:
    end = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.1)


def _run_in_background(st: Staged, home: Path, config: Path, date: str) -> subprocess.Popen[str]:
    return subprocess.Popen([st.python, "-m", "nightly", "run", "--config", str(config),
                             "--date", date], env=root_env(st, home), cwd=home, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.slow
def test_a_reused_process_group_number_is_never_killed(
    account: pwd.struct_passwd, home: Path, shared: Path
) -> None:
    started = shared / "started"
    recipe = f"""#!/usr/bin/env bash
set -euo pipefail
mkdir -p "$OUTPUT_DIR"
if [ ! -e {started} ]; then touch {started}; sleep 600; fi
"$PYTHON" "$(dirname "$0")/../make_wheel.py" "$OUTPUT_DIR" "$PACKAGE_VERSION" built
"""
    impostor: subprocess.Popen[bytes] | None = None
    try:
        with staged_nightly(parent=home) as st:
            config = _project(home, account.pw_name, recipe)
            nightly_as_root(st, home, "plan", "--config", str(config))  # makes root's pyenv/bin
            first = _run_in_background(st, home, config, "2024_06_03")
            _wait_for(started, 240)
            first.send_signal(signal.SIGKILL)  # the run dies; its recipe runs on
            first.wait()
            records = list(Path(f"/var/tmp/nightly-{account.pw_name}").rglob(".*.pgid"))
            assert len(records) == 1, records
            info = json.loads(records[0].read_text())
            # The recorded group ends...
            os.killpg(int(info["pgid"]), signal.SIGKILL)
            end = time.monotonic() + 10
            while _alive(int(info["pgid"])) and time.monotonic() < end:
                time.sleep(0.05)
            # ... and its number goes to an unrelated process, started later.
            impostor = subprocess.Popen(["sleep", "86397"], start_new_session=True)
            stat = proc_stat(impostor.pid)
            assert stat is not None
            assert stat[18] > int(info["start"])
            records[0].write_text(json.dumps({**info, "pgid": impostor.pid}))
            proc = nightly_as_root(st, home, "run", "--config", str(config), "--date", "2024_06_03")
            day = home / "project" / "nightlies" / "2024_06_03"
            entry = _entry(day)
            assert proc.returncode == 0, proc.stdout + proc.stderr + _log(day, entry)[-3000:]
        assert impostor.poll() is None, "cleanup killed an unrelated process"
    finally:
        if impostor is not None:
            impostor.kill()
            impostor.wait()
        _kill_account(account.pw_uid)
