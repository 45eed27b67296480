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
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.staged import Staged, staged_nightly

PY = f"{sys.version_info.major}.{sys.version_info.minor}"

# Compiles value.c through $CC (the compiler cache's wrapper), runs the project's own
# hook.py when it has one (the build's code), links a shared library and packs it in a wheel
# whose value() returns what the library's function returns.
RECIPE = r"""#!/usr/bin/env bash
set -euo pipefail
mkdir -p "$WORK_DIR/b" "$OUTPUT_DIR"
cd "$WORK_DIR/b"
$CC -O1 -fPIC -c "$SOURCE_DIR/value.c" -o value.o
if [ -f "$SOURCE_DIR/hook.py" ]; then "$PYTHON" "$SOURCE_DIR/hook.py"; fi
cc -shared value.o -o libvalue.so
"$PYTHON" - "$OUTPUT_DIR" "$PACKAGE_VERSION" <<'PY'
import base64, hashlib, sys, zipfile
out, version = sys.argv[1:3]
dist = "valdemo"
info = f"{dist}-{version}.dist-info"
init = ("import ctypes, os\n"
        "_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), 'libvalue.so'))\n"
        "def value():\n    return _lib.value()\n")
files = {f"{dist}/__init__.py": init.encode(),
         f"{dist}/libvalue.so": open("libvalue.so", "rb").read(),
         f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
         f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
record = [f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
          for n, d in files.items()] + [f"{info}/RECORD,,"]
files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
with zipfile.ZipFile(f"{out}/{dist}-{version}-py3-none-any.whl", "w") as z:
    for n, d in files.items():
        z.writestr(n, d)
PY
"""

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




def _nightly(st: Staged, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(home), "PATH": f"{st.bin}:/usr/bin:/bin",
           "PYTHONPATH": str(st.site), "LANG": "C.UTF-8"}
    return subprocess.run([st.python, "-m", "nightly", *args], env=env, capture_output=True,
                          text=True, timeout=600, cwd=home, check=False)


def _source(src: Path, value: int, *, hook: str = "") -> None:
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    (src / "value.c").write_text(f"int value(void) {{ return {value}; }}\n")
    if hook:
        (src / "hook.py").write_text(hook)


def _config(project: Path, user: str, expect: int) -> Path:
    config = project / "nightly.toml"
    config.write_text(f"""
root = "nightlies"
recipes = "recipes"

[project]
name = "valdemo"
source = "src"
base_version = "0.1.0"

[matrix.linux.manywheel]
pythons = ["{PY}"]
cudas = ["cpu"]

[[machines]]
name = "m"
platform = "linux"
queues = 1
executor = "local"

[executor.local]
user = "{user}"

[smoke]
command = '"$PYTHON" -c "import valdemo; v = valdemo.value(); print(\\"value\\", v); assert v == {expect}, v"'
""")
    return config


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
            proc = _nightly(st, home, "run", "--config", str(config), "--date", date,
                            "--no-upload")
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
