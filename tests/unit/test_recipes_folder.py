"""The recipe folder: the installed copy by default, a project's own folder overriding it,
and a missing folder or recipe refused at plan time (exit 2) with nothing created."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nightly.config import load
from nightly.config.recipes import installed_recipes

WriteConfig = Callable[..., Path]
Run = Callable[..., Any]
REPO = Path(__file__).resolve().parents[2]


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_default_is_the_installed_recipes_and_a_project_folder_overrides(
    write_config: WriteConfig, minimal_config_text: str, tmp_path: Path
) -> None:
    assert load(write_config(minimal_config_text)).recipes == installed_recipes()
    # Run from a checkout (editable install): the repository's top-level recipes.
    assert installed_recipes() == REPO / "recipes"
    own = write_config('recipes = "my-recipes"\n' + minimal_config_text)
    assert load(own).recipes == tmp_path / "my-recipes"
    # A recipes/ beside the config is the project's own once it holds a recipe; an empty
    # one (or another project's folder of that name) is not.
    (tmp_path / "recipes" / "notes").mkdir(parents=True)
    assert load(write_config(minimal_config_text)).recipes == installed_recipes()
    (tmp_path / "recipes" / "conda").mkdir()
    (tmp_path / "recipes" / "conda" / "build.sh").write_text("exit 0\n")
    assert load(write_config(minimal_config_text)).recipes == tmp_path / "recipes"


@pytest.mark.parametrize(
    "args",
    [("plan",), ("run", "--dry-run"), ("build", "manywheel", "3.7m", "cpu", "--dry-run")],
    ids=["plan", "run-dry-run", "build-dry-run"],
)
def test_missing_recipe_folder_is_exit_2_and_creates_nothing(
    nightly: Run, write_config: WriteConfig, minimal_config_text: str,
    tmp_path: Path, args: tuple[str, ...],
) -> None:
    config = write_config('recipes = "nowhere/recipes"\n' + minimal_config_text)
    before = _tree(tmp_path)
    result = nightly(*args, "--config", str(config), "--date", "2024_05_01")
    assert result.code == 2, result
    err = result.err
    assert f"{tmp_path / 'nowhere' / 'recipes'} does not exist" in err
    assert "[recipes]" in err
    assert "Traceback" not in err
    assert _tree(tmp_path) == before


def test_recipe_folder_without_a_package_type_of_the_matrix_is_exit_2(
    nightly: Run, write_config: WriteConfig, minimal_config_text: str,
    tmp_path: Path,
) -> None:
    # MINIMAL_CONFIG builds manywheel and conda: only manywheel has its recipe here.
    (tmp_path / "mine" / "manywheel").mkdir(parents=True)
    (tmp_path / "mine" / "manywheel" / "build.sh").write_text("exit 0\n")
    config = write_config('recipes = "mine"\n' + minimal_config_text)
    before = _tree(tmp_path)
    result = nightly("run", "--dry-run", "--config", str(config), "--date", "2024_05_01")
    assert result.code == 2, result
    err = result.err
    assert "has no recipe for conda" in err
    assert str(tmp_path / "mine" / "conda" / "build.sh") in err
    assert _tree(tmp_path) == before
