"""The package's size limits, checked rather than remembered: a module of nightly/ has at most
450 lines and a function (or method) at most 80, so that each module keeps one job and each
function can be read at once, with room for the next change before a split; and at most eight
modules sit flat in nightly/ (besides __init__ and __main__): a new concern gets a folder.
Merges of parallel work are where these slip."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.projects import REPO
from tests.support.sources import parsed

PACKAGE = REPO / "nightly"
MODULE_LINES = 450
FUNCTION_LINES = 80
FLAT_MODULES = 8


def modules() -> list[Path]:
    found = sorted(PACKAGE.rglob("*.py"))
    assert len(found) > 50, "nightly's modules were not found"
    return found


def long_functions(path: Path, root: Path = REPO) -> list[str]:
    tree = parsed(path.read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            if length > FUNCTION_LINES:
                out.append(f"{path.relative_to(root)}:{node.lineno} {node.name}: {length} lines")
    return out


def long_modules(paths: list[Path], root: Path = REPO) -> list[str]:
    out = []
    for p in paths:
        name = p.relative_to(root).as_posix()
        if (n := len(p.read_text().splitlines())) > MODULE_LINES:
            out.append(f"{name}: {n} lines (at most {MODULE_LINES})")
    return out


def flat_modules(package: Path = PACKAGE) -> list[str]:
    """The modules directly in nightly/, besides __init__.py and __main__.py."""
    return sorted(p.name for p in package.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))


def test_every_module_is_at_most_450_lines() -> None:
    too_long = long_modules(modules())
    assert not too_long, "split these modules:\n" + "\n".join(too_long)


def test_at_most_eight_flat_modules() -> None:
    flat = flat_modules()
    assert len(flat) <= FLAT_MODULES, f"{len(flat)} modules flat in nightly/ (at most " \
        f"{FLAT_MODULES}): move one into the folder it belongs to: {flat}"


def test_the_checks_see_a_long_module_and_a_crowded_package(tmp_path: Path) -> None:
    (tmp_path / "nightly" / "stores").mkdir(parents=True)
    at_limit = tmp_path / "nightly" / "ok.py"
    at_limit.write_text("x = 1\n" * MODULE_LINES)
    over = tmp_path / "nightly" / "big.py"
    over.write_text("x = 1\n" * (MODULE_LINES + 1))
    assert long_modules([at_limit, over], tmp_path) == [
        f"nightly/big.py: {MODULE_LINES + 1} lines (at most {MODULE_LINES})"]
    package = tmp_path / "nightly"
    for name in ("__init__", "__main__", *(f"m{i}" for i in range(FLAT_MODULES - 2))):
        (package / f"{name}.py").write_text("")
    assert len(flat_modules(package)) == FLAT_MODULES  # ok, big and the six
    (package / "one_more.py").write_text("")
    assert len(flat_modules(package)) == FLAT_MODULES + 1


def test_every_function_is_at_most_80_lines() -> None:
    too_long = [line for p in modules() for line in long_functions(p)]
    assert not too_long, "split these functions:\n" + "\n".join(too_long)


def test_the_check_sees_a_long_function(tmp_path: Path) -> None:
    # The checker itself: a planted 81-line method is reported, an 80-line function is not.
    body = "\n".join(f"        x{i} = {i}" for i in range(79))
    (tmp_path / "ok.py").write_text("def ok():\n" + body.replace("        ", "    ") + "\n")
    (tmp_path / "bad.py").write_text(f"class C:\n    def bad(self):\n{body}\n        return x0\n")
    assert long_functions(tmp_path / "ok.py", tmp_path) == []
    assert long_functions(tmp_path / "bad.py", tmp_path) == ["bad.py:2 bad: 81 lines"]
