"""recipes/common/pyhelper.py, run as the recipes run it: check-interp accepts an interpreter
and describes it in the same start (the recipe's "interpreter:" line), or says why not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "recipes" / "common" / "pyhelper.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          check=False)


def test_check_interp_describes_the_interpreter_it_accepts() -> None:
    mine = f"{sys.version_info[0]}.{sys.version_info[1]}"
    done = _run("check-interp", mine)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (f"Python {sys.version.split()[0]} (abi {sys.abiflags!r}) at "
                           f"{sys.executable}\n")
    assert _run("describe").stdout == done.stdout


def test_check_interp_says_why_it_refuses_one_and_describes_nothing() -> None:
    other = "2.7" if sys.version_info[0] == 3 else "3.12"
    done = _run("check-interp", other)
    assert done.returncode == 1
    assert done.stdout == (f"{sys.executable} is Python {sys.version_info[0]}."
                           f"{sys.version_info[1]}, not {other}\n")
    bad = _run("check-interp", "three")
    assert bad.returncode == 1
    assert "is not of the form X.Y" in bad.stderr
