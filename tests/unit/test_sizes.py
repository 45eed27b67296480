"""The package's size limits, checked rather than remembered: a module of nightly/ has at most
500 lines and a function (or method) at most 80, so that each module keeps one job and each
function can be read at once. Merges of parallel work are where these slip."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.projects import REPO

PACKAGE = REPO / "nightly"
MODULE_LINES = 500
FUNCTION_LINES = 80


def modules() -> list[Path]:
    found = sorted(PACKAGE.rglob("*.py"))
    assert len(found) > 50, "nightly's modules were not found"
    return found


def long_functions(path: Path, root: Path = REPO) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            if length > FUNCTION_LINES:
                out.append(f"{path.relative_to(root)}:{node.lineno} {node.name}: {length} lines")
    return out


def test_every_module_is_at_most_500_lines() -> None:
    too_long = [
        f"{p.relative_to(REPO)}: {n} lines"
        for p in modules()
        if (n := len(p.read_text().splitlines())) > MODULE_LINES
    ]
    assert not too_long, "split these modules:\n" + "\n".join(too_long)


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
