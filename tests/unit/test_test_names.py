"""No two test modules share a file name: tests/ folders are no packages, so pytest imports
each test file by its base name, and a second file of the same name is an error at collection
("import file mismatch") that fails the whole run."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tests.support.projects import REPO


def duplicate_names(root: Path) -> list[str]:
    names = Counter(p.name for p in root.rglob("test_*.py"))
    return sorted(n for n, k in names.items() if k > 1)


def test_no_two_test_modules_share_a_name() -> None:
    assert len(list((REPO / "tests").rglob("test_*.py"))) > 100
    assert duplicate_names(REPO / "tests") == []


def test_the_check_sees_two_files_of_one_name(tmp_path: Path) -> None:
    for folder in ("unit", "integration"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "test_same.py").write_text("")
    (tmp_path / "unit" / "test_other.py").write_text("")
    assert duplicate_names(tmp_path) == ["test_same.py"]
