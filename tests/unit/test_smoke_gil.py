"""The smoke scripts' free-threading check (smoke_scripts/common.sh `gil_check`): a `t`
build must import its module with the GIL disabled; any other build is not checked.

No free-threaded CPython can be had on these machines, so the interpreter is the host's,
made to look free-threaded (sys._is_gil_enabled returning False) by a sitecustomize, and a
module that turns the GIL back on on import stands for an extension without Py_mod_gil.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nightly.builds.test.smoke import SCRIPTS

COMMON = SCRIPTS / "common.sh"


def _run(
    tmp_path: Path, python: str, desired: str, module: str, *, fake_ft: bool
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "sitecustomize.py").write_text(
        "import os, sys\n"
        "if os.environ.get('FAKE_FT') == '1':\n"
        "    sys._is_gil_enabled = lambda: False\n"
        "elif hasattr(sys, '_is_gil_enabled'):\n"
        "    del sys._is_gil_enabled  # stands for a GIL-only interpreter before 3.13\n"
    )
    (tmp_path / "plainmod.py").write_text("X = 1\n")
    (tmp_path / "regil.py").write_text("import sys\nsys._is_gil_enabled = lambda: True\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "DESIRED_PYTHON": desired,
           "FAKE_FT": "1" if fake_ft else "0"}
    script = f'. "{COMMON}"; gil_check "$1" "$2"'
    return subprocess.run(["bash", "-c", script, "gil", python, module], env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("desired", ["3.12", "3.6m", "3.14"])
def test_a_gil_build_is_not_checked(tmp_path: Path, desired: str) -> None:
    # /bin/false as the interpreter: running it at all would fail the check.
    r = _run(tmp_path, "/bin/false", desired, "plainmod", fake_ft=False)
    assert r.returncode == 0, r.stderr
    assert "GIL" not in r.stdout


def test_a_free_threaded_build_with_the_gil_disabled_passes(tmp_path: Path) -> None:
    r = _run(tmp_path, sys.executable, "3.14t", "plainmod", fake_ft=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "GIL disabled: free-threaded build" in r.stdout


def test_a_module_that_enables_the_gil_fails_a_t_build(tmp_path: Path) -> None:
    r = _run(tmp_path, sys.executable, "3.14t", "regil", fake_ft=True)
    assert r.returncode != 0
    assert "the GIL is enabled after importing regil" in r.stderr


def test_an_interpreter_without_free_threading_fails_a_t_build(tmp_path: Path) -> None:
    r = _run(tmp_path, sys.executable, "3.14t", "plainmod", fake_ft=False)
    assert r.returncode != 0
    assert "is no free-threaded interpreter" in r.stderr
