"""What a project's source says about CPython's limited API (PEP 384): whether its extension
uses it, from which floor, and whether its wheel is declared `cp3X-abi3` (`nightly init`
writes `[project] limited_api` from it: nightly.core.limited).

Read, never run: setup.cfg (configparser), pyproject.toml (tomllib, bounded: its [tool]
tables), setup.py (parsed with `ast`, never executed), meson.build, CMakeLists.txt and the
compiled sources (a `Py_LIMITED_API` define; each file's first SCAN_BYTES). What declares the
wheel abi3:

- setuptools: `[bdist_wheel] py_limited_api = cp3X` (setup.cfg), `[tool.distutils.bdist_wheel]`
  (pyproject.toml), `options={"bdist_wheel": {"py_limited_api": "cp3X"}}` (setup.py), or a
  bdist_wheel subclass whose `get_tag()` says "cp3X", "abi3" (tree-sitter's grammars);
- scikit-build-core: `[tool.scikit-build] wheel.py-api = "cp3X"`;
- meson-python: `[tool.meson-python] limited-api = true`, the floor from meson.build's
  `limited_api: '3.X'` on `py.extension_module`.

`Extension(..., py_limited_api=True)` ([tool.setuptools] ext-modules' `py-limited-api`), a
meson.build `limited_api:` alone, or a `Py_LIMITED_API` define say the extension uses the
limited API; without one of the above its wheel is still tagged for one Python
(`cp310-cp310`), and is built once per Python.
"""

from __future__ import annotations

import ast
import configparser
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nightly.config.pyproject import read_tool

MAX_READ = 4 << 20  # of setup.py, setup.cfg, meson.build
SCAN_BYTES = 256 << 10  # of each source file scanned for a Py_LIMITED_API define
MAX_SCANNED = 2000  # source files scanned
_SCANNED = {".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".pyx", ".pxd", ".txt", ".build",
            ".cmake", ".py", ".cfg", ".toml"}
_DEFINE = re.compile(rb"Py_LIMITED_API\b[\s\"',=:)\]]*?(?:\(\s*)?(0x0*3[0-9A-Fa-f]{6})\b")
_MESON_LIMITED = re.compile(r"""\blimited_api\s*:\s*['"]3\.([0-9]{1,2})['"]""")
_TAG = re.compile(r"^cp3([0-9]{1,2})$")


@dataclass(frozen=True, kw_only=True)
class LimitedApi:
    """A project that uses the limited API."""

    floor: str  # cp310: the oldest CPython the wheel is for ("" when nothing says)
    tagged: bool  # its wheel is declared abi3 (so one wheel serves every Python from floor)
    evidence: tuple[str, ...]  # what said so, in words ("setup.cfg [bdist_wheel] ...")


def _text(path: Path, limit: int = MAX_READ) -> bytes:
    """A file of the project, never through a symbolic link, its first `limit` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return b""
    with os.fdopen(fd, "rb") as f:
        try:
            return f.read(limit)
        except OSError:
            return b""


def _tag_floor(value: object) -> str:
    """`cp310` -> cp310; `cp310.cp315t` (scikit-build-core: abi3 from 3.10, abi3t from 3.15t)
    -> cp310; anything else (py3, True, a number, a free-threaded tag alone) -> ""."""
    if not isinstance(value, str):
        return ""
    found = [m for part in value.strip().lower().split(".") if (m := _TAG.match(part))]
    return f"cp3{min(int(m.group(1)) for m in found)}" if found else ""


def _hex_floor(text: str) -> str:
    """0x030A0000 -> cp310."""
    value = int(text, 16)
    major, minor = value >> 24, (value >> 16) & 0xFF
    return f"cp3{minor}" if major == 3 else ""


def _minor(tag: str) -> int:
    return int(tag[3:])


class _Found:
    def __init__(self) -> None:
        self.tags: list[str] = []  # floors of declared abi3 wheels
        self.floors: list[str] = []  # floors of defines and meson's limited_api
        self.tagged = False
        self.evidence: list[str] = []

    def tag(self, floor: str, where: str) -> None:
        self.tagged = True
        if floor:
            self.tags.append(floor)
        self.evidence.append(where)

    def uses(self, floor: str, where: str) -> None:
        if floor:
            self.floors.append(floor)
        self.evidence.append(where)


def _setup_cfg(source: Path, found: _Found) -> None:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(_text(source / "setup.cfg").decode("utf-8", errors="replace"))
        value = parser.get("bdist_wheel", "py_limited_api", fallback="")
    except configparser.Error:
        return
    floor = _tag_floor(value)
    if floor:
        found.tag(floor, f"setup.cfg [bdist_wheel] py_limited_api = {floor}")


def _table(node: object, *keys: str) -> object:
    for key in keys:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def _pyproject(source: Path, found: _Found) -> None:
    tool = read_tool(source)  # PyProjectError: one line (init stops, exit 2)
    floor = _tag_floor(_table(tool, "distutils", "bdist_wheel", "py_limited_api"))
    if floor:
        found.tag(floor, f"pyproject.toml [tool.distutils.bdist_wheel] py_limited_api = {floor}")
    floor = _tag_floor(_table(tool, "scikit-build", "wheel", "py-api"))
    if floor:
        found.tag(floor, f"pyproject.toml [tool.scikit-build] wheel.py-api = {floor}")
    if _table(tool, "meson-python", "limited-api") is True:
        found.tag("", "pyproject.toml [tool.meson-python] limited-api = true")
    modules = _table(tool, "setuptools", "ext-modules")
    if isinstance(modules, list) and any(isinstance(m, dict) and m.get("py-limited-api") is True
                                         for m in modules):
        found.uses("", "pyproject.toml [tool.setuptools] ext-modules with py-limited-api = true")


def _setup_py(source: Path, found: _Found) -> None:
    try:
        tree = ast.parse(_text(source / "setup.py"))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return
    flagged = False
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "py_limited_api":
            if isinstance(node.value, ast.Constant) and node.value.value is True:
                flagged = True
            elif floor := _tag_floor(getattr(node.value, "value", None)):
                found.tag(floor, f"setup.py py_limited_api={floor!r}")
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=False):
                if (isinstance(key, ast.Constant) and key.value == "py_limited_api"
                        and isinstance(value, ast.Constant)
                        and (floor := _tag_floor(value.value))):
                    found.tag(floor, f"setup.py bdist_wheel py_limited_api {floor!r}")
    _get_tag(tree, found)
    if flagged:
        found.uses("", "setup.py Extension(..., py_limited_api=True)")


def _get_tag(tree: ast.AST, found: _Found) -> None:
    """A bdist_wheel subclass whose get_tag() returns an "abi3" tag (tree-sitter's grammars:
    `python, abi = "cp39", "abi3"`): the wheel is declared abi3, its floor the cp3X there."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.FunctionDef) and node.name == "get_tag"):
            continue
        words = [n.value for n in ast.walk(node)
                 if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        if "abi3" in words:
            floors = [f for w in words if (f := _tag_floor(w))]
            floor = min(floors, key=_minor) if floors else ""
            found.tag(floor, "setup.py bdist_wheel.get_tag() returns "
                      + (f"{floor}-abi3" if floor else "abi3"))
            return


def _meson(source: Path, found: _Found) -> None:
    text = _text(source / "meson.build").decode("utf-8", errors="replace")
    m = _MESON_LIMITED.search(text)
    if m:
        floor = f"cp3{int(m.group(1))}"
        found.uses(floor, f"meson.build limited_api: '3.{int(m.group(1))}'")


def _defines(source: Path, files: Sequence[Path], found: _Found) -> None:
    """The lowest `Py_LIMITED_API 0x03XY0000` of the sources and build files."""
    best, where = "", ""
    scanned = [f for f in files if f.suffix in _SCANNED][:MAX_SCANNED]
    for f in scanned:
        for m in _DEFINE.finditer(_text(f, SCAN_BYTES)):
            floor = _hex_floor(m.group(1).decode())
            if floor and (not best or _minor(floor) < _minor(best)):
                best, where = floor, f"{f.relative_to(source)} Py_LIMITED_API {m.group(1).decode()}"
    if best:
        found.uses(best, where)


def detect_limited_api(source: Path, files: Sequence[Path] = ()) -> LimitedApi | None:
    """The project's limited-API use (None: none found). `files`: the tree's files (as
    `nightly init` walked it) scanned for a Py_LIMITED_API define."""
    found = _Found()
    _setup_cfg(source, found)
    _pyproject(source, found)
    _setup_py(source, found)
    _meson(source, found)
    _defines(source, files, found)
    if not found.evidence:
        return None
    # The wheel's declared tag is its floor; else what a define or meson says. Of several
    # (a setup.py's branches per platform: psutil's cp36 on Linux and macOS, cp37 on
    # Windows), the lowest.
    pool = found.tags or found.floors
    floor = min(pool, key=_minor) if pool else ""
    return LimitedApi(floor=floor, tagged=found.tagged,
                      evidence=tuple(dict.fromkeys(found.evidence)))


__all__ = ["LimitedApi", "detect_limited_api"]
