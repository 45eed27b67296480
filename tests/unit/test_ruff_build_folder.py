"""The fast tier in a clone where `pip install .` ran: setuptools leaves a top-level build/
folder there, which ruff's import sorting would take for a first-party package named `build`
(pypa/build's import name) unless the configuration says otherwise."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_a_build_folder_in_the_clone_does_not_change_import_sorting(tmp_path: Path) -> None:
    if shutil.which("ruff", path=str(Path(sys.executable).parent)) is None:
        pytest.fail("ruff is not installed in the test environment (pip install -e '.[test]')")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    module = tmp_path / "nightly" / "night" / "wheelhouse.py"
    module.parent.mkdir(parents=True)
    shutil.copy(ROOT / "nightly" / "night" / "wheelhouse.py", module)
    assert "import build" in module.read_text() or "from build" in module.read_text()
    (tmp_path / "build" / "lib" / "nightly").mkdir(parents=True)
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "I", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
