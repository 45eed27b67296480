"""The closing install line's parts (nightly.report.install): the command, and the note for
a Python whose new venv's pip (before 23.1) refuses a wheel whose metadata Name has capitals."""

from __future__ import annotations

from pathlib import Path

from nightly.report.install import Served, command, pip_notes
from tests.support.wheels import make_wheel


def _python_with_pip(tmp_path: Path, version: str) -> str:
    """A stand-in interpreter whose ensurepip bundles pip `version` (a real process)."""
    py = tmp_path / f"python-{version}"
    py.write_text(f"#!/bin/sh\necho {version}\n")
    py.chmod(0o755)
    return str(py)


def test_a_python_whose_venv_pip_refuses_the_name_is_named_with_the_pip_it_needs(
    tmp_path: Path,
) -> None:
    wheel = make_wheel(tmp_path, "TinyMaster", "1.0")
    group = Served(index="file:///m/", find_links=False, pythons=("3.10", "3.12"), wheel=wheel)
    old, new = _python_with_pip(tmp_path, "23.0.1"), _python_with_pip(tmp_path, "24.0")
    notes = pip_notes(None, group, {"3.10": old, "3.12": new})
    assert len(notes) == 1, notes
    assert "Python 3.10" in notes[0]
    assert "pip 23.0.1" in notes[0]
    assert "'pip>=23.1'" in notes[0]
    lower = make_wheel(_folder(tmp_path / "l"), "tinymaster", "1.0")
    same = Served(index="file:///m/", find_links=False, pythons=("3.10",), wheel=lower)
    assert pip_notes(None, same, {"3.10": old}) == []


def test_the_command_pins_the_version_and_names_the_dependencies_index() -> None:
    assert command("Tiny_Master", "1.0.dev20240501", "file:///m/", "https://pypi.org/simple") == (
        "pip install --index-url file:///m/ --extra-index-url https://pypi.org/simple "
        "tiny-master==1.0.dev20240501")
    assert command("demo", "1.0", "/day/packages/manywheel/cpu", None, find_links=True) == (
        "pip install --find-links /day/packages/manywheel/cpu --no-index demo==1.0")


def _folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
