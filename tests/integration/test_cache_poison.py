"""Cache poisoning (issue 48, point 3): root runs the nights with `[executor.local] user`. A
night's build code replaces the compiler cache's entry of the clean source with its own,
different object, everywhere it can reach (its SCCACHE_DIR and the build area's cache folder).
The next night builds the clean source again, and the wheel's function returns the clean
value: the store is root's and takes a build's entries in only where it holds none, so the
rewritten entry is never served (builds/cache_store.py).
"""

from __future__ import annotations

import json
import pwd
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.accounts import PY, nightly_as_root, user_project_config
from tests.support.staged import staged_nightly
from tests.support.wheelrecipe import value_smoke, value_wheel_step

# Compiles value.c through $CC (the compiler cache's wrapper), runs the project's own
# hook.py when it has one (the build's code); value_wheel_step links a shared library and
# packs it in a wheel whose value() returns what the library's function returns.
RECIPE = r"""#!/usr/bin/env bash
set -euo pipefail
mkdir -p "$WORK_DIR/b" "$OUTPUT_DIR"
cd "$WORK_DIR/b"
$CC -O1 -fPIC -c "$SOURCE_DIR/value.c" -o value.o
if [ -f "$SOURCE_DIR/hook.py" ]; then "$PYTHON" "$SOURCE_DIR/hook.py"; fi
""" + value_wheel_step(dist="valdemo")

# The malicious commit's build code: its own object (value 666) was just stored under its
# own key, the newest entry of SCCACHE_DIR; it writes those bytes over every other object
# entry it can reach, the clean source's among them.
HOOK = r"""
import os, sys
objects = []
tops = [os.environ["SCCACHE_DIR"], @AREA@]
for top in tops:
    for root, dirs, files in os.walk(top):
        if "preprocessor" in root.split(os.sep):
            continue
        for name in files:
            if len(name) == 64:
                objects.append(os.path.join(root, name))
mine = max((p for p in objects if p.startswith(os.environ["SCCACHE_DIR"])), key=os.path.getmtime)
evil = open(mine, "rb").read()
for path in objects:
    if path == mine:
        continue
    try:
        with open(path, "r+b") as f:
            f.truncate(0)
            f.write(evil)
        print("hook: rewrote", path)
    except OSError as e:
        print("hook: refused", path, e.strerror)
"""


def _source(src: Path, value: int, *, hook: str = "") -> None:
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    (src / "value.c").write_text(f"int value(void) {{ return {value}; }}\n")
    if hook:
        (src / "hook.py").write_text(hook)


def _config(project: Path, user: str, expect: int) -> Path:
    return user_project_config(project, name="valdemo", user=user,
                               extra=value_smoke("valdemo", expect))


@pytest.mark.slow
def test_a_cache_entry_rewritten_by_a_build_is_never_served(
    account: pwd.struct_passwd, home: Path
) -> None:
    name = account.pw_name
    area = Path(f"/var/tmp/nightly-{name}")
    project = home / "project"
    recipe = project / "recipes" / "manywheel" / "build.sh"
    recipe.parent.mkdir(parents=True)
    recipe.write_text(RECIPE)
    build = f"manywheel_{PY}_cpu"
    with staged_nightly(parent=home) as st:
        def night(date: str, value: int, expect: int, hook: str = "") -> tuple[dict[str, Any], str]:
            _source(project / "src", value, hook=hook)
            config = _config(project, name, expect)
            proc = nightly_as_root(st, home, "run", "--config", str(config), "--date", date,
                                   "--no-upload", private_python=False)
            day = project / "nightlies" / date
            logs = "".join(p.read_text() for p in (day / "logs").rglob("*.log"))
            assert proc.returncode == 0, proc.stdout + proc.stderr + logs[-4000:]
            entry = json.loads((day / "state.json").read_text())["builds"][build]
            return entry, (day / entry["log"]).read_text()

        clean, _ = night("2024_05_01", 1, 1)
        assert (clean["cache"]["hits"], clean["cache"]["misses"]) == (0, 1), clean["cache"]
        _, evil_log = night("2024_05_02", 666, 666, HOOK.replace("@AREA@", repr(str(area))))
        assert "value 666" in evil_log
        assert "hook: rewrote" in evil_log or "hook: refused" in evil_log, evil_log
        again, log = night("2024_05_03", 1, 1)
    # The clean source's object, the clean value: the rewritten entry was never served.
    assert "value 1" in log, log
    assert "smoke: passed" in log, log
    assert again["cache"]["requests"] == 1, again["cache"]
