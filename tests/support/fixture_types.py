"""The types of the callable fixtures of tests/support/fixtures.py, for a test's annotations:
`def test_x(night_project: MakeProject, run_cli: RunCli) -> None`. Each matches the helper the
fixture hands out, so mypy checks a test's calls as it checks nightly's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from tests.support.cli import Started
from tests.support.projects import Project

__all__ = ["IsAlive", "MakeProject", "MakeRecipe", "RunCli", "StartCli", "WaitUntil"]


class MakeProject(Protocol):
    """night_project(name="p", *, matrix=TOML, ...) -> Project (projects.write_project)."""

    def __call__(
        self,
        name: str = "p",
        *,
        recipes: Mapping[str, str] | None = None,
        matrix: str,
        behaviours: Mapping[str, str] | None = None,
        queues: int = 2,
        extra: str = "",
        missing_pythons: Sequence[str] = (),
    ) -> Project: ...


class MakeRecipe(Protocol):
    """make_recipe(signals, behaviours=None, default="ok") -> recipe text (projects.recipe_text)."""

    def __call__(
        self, signals: Path, behaviours: Mapping[str, str] | None = None, default: str = "ok"
    ) -> str: ...


class RunCli(Protocol):
    """run_cli(args, cwd=None, *, env=None, timeout=90) -> (code, stdout, stderr) (cli.run_nightly)."""

    def __call__(
        self,
        args: Sequence[str],
        cwd: Path | None = None,
        *,
        env: Mapping[str, str] | None = None,
        timeout: float = 90,
    ) -> tuple[int, str, str]: ...


class StartCli(Protocol):
    """start_cli(args, cwd=None, *, env=None) -> Started (`nightly ARGS` in the background)."""

    def __call__(
        self, args: Sequence[str], cwd: Path | None = None, *, env: dict[str, str] | None = None
    ) -> Started: ...


class WaitUntil(Protocol):
    """wait_until(pred, timeout=30, what="") (cli.wait_for)."""

    def __call__(self, pred: Callable[[], object], timeout: float = 30, what: str = "") -> None: ...


IsAlive = Callable[[int], bool]
