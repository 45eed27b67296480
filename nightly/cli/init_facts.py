"""What `nightly init` reads of a project's source: its name, version, requires-python, whether
it compiles, its import name and version strategy (`read_facts`), and which of the Pythons init
offers its requires-python allows (`allowed_pythons`).

Read, never run: pyproject.toml (TOML parser), PKG-INFO (an sdist's core metadata),
setup.cfg and setup.py (the literals a build would use), the tree (compiled sources,
packages). `scaffold.py` renders and writes the configuration from these facts.
"""

from __future__ import annotations

import configparser
import os
import re
import sys
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from nightly.cli import init_choices as choices
from nightly.cli import init_fortran
from nightly.config.abi3 import LimitedApi, detect_limited_api
from nightly.config.detect import MAX_READ, VersionChoice, detect_version_strategy
from nightly.config.pyproject import PyProject, read_pyproject

if sys.version_info >= (3, 11):
    pass
else:  # pragma: no cover - Python 3.10
    pass

# The CPython versions `init` offers, oldest first (what the recipes and images know).
CANDIDATE_PYTHONS = ("3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "3.14", "3.15")
_COMPILED = {".c", ".cc", ".cpp", ".cxx", ".pyx", ".rs", ".cu", *init_fortran.FORTRAN_SUFFIXES}
_COMPILING_BACKENDS = ("scikit_build_core", "mesonpy", "maturin", "setuptools_rust")
_SKIP_DIRS = {"tests", "test", "docs", "doc", "examples", "benchmarks", "build", "dist",
              "venv", ".venv", ".git", ".tox", ".nox"}
NO_FORTRAN = init_fortran.FortranFacts()
_VERSION_LITERAL = re.compile(r"""(?m)^\s*__version__\s*=\s*['"]([^'"]+)['"]""")
_SETUP_LITERAL = re.compile(r"""\b{key}\s*=\s*['"]([^'"]+)['"]""")


@dataclass(frozen=True, kw_only=True)
class ProjectFacts:
    """What `nightly init` found in a project's source."""

    source: Path
    name: str
    version: str  # the release it builds, as found ("" when nothing said)
    base_version: str  # digits and dots: nightly versions are <base_version>.devYYYYMMDD
    requires_python: str
    compiled: bool
    compiled_why: str
    import_name: str
    strategy: VersionChoice
    dependencies: tuple[str, ...] = ()  # runtime requirements (no extras), as written
    zig_why: str = ""  # why init picks toolchain = "zig" ("" : the default sysroot)
    limited_api: LimitedApi | None = None  # its limited-API use (nightly.config.abi3)
    branch: str = ""  # a git folder's checked-out branch ("": not git, or a detached HEAD)
    fortran: init_fortran.FortranFacts = NO_FORTRAN  # its Fortran, BLAS/LAPACK (init_fortran)


def _text(path: Path) -> str:
    """A file of the project, never through a symbolic link, its first MAX_READ bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as f:
        try:
            return f.read(MAX_READ).decode("utf-8", errors="replace")
        except OSError:
            return ""


def _pkg_info(source: Path) -> dict[str, str]:
    text = _text(source / "PKG-INFO")
    if not text:
        return {}
    msg = HeaderParser().parsestr(text)
    return {k: str(v) for k, v in msg.items()}


def _setup_cfg(source: Path) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(_text(source / "setup.cfg"))
    except configparser.Error:
        return {}
    out = dict(parser["metadata"]) if parser.has_section("metadata") else {}
    if parser.has_option("options", "python_requires"):
        out["python_requires"] = parser.get("options", "python_requires")
    return out


def _setup_literal(setup_py: str, key: str) -> str:
    m = re.search(_SETUP_LITERAL.pattern.format(key=key), setup_py)
    return m.group(1) if m else ""


def _version(source: Path, pyproject: PyProject, import_dir: Path | None) -> str:
    """The project's release version: static pyproject, PKG-INFO, setup.cfg (a literal or
    `attr:`), a setup.py literal, a `__version__` literal in the package."""
    if pyproject.version:
        return pyproject.version
    found = _pkg_info(source).get("Version", "")
    cfg = _setup_cfg(source).get("version", "").strip()
    if not found and cfg and not cfg.startswith(("attr:", "file:")):
        found = cfg
    found = found or _setup_literal(_text(source / "setup.py"), "version")
    if not found and import_dir is not None:
        m = _VERSION_LITERAL.search(_text(import_dir / "__init__.py"))
        found = m.group(1) if m else ""
    return found


def _base_version(version: str) -> str:
    try:
        return ".".join(str(n) for n in Version(version).release)
    except InvalidVersion:
        return ""


def _walk(source: Path, depth: int = 4) -> list[Path]:
    """Files of the tree, down to `depth`, outside tests/docs/build folders."""
    out: list[Path] = []
    stack = [(source, 0)]
    while stack:
        folder, level = stack.pop()
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.is_symlink():  # the project's tree only: a link may point anywhere
                continue
            if entry.is_dir():
                if level < depth and entry.name not in _SKIP_DIRS and not entry.name.startswith("."):
                    stack.append((entry, level + 1))
            else:
                out.append(entry)
    return out


def _top_level(source: Path) -> str:
    """The first top-level module an sdist made by setuptools lists (egg-info/top_level.txt:
    pyahocorasick installs `ahocorasick`), else setup.py's ext_package or the first extension
    module it names."""
    for listing in sorted(source.glob("*.egg-info/top_level.txt")) + sorted(
        source.glob("src/*.egg-info/top_level.txt")
    ):
        names = [n.strip() for n in _text(listing).splitlines() if n.strip()]
        public = [n for n in names if not n.startswith("_")]
        if public or names:
            return (public or names)[0]
    setup_py = _text(source / "setup.py")
    # ext_package="tree_sitter_json": the extensions' names are inside that package.
    m = (re.search(r"""\bext_package\s*=\s*['"]([\w.]+)['"]""", setup_py)
         or re.search(r"""\bExtension\s*\(\s*(?:name\s*=\s*)?['"]([\w.]+)['"]""", setup_py))
    return m.group(1).split(".")[0] if m else ""


def _import_dir(source: Path, name: str, files: list[Path]) -> Path | None:
    """The package folder the project installs: the one named like the project, else the
    shallowest folder with an __init__.py."""
    inits = sorted((f.parent for f in files if f.name == "__init__.py"),
                   key=lambda p: (len(p.relative_to(source).parts), str(p)))
    want = canonicalize_name(name).replace("-", "_")
    for folder in inits:
        if folder.name.lower() == want:
            return folder
    return inits[0] if inits else None


def _compiled(source: Path, pyproject: PyProject, files: list[Path]) -> tuple[bool, str]:
    backend = pyproject.backend
    if backend.startswith(_COMPILING_BACKENDS):
        return True, f"its build backend is {backend}"
    sources = sorted(str(f.relative_to(source)) for f in files if f.suffix in _COMPILED)
    if sources:
        more = f" and {len(sources) - 3} more" if len(sources) > 3 else ""
        return True, f"it has compiled sources ({', '.join(sources[:3])}{more})"
    if re.search(r"\bExtension\s*\(|\bext_modules\b", _text(source / "setup.py")):
        return True, "its setup.py declares extension modules"
    return False, "no compiled sources, no extension modules, no compiling build backend"


def read_facts(source: Path) -> ProjectFacts:
    pyproject = read_pyproject(source)  # PyProjectError: one line, exit 2
    info, cfg, setup_py = _pkg_info(source), _setup_cfg(source), _text(source / "setup.py")
    name = (pyproject.name or info.get("Name", "") or cfg.get("name", "")
            or _setup_literal(setup_py, "name") or source.name)
    files = _walk(source)
    import_dir = _import_dir(source, name, files)
    version = _version(source, pyproject, import_dir)
    requires = (pyproject.requires_python or info.get("Requires-Python", "")
                or cfg.get("python_requires", "") or _setup_literal(setup_py, "python_requires"))
    compiled, why = _compiled(source, pyproject, files)
    fortran = init_fortran.detect(source, files, pyproject.requires)
    if fortran.needed and not compiled:
        compiled, why = True, fortran.fortran or fortran.lapack
    return ProjectFacts(
        source=source, name=name, version=version, base_version=_base_version(version),
        requires_python=requires.strip(), compiled=compiled, compiled_why=why,
        import_name=(_top_level(source) or (import_dir.name if import_dir else "")
                     or canonicalize_name(name).replace("-", "_")),
        strategy=detect_version_strategy(source),
        branch=choices.current_branch(source),
        dependencies=choices.dependencies(source, pyproject.dependencies,
                                          _text(source / "setup.cfg"), setup_py),
        zig_why=choices.zig_why(files) if compiled and not fortran.needed else "",
        limited_api=detect_limited_api(source, files) if compiled else None,
        fortran=fortran,
    )


def allowed_pythons(requires_python: str) -> list[str]:
    """The candidate Pythons `requires-python` allows (each as its newest patch release)."""
    try:
        spec = SpecifierSet(requires_python)
    except InvalidSpecifier:
        return list(CANDIDATE_PYTHONS)
    return [xy for xy in CANDIDATE_PYTHONS if spec.contains(f"{xy}.99", prereleases=True)]
