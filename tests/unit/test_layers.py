"""No module of nightly imports from a layer above its own.

The layer order is written here once, lowest first; docs/architecture.md draws the same table.
A module belongs to the layer of the longest prefix that names it. Imports inside functions
and under TYPE_CHECKING count too: a type-only upward import is still a dependency upward.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "nightly"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("nightly", "nightly.errors", "nightly.files", "nightly.redact", "nightly.format",
              "nightly.hardening")),
    # Pure data every layer speaks: a build and its identifiers, a builder image's spec.
    ("vocabulary", ("nightly.plan.matrix", "nightly.images.spec", "nightly.images.suites")),
    ("configuration", ("nightly.config",)),
    ("planning", ("nightly.plan",)),
    ("day folder", ("nightly.workspace",)),
    ("history", ("nightly.history",)),
    ("executors", ("nightly.executors",)),
    ("builder images", ("nightly.images",)),
    ("builds", ("nightly.builds",)),
    ("publishing", ("nightly.publish",)),
    ("cluster", ("nightly.cluster",)),
    ("reporting", ("nightly.report",)),
    # `nightly bisect` rebuilds with the night's own steps, and a night may start a bisect.
    ("the night", ("nightly.night", "nightly.bisect")),
    ("command line", ("nightly.cli", "nightly.__main__")),
]


def layer_of(module: str) -> int | None:
    """The index in LAYERS of a nightly module (None for a module outside nightly)."""
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            named = module == prefix or module.startswith(prefix + ".")
            if named and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    return None if best is None else best[1]


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import of a nightly module; `from nightly import x` is x."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "nightly":
                found += [(node.lineno, f"nightly.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
    return [(line, m) for line, m in found if m == "nightly" or m.startswith("nightly.")]


def upward_imports(module: str, source: str) -> list[str]:
    me = layer_of(module)
    assert me is not None, f"{module} is in no layer: add it to LAYERS"
    bad = []
    for line, target in imported_modules(ast.parse(source)):
        them = layer_of(target)
        if them is not None and them > me:
            bad.append(f"{module}:{line} ({LAYERS[me][0]}) imports {target} ({LAYERS[them][0]})")
    return bad


def all_modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append((".".join(parts), path))
    return out


def test_no_module_imports_from_a_higher_layer() -> None:
    bad = []
    for module, path in all_modules():
        bad += upward_imports(module, path.read_text(encoding="utf-8"))
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_every_module_has_a_layer() -> None:
    assert [m for m, _ in all_modules() if layer_of(m) is None] == []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("nightly.builds.runner", "from nightly.report import terminal\n"),
        ("nightly.config.schema", "from nightly.plan.schedule import Plan\n"),
        ("nightly.executors.base", "if True:\n    import nightly.builds.cache\n"),
        ("nightly.workspace.summary", "def f():\n    from nightly.publish.upload import X\n"),
    ],
)
def test_a_planted_upward_import_is_found(module: str, source: str) -> None:
    assert upward_imports(module, source)


def test_imports_downward_and_sideways_pass() -> None:
    assert upward_imports("nightly.night.pipeline", "from nightly.builds import runner\n") == []
    assert upward_imports("nightly.config.schema", "from nightly.plan.matrix import Build\n") == []
    assert upward_imports("nightly.builds.runner", "from nightly.builds.jobs import make_job\n") == []
