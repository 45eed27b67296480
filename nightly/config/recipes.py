"""Where the recipes are: the copy installed with nightly, or a project's own folder; and the
plan-time check that every package type of the matrix has its recipe there."""

from __future__ import annotations

from pathlib import Path

from nightly.config.schema import Config
from nightly.errors import ConfigError

# The wheel carries the repository's top-level recipes/ as package data under
# nightly/recipes (setup.py maps them in at build time, so they are never committed twice).
_PACKAGED = Path(__file__).resolve().parents[1] / "recipes"
# A source checkout or an editable install has them at the repository's top level.
_CHECKOUT = Path(__file__).resolve().parents[2] / "recipes"


def installed_recipes() -> Path:
    """The recipes that came with nightly: the installed copy, else the checkout's."""
    for candidate in (_PACKAGED, _CHECKOUT):
        if (candidate / "common" / "lib.sh").is_file():
            return candidate
    return _PACKAGED  # neither: check_recipes names this path


def missing_recipes(recipes: Path, packages: set[str]) -> list[str]:
    """The package types of `packages` whose recipes/<package>/build.sh is not a file."""
    return sorted(p for p in packages if not (recipes / p / "build.sh").is_file())


def check_recipes(config: Config) -> None:
    """Fail (exit 2) when the recipe folder is not there or lacks the recipe of a package
    type the matrix builds. Run before anything of the night is created: a build would
    otherwise fail in half a second with `exit status 127` and an empty folder behind it."""
    recipes = config.recipes
    if not recipes.is_dir():
        raise ConfigError(
            f"the recipe folder {recipes} does not exist",
            file=str(config.path),
            key="recipes",
            hint="leave `recipes` out to use the recipes installed with nightly, or name a "
            "folder holding <package>/build.sh",
        )
    # Windows builds run build_windows.py on their own machines (docs/recipes.md), not here.
    missing = missing_recipes(recipes, {b.package for b in config.builds
                                        if b.platform != "windows"})
    if missing:
        paths = ", ".join(str(recipes / p / "build.sh") for p in missing)
        raise ConfigError(
            f"the recipe folder {recipes} has no recipe for {', '.join(missing)} ({paths} missing)",
            file=str(config.path),
            key="recipes",
            hint="add the recipe, or leave `recipes` out to use the recipes installed with nightly",
        )


__all__ = ["check_recipes", "installed_recipes", "missing_recipes"]
