"""No module of nightly imports from a layer above its own, no imports go round in a cycle, no
two folders of nightly need each other, and every module has a layer.

The layer order is written here once, lowest first; docs/architecture.md draws the same table.
A module belongs to the layer of the longest entry that names it: a package entry
(`nightly.config`) names the package and every module under it; the base layer's entries name
single modules (the root `nightly` names only `nightly/__init__.py`), so a new top-level module
belongs to no layer until it is added to BASE. Imports inside functions and under
TYPE_CHECKING count too: a type-only or deferred upward import is still a dependency upward,
and a cycle through a function-level import is still a cycle.

The folder check reads no table: it groups modules by their folder of nightly/ (a flat module
is its own unit), so no entry of LAYERS can hide a circle by naming a folder's modules apart
(as a "vocabulary" layer of plan.matrix and images.spec once hid config -> images ->
executors -> config). It counts module-level imports only: those Python runs when the module
is imported (at the top, in a class body, under a module-level `if` or `try`), not those
inside a function or under `if TYPE_CHECKING:`. A circle of module-level imports is the one
that breaks an import and ties folders into one; the deferred ones are held to the layer order
by the checks above.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pytest

from tests.support.sources import parsed

PACKAGE = Path(__file__).resolve().parents[2] / "nightly"
ROOT = "nightly"

# The base layer, module by module: they import no other nightly module but each other.
# A new shared helper module (e.g. nightly/procs.py) is added here.
BASE: tuple[str, ...] = (
    ROOT,
    "nightly.errors",
    "nightly.files",
    "nightly.redact",
    "nightly.format",
    "nightly.hardening",
    "nightly.reach",
    "nightly.procs",
    "nightly.jsonvalues",
)

Layers = Sequence[tuple[str, tuple[str, ...]]]

LAYERS: Layers = [
    ("base", BASE),
    # Pure data every layer speaks: a build and its identifiers, axes, a builder image's spec,
    # the manylinux policy. A folder of its own, below config, plan, images and executors.
    ("vocabulary", ("nightly.core",)),
    ("configuration", ("nightly.config",)),
    ("planning", ("nightly.plan",)),
    ("day folder", ("nightly.workspace",)),
    ("history", ("nightly.history",)),
    # Where published files go (S3, a folder) and the bucket layout; cluster staging uses them.
    ("object stores", ("nightly.stores",)),
    ("index pages", ("nightly.index",)),
    # conda, anaconda.org, twine: below builds, whose smoke test installs with the conda client.
    ("channel clients", ("nightly.channels",)),
    ("executors", ("nightly.executors",)),
    ("builder images", ("nightly.images",)),
    # builds/ by job, lowest first: what a person sees, the compiler cache, platform rules, the
    # area a build runs in, reproducibility, running one build, testing it, and the session
    # every caller opens. `nightly.builds` itself (an empty package) sits with the lowest; a
    # module directly in builds/ is refused by test_builds_modules_live_in_a_sub_package.
    ("builds: live view", ("nightly.builds", "nightly.builds.view")),
    ("builds: compiler cache", ("nightly.builds.cache",)),
    ("builds: platform rules", ("nightly.builds.rules",)),
    ("builds: build area", ("nightly.builds.area",)),
    ("builds: reproducibility", ("nightly.builds.repro",)),
    ("builds: running", ("nightly.builds.run",)),
    ("builds: testing", ("nightly.builds.test",)),
    ("builds: session", ("nightly.builds.session",)),
    ("provenance", ("nightly.provenance",)),
    ("publishing", ("nightly.publish",)),
    ("cluster", ("nightly.cluster",)),
    ("reporting", ("nightly.report",)),
    # `nightly bisect` rebuilds one build with the builds' Runner; a night may start a bisect.
    ("bisect", ("nightly.bisect",)),
    ("the night", ("nightly.night",)),
    ("command line", ("nightly.cli", "nightly.__main__")),
]


def entry_of(module: str, layers: Layers = LAYERS) -> tuple[int, str] | None:
    """(layer index, entry) of the longest entry naming `module`; None for a module of no layer.
    The root names only itself: as a prefix it would name every module."""
    best: tuple[int, str] | None = None
    for index, (_, entries) in enumerate(layers):
        for entry in entries:
            named = module == entry or (entry != ROOT and module.startswith(entry + "."))
            if named and (best is None or len(entry) > len(best[1])):
                best = (index, entry)
    return best


def layer_of(module: str, layers: Layers = LAYERS) -> int | None:
    """The index in `layers` of a nightly module (None for a module of no layer)."""
    found = entry_of(module, layers)
    return None if found is None else found[0]


def imported_modules(module: str, tree: ast.AST, known: Iterable[str] = ()) -> list[tuple[int, str]]:
    """(line, module) of every import of a nightly module by `module`, wherever it is (module
    level, a function, TYPE_CHECKING). `from P import n` is the module P.n when that is one of
    `known` (or P is the root), else P; relative imports are resolved against `module`."""
    modules = set(known)
    package = module if (PACKAGE / Path(*module.split(".")[1:]) / "__init__.py").exists() \
        else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append((node.lineno, sub if sub in modules or base == ROOT else base))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
    return [(line, m) for line, m in found if m == ROOT or m.startswith(ROOT + ".")]


def upward_imports(module: str, source: str, layers: Layers = LAYERS) -> list[str]:
    me = layer_of(module, layers)
    assert me is not None, f"{module} is in no layer: add it to LAYERS (a base module to BASE)"
    bad = []
    for line, target in imported_modules(module, parsed(source)):
        them = layer_of(target, layers)
        if them is not None and them > me:
            bad.append(f"{module}:{line} ({layers[me][0]}) imports {target} ({layers[them][0]})")
    return bad


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def module_level(tree: ast.Module) -> ast.Module:
    """The imports Python runs when the module is imported: at the top, in class bodies, under
    module-level `if`/`try`/`with`; not inside a function or under `if TYPE_CHECKING:` (its
    `else:` runs, so it counts)."""
    found: list[ast.stmt] = []

    def visit(body: Iterable[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.append(node)
            elif isinstance(node, ast.If):
                if not is_type_checking(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.ClassDef | ast.With | ast.For | ast.While):
                visit(node.body)
                visit(getattr(node, "orelse", []))
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)

    visit(tree.body)
    return ast.Module(body=found, type_ignores=[])


def import_graph(sources: Mapping[str, str], only_module_level: bool = False) -> dict[str, set[str]]:
    """module -> the nightly modules it imports (anywhere in it, or `only_module_level`), for
    the modules of `sources`. An import of a module that is not in `sources` is an edge to the
    nearest package that is (`nightly.publish.X` of a name defined in its __init__)."""
    graph: dict[str, set[str]] = {m: set() for m in sources}
    for module, source in sources.items():
        tree = parsed(source)
        if only_module_level:
            tree = module_level(tree)
        for _, target in imported_modules(module, tree, sources):
            while target not in sources and "." in target:
                target = target.rpartition(".")[0]
            if target in sources and target != module:
                graph[module].add(target)
    return graph


def package_graph(graph: Mapping[str, set[str]], layers: Layers = LAYERS) -> dict[str, set[str]]:
    """The same imports between layer entries (packages, base modules): a cycle here goes
    between packages, e.g. two packages of one layer that import each other."""
    def unit(module: str) -> str:
        found = entry_of(module, layers)
        return module if found is None else found[1]

    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        mine = out.setdefault(unit(module), set())
        mine |= {unit(t) for t in targets} - {unit(module)}
    return out


def folder_of(module: str) -> str:
    """A module's folder of nightly/ (`nightly.config.schema` -> `nightly.config`); a flat module
    (`nightly.errors`) and the root are units of their own."""
    return ".".join(module.split(".")[:2])


def folder_graph(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """The imports between nightly's folders (and flat modules), whatever LAYERS says."""
    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        mine = out.setdefault(folder_of(module), set())
        mine |= {folder_of(t) for t in targets} - {folder_of(module)}
    return out


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted, as
    every import cycle's members; [] when the graph has no cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        # Iterative depth-first search: the import graph is deep enough for recursion limits.
        work = [(node, iter(sorted(graph.get(node, ()))))]
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        while work:
            current, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[current] = min(low[current], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[current])
            if low[current] == index[current]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == current:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def unlayered(modules: Iterable[str], layers: Layers = LAYERS) -> list[str]:
    return [m for m in modules if layer_of(m, layers) is None]


def all_modules(package: Path = PACKAGE) -> list[tuple[str, Path]]:
    out = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append((".".join(parts), path))
    return out


def all_sources(package: Path = PACKAGE) -> dict[str, str]:
    """module -> source of every module of `package` (another checkout's nightly/ too)."""
    return {m: path.read_text(encoding="utf-8") for m, path in all_modules(package)}


def folder_cycles(package: Path = PACKAGE) -> list[list[str]]:
    return cycles(folder_graph(import_graph(all_sources(package), only_module_level=True)))


# ------------------------------------------------------------------------------ the real tree


def test_no_module_imports_from_a_higher_layer() -> None:
    bad = []
    for module, source in all_sources().items():
        bad += upward_imports(module, source)
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_every_module_has_a_layer() -> None:
    assert unlayered(m for m, _ in all_modules()) == []


def test_no_import_cycle_between_modules() -> None:
    found = cycles(import_graph(all_sources()))
    assert found == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_import_cycle_between_packages() -> None:
    found = cycles(package_graph(import_graph(all_sources())))
    assert found == [], "import cycles between packages:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_circle_between_folders_at_module_level() -> None:
    found = folder_cycles()
    assert found == [], "folders that import each other at module level:\n" + "\n".join(
        " <-> ".join(c) for c in found)


def builds_flat_modules(package: Path = PACKAGE) -> list[str]:
    """Modules directly in builds/ (besides its __init__): each belongs in a sub-package by job."""
    return sorted(p.name for p in (package / "builds").glob("*.py") if p.name != "__init__.py")


def test_builds_modules_live_in_a_sub_package() -> None:
    assert builds_flat_modules() == []


def test_a_planted_flat_module_in_builds_is_found(tmp_path: Path) -> None:
    (tmp_path / "builds" / "run").mkdir(parents=True)
    (tmp_path / "builds" / "__init__.py").write_text("")
    (tmp_path / "builds" / "run" / "runner.py").write_text("")
    assert builds_flat_modules(tmp_path) == []
    (tmp_path / "builds" / "helpers.py").write_text("")
    assert builds_flat_modules(tmp_path) == ["helpers.py"]


def test_the_layer_table_names_only_what_exists() -> None:
    """An entry left behind by a move would silently name nothing."""
    modules = [m for m, _ in all_modules()]
    for _, entries in LAYERS:
        for entry in entries:
            assert any(m == entry or m.startswith(entry + ".") for m in modules), entry


def test_the_docs_draw_the_same_layers() -> None:
    """docs/architecture.md's layer table names the layers of LAYERS, in order, and the
    README's Layout list names every folder and module of `ls nightly/`."""
    lines = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8").splitlines()
    head = lines.index("| layer | folder / module | owns |")
    rows = []
    for line in lines[head + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1].strip())
    assert rows == [name for name, _ in LAYERS]
    readme = (PACKAGE.parent / "README.md").read_text(encoding="utf-8")
    layout = readme.split("## Layout", 1)[1].split("\nrecipes/", 1)[0]
    names = [f"{p.name}/" for p in PACKAGE.iterdir() if (p / "__init__.py").exists()]
    names += [p.name for p in PACKAGE.glob("*.py") if not p.name.startswith("__")]
    words = set(re.findall(r"[\w.]+/?", layout))
    assert [n for n in sorted(names) if n not in words] == []


# ------------------------------------------------------------------ planted failures: each check
# can fail


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("nightly.builds.run.runner", "from nightly.report import terminal\n"),
        ("nightly.config.schema", "from nightly.plan.schedule import Plan\n"),
        ("nightly.executors.base", "if True:\n    import nightly.builds.cache.wiring\n"),
        ("nightly.workspace.summary", "def f():\n    from nightly.publish.upload import X\n"),
        ("nightly.stores.s3", "from nightly.index import regenerate\n"),
        ("nightly.channels.conda", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                   "    from nightly.builds.test.smoke import SmokeTester\n"),
        ("nightly.bisect.run", "def f():\n    from nightly.night.pipeline import run_night\n"),
        ("nightly.errors", "from nightly import config\n"),
        # Inside builds/: a lower sub-package reaching a higher one, however it is written.
        ("nightly.builds.run.jobs", "from nightly.builds.session.build_session import open_session\n"),
        ("nightly.builds.area.userarea", "def f():\n    from nightly.builds.run import runner\n"),
        ("nightly.builds.cache.wiring", "import nightly.builds.area.slot\n"),
        ("nightly.builds.view.progress", "from nightly.builds.test.smoke import night_smoke\n"),
        ("nightly.builds.repro.check", "from ..run.collect import collect_build\n"),
    ],
)
def test_a_planted_upward_import_is_found(module: str, source: str) -> None:
    assert upward_imports(module, source)


def test_imports_downward_and_sideways_pass() -> None:
    assert upward_imports("nightly.night.pipeline", "from nightly.builds import runner\n") == []
    assert upward_imports("nightly.config.schema", "from nightly.core.matrix import Build\n") == []
    assert upward_imports("nightly.builds.run.runner", "from nightly.builds.run.jobs import make_job\n") == []
    assert upward_imports("nightly.builds.session.build_session",
                          "from nightly.builds.run import runner\n") == []
    assert upward_imports("nightly.builds.test.smoke", "from nightly.builds.area import ownership\n") == []
    assert upward_imports("nightly.night.pipeline", "def f():\n    from nightly.bisect import auto\n") == []


def test_a_planted_cycle_through_a_function_level_import_is_found() -> None:
    """The cycle this table once hid: bisect.auto -> bisect.run -> night.pipeline -> bisect.auto,
    the last two inside functions."""
    sources = {
        "nightly.bisect.auto": "from nightly.bisect.run import bisect\n",
        "nightly.bisect.run": "def run():\n    from nightly.night.pipeline import smoke_factory\n",
        "nightly.night.pipeline": "def night():\n    from nightly.bisect.auto import bisect_new\n",
        "nightly.errors": "",
    }
    assert cycles(import_graph(sources)) == [
        ["nightly.bisect.auto", "nightly.bisect.run", "nightly.night.pipeline"]
    ]
    sources["nightly.bisect.run"] = "from nightly.errors import UsageError\n"
    assert cycles(import_graph(sources)) == []


def test_a_planted_cycle_between_modules_of_one_package_is_found() -> None:
    sources = {
        "nightly.index": "from nightly.index import pages\n",
        "nightly.index.pages": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                               "    from nightly.index import IndexOptions\n",
    }
    assert cycles(import_graph(sources)) == [["nightly.index", "nightly.index.pages"]]


def test_a_planted_cycle_between_packages_of_one_layer_is_found() -> None:
    """No module cycle, but two packages of one layer that need each other."""
    layers = [("base", (ROOT,)), ("the night", ("nightly.night", "nightly.bisect"))]
    sources = {
        "nightly.bisect.run": "from nightly.night import source\n",
        "nightly.night.source": "",
        "nightly.night.pipeline": "def f():\n    from nightly.bisect.auto import x\n",
        "nightly.bisect.auto": "",
    }
    graph = import_graph(sources)
    assert cycles(graph) == []
    assert cycles(package_graph(graph, layers)) == [["nightly.bisect", "nightly.night"]]
    assert upward_imports("nightly.bisect.run", sources["nightly.bisect.run"], layers) == []


def test_a_planted_module_of_no_layer_is_found() -> None:
    """The root names only itself: a new top-level module is in no layer until added to BASE."""
    assert unlayered(["nightly.errors", "nightly.newhelper", "nightly.newstage.thing"]) == [
        "nightly.newhelper", "nightly.newstage.thing"]
    assert layer_of(ROOT) == 0
    extended = [("base", (*BASE, "nightly.newhelper")), *LAYERS[1:]]
    assert unlayered(["nightly.newhelper"], extended) == []
    with pytest.raises(AssertionError, match="in no layer"):
        upward_imports("nightly.newhelper", "import os\n")


def test_a_planted_circle_between_folders_is_found() -> None:
    """The knot issue 49 found, each edge at module level between modules no cycle joins:
    config -> images.spec, images.engine -> executors, executors -> config."""
    sources = {
        "nightly.config.schema": "from nightly.images.spec import BuilderSpec\n",
        "nightly.images.spec": "",
        "nightly.images.engine": "from nightly.executors.container_engine import NVCC_LABEL\n",
        "nightly.executors": "from nightly.config import Config\n",
        "nightly.executors.container_engine": "",
        "nightly.config": "",
    }
    assert cycles(import_graph(sources)) == []
    found = cycles(folder_graph(import_graph(sources, only_module_level=True)))
    assert found == [["nightly.config", "nightly.executors", "nightly.images"]]
    # The vocabulary moved below them all: no circle is left.
    del sources["nightly.images.spec"]
    sources["nightly.core.spec"] = ""
    sources["nightly.config.schema"] = "from nightly.core.spec import BuilderSpec\n"
    assert cycles(folder_graph(import_graph(sources, only_module_level=True))) == []


@pytest.mark.parametrize(
    ("source", "counted"),
    [
        ("from nightly.config import Config\n", True),
        ("import nightly.config.schema\n", True),
        ("try:\n    from nightly.config import Config\nexcept ImportError:\n    pass\n", True),
        ("class C:\n    from nightly.config import Config\n", True),
        ("import typing\nif typing.TYPE_CHECKING:\n    pass\nelse:\n    import nightly.config\n", True),
        ("def f():\n    from nightly.config import Config\n", False),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from nightly.config import Config\n",
         False),
        ("class C:\n    def m(self):\n        import nightly.config\n", False),
    ],
)
def test_which_imports_are_module_level(source: str, counted: bool) -> None:
    sources = {"nightly.executors": source, "nightly.config": "from nightly.executors import x\n",
               "nightly.config.schema": ""}
    found = cycles(folder_graph(import_graph(sources, only_module_level=True)))
    assert found == ([["nightly.config", "nightly.executors"]] if counted else [])
