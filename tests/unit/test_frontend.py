"""recipes/common/buildenv.sh's build_wheel: which front end builds the wheel and what it is
handed, with a stand-in interpreter that notes its arguments and folder and writes a wheel
(the real front ends run in tests/integration/test_build_env.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

BUILDENV = Path(__file__).resolve().parents[2] / "recipes" / "common" / "buildenv.sh"

# Notes "cwd" then one argument a line; makes the wheel where it was told to.
FAKE = """#!/bin/bash
{ pwd; printf '%s\\n' "$@"; } >"$CALLS"
out=""
prev=""
for a in "$@"; do
    case "$prev" in --outdir|-w) out="$a" ;; esac
    prev="$a"
done
[[ -n "$out" ]] || out="$PWD/dist"
mkdir -p "$out" && : >"$out/p-1.0-py3-none-any.whl"
"""


def _build_wheel(tmp_path: Path, frontend: str, *, pip: bool) -> tuple[list[str], str, str]:
    """(the stand-in's cwd then arguments, build_wheel's stdout, its stderr)."""
    fake = tmp_path / "fake"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    calls = tmp_path / "calls"
    script = f"""
set -euo pipefail
RECIPE=t
log() {{ printf '[%s] %s\\n' "$RECIPE" "$*"; }}
die() {{ printf 'ERROR: %s\\n' "$*" >&2; exit 1; }}
source {BUILDENV}
WORK_DIR={work} BUILD_PYTHON={fake} PYTHON={fake} FRONTEND={frontend} FRONTEND_WHY="no build here"
BUILD_PIP={fake if pip else '""'} NIGHTLY_BUILD_ISOLATION=0
BUILD_CONFIG_SETTINGS=("--config-settings=build-dir={work}/backend-build")
build_wheel {work}/src {work}/dist
"""
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False,
                          env={"PATH": "/usr/bin:/bin", "CALLS": str(calls)}, cwd=work / "src")
    assert proc.returncode == 0, proc.stderr
    return calls.read_text().splitlines(), proc.stdout, proc.stderr


def test_pypa_build_gets_the_config_settings_and_runs_outside_the_source(tmp_path: Path) -> None:
    called, out, err = _build_wheel(tmp_path, "build", pip=True)
    work = tmp_path / "work"
    cwd, args = called[0], called[1:]
    assert args == ["-m", "build", "--wheel", "--no-isolation", "--skip-dependency-check",
                    "--outdir", f"{work}/dist", f"--config-setting=build-dir={work}/backend-build",
                    f"{work}/src"]
    # An empty folder: `-m build` must not import a project's own build.py.
    assert cwd == f"{work}/frontend-cwd"
    assert not any((work / "frontend-cwd").iterdir())
    assert out == f"{work}/dist/p-1.0-py3-none-any.whl\n"  # the wheel's path alone
    assert "front end: pypa/build (" in err


def test_pip_builds_where_pypa_build_is_not_to_be_had(tmp_path: Path) -> None:
    called, out, err = _build_wheel(tmp_path, "pip", pip=True)
    work = tmp_path / "work"
    assert called == [f"{work}/src", "wheel", "--no-deps", "-w", f"{work}/dist", "-v",
                      "--no-build-isolation", "--no-index",
                      f"--config-settings=build-dir={work}/backend-build", "."]
    assert out == f"{work}/dist/p-1.0-py3-none-any.whl\n"
    assert "front end: pip wheel (no build here)" in err
