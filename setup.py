"""Maps the repository's top-level recipes/ into the wheel as package data (nightly/recipes),
and scripts/container-engine.sh as nightly/scripts/container-engine.sh (`nightly images
engine` runs it), so an installed nightly has them without a second committed copy.
Everything else is in pyproject.toml."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

RECIPES = Path(__file__).resolve().parent / "recipes"
ENGINE = Path(__file__).resolve().parent / "scripts" / "container-engine.sh"


class BuildPyWithRecipes(build_py):  # type: ignore[misc]
    def run(self) -> None:
        super().run()
        # An editable install reads them from the checkout (nightly.config.recipes).
        if getattr(self, "editable_mode", False) or not RECIPES.is_dir():
            return
        dest = Path(self.build_lib) / "nightly" / "recipes"
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(RECIPES, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        if ENGINE.is_file():
            (dest.parent / "scripts").mkdir(exist_ok=True)
            shutil.copy2(ENGINE, dest.parent / "scripts" / ENGINE.name)


setup(cmdclass={"build_py": BuildPyWithRecipes})
