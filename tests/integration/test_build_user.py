"""Root runs the night with `[executor.local] user` set, everything of its own in a 0700 home
(nightly installed there, the project, the nightlies root, the caches, the AWS credentials,
the provenance signing key), as a release engineer sets it up: every build runs as the build
user in its build area (nightly/builds/area/userarea.py) and succeeds with the compiler cache on
(hits on the second night), and the build user reads nothing of root's. A path the build
user cannot reach stops the night before any build, with one line (exit 2).
"""

from __future__ import annotations

import json
import pwd
import re
import secrets
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from nightly.reach import Account, denied
from tests.support.accounts import PY, nightly_as_root, user_project_config
from tests.support.staged import staged_nightly
from tests.support.wheelrecipe import wheel_step

# Compiles through $CC (the compiler cache's wrapper), tries to read each of root's secrets
# (PROBES, one per line), and packs a pure wheel the smoke test installs and imports.
RECIPE = r"""#!/usr/bin/env bash
set -euo pipefail
echo "recipe as uid $(id -u), HOME=$HOME"
# uv, staged for the account (the shipped recipes fill build environments with it)
if "${NIGHTLY_UV:-/nonexistent}" --version >/dev/null 2>&1; then echo "uv: runs"
else echo "uv: cannot run"; fi
while IFS= read -r f; do
    [ -n "$f" ] || continue
    if cat "$f" >/dev/null 2>&1; then echo "probe: READ $f"; else echo "probe: denied $f"; fi
done <<'PROBES'
@PROBES@
PROBES
mkdir -p "$WORK_DIR/b" "$OUTPUT_DIR"
cd "$WORK_DIR/b"
for f in "$SOURCE_DIR"/*.c; do b="$(basename "$f" .c)"; $CC -O1 -c "$f" -o "$b.o"; done
""" + wheel_step(dist="userdemo")


def _secrets(home: Path) -> list[Path]:
    """Root's credentials, carelessly world-readable inside the home, and its other cache."""
    aws = home / ".aws"
    aws.mkdir(mode=0o755)
    (aws / "credentials").write_text(
        f"[default]\naws_access_key_id = AKIA{secrets.token_hex(8).upper()}\n"
        f"aws_secret_access_key = {secrets.token_urlsafe(30)}\n")
    (aws / "credentials").chmod(0o644)
    pip = home / ".cache" / "pip"
    pip.mkdir(parents=True)
    (pip / "selfcheck.json").write_text("{}\n")
    (pip / "selfcheck.json").chmod(0o644)
    return [aws / "credentials", pip / "selfcheck.json"]


def _project(home: Path, user: str, probes: list[Path], extra: str = "") -> Path:
    """A small C project under the home; `extra`: more configuration."""
    project = home / "project"
    (project / "src").mkdir(parents=True)
    for i in range(3):
        (project / "src" / f"f{i}.c").write_text(f"int f{i}(int x) {{ return x * {i + 2}; }}\n")
    recipe = project / "recipes" / "manywheel" / "build.sh"
    recipe.parent.mkdir(parents=True)
    recipe.write_text(RECIPE.replace("@PROBES@", "\n".join(map(str, probes))))
    return user_project_config(project, name="userdemo", user=user, extra=extra)


@pytest.mark.slow
def test_root_builds_as_a_user_from_a_private_home(
    account: pwd.struct_passwd, home: Path
) -> None:
    name, uid = account.pw_name, account.pw_uid
    probes = _secrets(home)
    with staged_nightly(extras=("provenance",), parent=home) as st:
        keygen = nightly_as_root(st, home, "provenance", "keygen", str(home / "keys"))
        assert keygen.returncode == 0, keygen.stderr
        key = home / "keys" / "provenance.key"
        probes += [key, home / "project" / "nightly.toml"]
        config = _project(home, name, probes, f'[provenance]\nkey = "{key}"\n')
        hits = []
        for date in ("2024_05_01", "2024_05_02"):
            proc = nightly_as_root(st, home, "run", "--config", str(config), "--date", date)
            day = home / "project" / "nightlies" / date
            logs = "".join(p.read_text() for p in (day / "logs").rglob("*.log"))
            assert proc.returncode == 0, proc.stdout + proc.stderr + logs[-4000:]
            entry = json.loads((day / "state.json").read_text())["builds"][f"manywheel_{PY}_cpu"]
            assert entry["status"] == "succeeded", entry
            assert "off" not in entry["cache"], entry["cache"]
            assert entry["cache"]["requests"] == 3, entry["cache"]
            hits.append(entry["cache"]["hits"])
            log = (day / entry["log"]).read_text()
            assert f"recipe runs as {name} (uid {uid})" in log
            assert f"recipe as uid {uid}," in log
            # The first interpreter on root's PATH is out of the user's reach: the next one.
            assert f"[nightly] interpreter {st.python}\n" in log, log
            assert "probe: READ" not in log, log
            assert log.count("probe: denied") == len(probes), log
            assert "smoke: passed" in log, log
            # uv runs as the build account: the recipe's, and the smoke test's fresh venv.
            assert "uv: runs\n" in log, log
            assert re.search(r"smoke: fresh virtual environment with .* \(uv .*/uv\)\n", log), log
            assert list((day / "packages").rglob("*.whl.provenance.json")), "nothing was signed"
        assert hits == [0, 3], hits  # the second night is served by the cache
        area = Path(f"/var/tmp/nightly-{name}")
        # The compiler cache's store is root's alone (the builds got copies of it).
        store = area / "sccache"
        assert (store.stat().st_uid, stat.S_IMODE(store.stat().st_mode)) == (0, 0o700)
        assert all(p.stat().st_uid == 0 for p in store.rglob("*")), "a store entry is the user's"
        assert len([p for p in store.rglob("*") if p.is_file()]) >= 3
        assert stat.S_IMODE(area.stat().st_mode) == 0o755
        assert area.stat().st_uid == 0
    # Nothing of root's was opened up: its home is still 0700, and the build user reaches
    # none of its secrets, by the mode bits and by a real try.
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    who = Account.of(name)
    for secret in probes:
        assert denied(secret, who, "r") is not None, secret
        tried = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={account.pw_gid}",
                                "--init-groups", "--", "cat", str(secret)],
                               capture_output=True, check=False)
        assert tried.returncode != 0, secret


def test_a_path_out_of_the_build_users_reach_is_one_line_before_any_build(
    account: pwd.struct_passwd, home: Path
) -> None:
    """The interpreter mapped for the build lives in root's home: the night stops at plan
    time (exit 2) with one line naming it, what is missing on which folder, and the fix."""
    private_bin = home / "py" / "bin"
    private_bin.mkdir(parents=True)
    (private_bin / f"python{PY}").symlink_to(sys.executable)
    name = account.pw_name
    with staged_nightly() as st:
        config = _project(home, name, [], extra=f"""
[executor.local.pythons]
"{PY}" = "{private_bin / f'python{PY}'}"
""")
        proc = nightly_as_root(st, home, "run", "--config", str(config), "--date", "2024_05_01")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert "[executor.local.user]" in line, line
    assert f"build user {name} cannot reach the interpreter of python {PY}" in line, line
    assert f"{home} is drwx------ root:root: {name} lacks search (x) on it" in line, line
    assert f'map "{PY}" in [executor.local.pythons]' in line, line
    assert f"(e.g. /usr/bin/python{PY})" in line, line
    day = home / "project" / "nightlies" / "2024_05_01"
    assert not list(day.rglob(f"manywheel_{PY}_cpu.log"))  # nothing was built
