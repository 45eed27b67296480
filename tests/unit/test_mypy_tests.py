"""`mypy` as scripts/test.sh runs it (no arguments: pyproject's [tool.mypy]) checks the tests
too, as strictly as nightly: an unannotated test function is an error, and the tests' own
imports (`tests.support.*`, tests/ being a folder without __init__.py) resolve."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_from_pyproject_checks_the_tests_strictly(tmp_path: Path) -> None:
    if shutil.which("mypy", path=str(Path(sys.executable).parent)) is None:
        pytest.fail("mypy is not installed in the test environment (pip install -e '.[test]')")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "nightly").mkdir()
    (tmp_path / "nightly" / "__init__.py").write_text("")
    support = tmp_path / "tests" / "support"
    support.mkdir(parents=True)
    (support / "__init__.py").write_text("")
    (support / "helpers.py").write_text("def twice(n: int) -> int:\n    return 2 * n\n")
    unit = tmp_path / "tests" / "unit"
    unit.mkdir()
    (unit / "test_typed.py").write_text(
        "from tests.support.helpers import twice\n\n\n"
        "def test_twice() -> None:\n    assert twice(2) == 4\n")
    (unit / "test_untyped.py").write_text("def test_fixture(night_project):\n    assert night_project\n")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "tests/unit/test_untyped.py:1: error: Function is missing a type annotation" in out, out
    assert "Found 1 error in 1 file" in out, out  # test_typed.py's import resolved
