"""Each build alone (issue 56, point 1): two projects' nights on one machine, both built by the
documented build account (`[executor.local] user`, docs/security.md), running at once through
the CLI. Project A's build code goes looking for project B's running build as an attacker
would: the build area's folders, B's compiler wrapper (`cache/cc`), B's compiler cache
socket, the cache store, the zig caches, /proc/<pid>/cwd and /root of the account's processes, /tmp and
/dev/shm. It reaches none of them (nightly.executors.box), and B's wheel holds B's code.
"""

from __future__ import annotations

import json
import pwd
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.accounts import PY, root_env, user_project_config, world_writable_folder
from tests.support.staged import Staged, staged_nightly
from tests.support.wheelrecipe import value_smoke, value_wheel_step

pytestmark = pytest.mark.slow

BUILD = f"manywheel_{PY}_cpu"

# Runs the project's hook (the build's own code) first, then compiles value.c through $CC
# (the compiler cache's wrapper); value_wheel_step packs a wheel whose value() is the library's.
RECIPE = r"""#!/usr/bin/env bash
set -euo pipefail
mkdir -p "$WORK_DIR/b" "$OUTPUT_DIR"
cd "$WORK_DIR/b"
echo "build folder: $(dirname "$WORK_DIR")"
"$PYTHON" "$SOURCE_DIR/hook.py"
$CC -O1 -fPIC -c "$SOURCE_DIR/value.c" -o value.o
"""

# Project B's hook: says it runs (its wrapper and socket exist by now), then waits for A.
VICTIM = r"""
import os, time
sync = @SYNC@
open(os.path.join(sync, "b-running"), "w").close()
end = time.monotonic() + 240
while not os.path.exists(os.path.join(sync, "a-done")) and time.monotonic() < end:
    time.sleep(0.2)
print("victim: A is done" if os.path.exists(os.path.join(sync, "a-done")) else "victim: gave up")
"""

# Project A's hook: once B runs, everything of another build it can find, tried.
ATTACKER = r"""
import glob, os, socket, time
sync, area = @SYNC@, @AREA@
mine = os.path.realpath(os.path.dirname(os.environ["WORK_DIR"]))
end = time.monotonic() + 240
while not os.path.exists(os.path.join(sync, "b-running")) and time.monotonic() < end:
    time.sleep(0.2)
print("attacker: B runs" if os.path.exists(os.path.join(sync, "b-running")) else "attacker: no B")
reached = []
EVIL = ("#!/bin/sh\nout=; prev=\nfor a; do [ \"$prev\" = -o ] && out=$a; prev=$a; done\n"
        "printf 'int value(void) { return 666; }\\n' > \"$out.c\"\n"
        "exec cc -O1 -fPIC -c \"$out.c\" -o \"$out\"\n")

own_zig = os.path.realpath(os.environ["ZIG_GLOBAL_CACHE_DIR"])

def other(path):
    real = os.path.realpath(path)
    return not any(real == m or real.startswith(m + os.sep) for m in (mine, own_zig))

def try_folder(folder, how):
    if not other(folder):
        return
    try:
        names = os.listdir(folder)
    except OSError:
        return
    reached.append(f"{how}: listed {folder}")
    wrapper = os.path.join(folder, "cache", "cc")
    if os.path.exists(wrapper):
        try:
            with open(wrapper, "w") as f:
                f.write(EVIL)
            reached.append(f"{how}: replaced {wrapper}")
        except OSError:
            pass
    try:
        probe = os.path.join(folder, "planted-by-a")
        open(probe, "w").close()
        reached.append(f"{how}: wrote {probe}")
    except OSError:
        pass

def try_socket(path, how):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        reached.append(f"{how}: connected to {path}")
    except OSError:
        pass
    finally:
        s.close()

for pattern in ("nights/*/*/work/*", "nights/*/.builds/work/*", "nights/*/release/*/work/*",
                "zig-cache/*/*"):
    for folder in glob.glob(os.path.join(area, pattern)):
        try_folder(folder, "area")
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for link in ("cwd", "root"):
            try:
                target = os.readlink(f"/proc/{pid}/{link}")
            except OSError:
                continue
            if "/nights/" in target and other(f"/proc/{pid}/{link}"):
                try:
                    os.listdir(f"/proc/{pid}/{link}")
                    reached.append(f"/proc/{pid}/{link} -> {target}")
                except OSError:
                    pass
        for root in glob.glob(f"/proc/{pid}/root{area}/nights/*/.builds/work/*"):
            try_folder(root, f"/proc/{pid}/root")
def same(a, b):
    sa, sb = os.stat(a), os.stat(b)
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)

own_tmp = os.path.join(os.environ["WORK_DIR"], "tmp")
temps = [] if same("/tmp", own_tmp) else glob.glob("/tmp/*")  # /tmp is its own: nothing else
for path in temps + glob.glob("/dev/shm/*"):
    if path == os.environ.get("SCCACHE_SERVER_UDS"):
        continue
    if path.endswith(".sock"):
        try_socket(path, "tmp")
    elif os.lstat(path).st_uid == os.getuid() and other(path):
        reached.append(f"saw {path}")
for store in glob.glob(os.path.join(area, "sccache", "*")):
    try:
        os.listdir(store)
        reached.append(f"store: listed {store}")
    except OSError:
        pass
for line in reached:
    print("attacker: reached", line)
if not reached:
    print("attacker: reached nothing")
open(os.path.join(sync, "a-done"), "w").close()
"""


@pytest.fixture
def sync() -> Iterator[Path]:
    """A folder both builds write (outside the build area and /tmp), for the test's timing."""
    with world_writable_folder("alone") as path:
        yield path


def _project(top: Path, dist: str, user: str, value: int, hook: str) -> Path:
    (top / "src").mkdir(parents=True)
    (top / "src" / "value.c").write_text(f"int value(void) {{ return {value}; }}\n")
    (top / "src" / "hook.py").write_text(hook)
    recipe = top / "recipes" / "manywheel" / "build.sh"
    recipe.parent.mkdir(parents=True)
    recipe.write_text(RECIPE + value_wheel_step(dist=dist))
    return user_project_config(top, name=dist, user=user, extra=value_smoke(dist, value))


def _start(st: Staged, home: Path, config: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([st.python, "-m", "nightly", "run", "--config", str(config),
                             "--date", "2024_07_01", "--no-upload"], env=root_env(st, home),
                            cwd=home, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _log(top: Path) -> tuple[dict[str, object], str]:
    day = top / "nightlies" / "2024_07_01"
    builds = json.loads((day / "state.json").read_text())["builds"]
    assert BUILD in builds, (top, builds)
    entry: dict[str, object] = builds[BUILD]
    return entry, (day / str(entry["log"])).read_text() if entry.get("log") else ""


def test_two_projects_builds_at_once_reach_nothing_of_each_other(
    account: pwd.struct_passwd, home: Path, sync: Path
) -> None:
    area = f"/var/tmp/nightly-{account.pw_name}"
    a = _project(home / "alpha", "alpha", account.pw_name, 1,
                 ATTACKER.replace("@SYNC@", repr(str(sync))).replace("@AREA@", repr(area)))
    b = _project(home / "beta", "beta", account.pw_name, 2,
                 VICTIM.replace("@SYNC@", repr(str(sync))))
    with staged_nightly(parent=home) as st:
        night_b = _start(st, home, b)
        time.sleep(2)
        night_a = _start(st, home, a)
        out_a, _ = night_a.communicate(timeout=600)
        out_b, _ = night_b.communicate(timeout=600)
    assert night_a.returncode in (0, 1), out_a
    assert night_b.returncode in (0, 1), out_b
    entry_a, log_a = _log(home / "alpha")
    entry_b, log_b = _log(home / "beta")
    assert "attacker: B runs" in log_a, log_a  # they did run at the same time
    assert "victim: A is done" in log_b, log_b
    assert "attacker: reached nothing" in log_a, log_a
    assert "attacker: reached" not in log_a.replace("attacker: reached nothing", ""), log_a
    # B built and tested its own code, through its own compiler cache.
    assert night_b.returncode == 0, out_b + log_b[-4000:]
    assert "value 2" in log_b, log_b
    assert entry_b["status"] == "succeeded", entry_b
    assert night_a.returncode == 0, out_a + log_a[-4000:]
    assert entry_a["status"] == "succeeded", entry_a
    cache_b = entry_b["cache"]
    assert isinstance(cache_b, dict), entry_b
    assert cache_b.get("requests") == 1, cache_b
