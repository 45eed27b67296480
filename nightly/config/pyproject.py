"""A project's pyproject.toml, read as untrusted input: the one place nightly reads it.

The file is the project's (anyone who can push to the nightly branch, or whoever made an
sdist), so it is read bounded (MAX_BYTES), as strict UTF-8, with tomllib, and only the keys
nightly uses are taken out of it, each checked against the shape PEP 517/518/621 give it. A
file of another shape is a PyProjectError: one line naming the file and the key. Callers
decide what that costs: `nightly plan` and `nightly init` stop (exit 2), a night fails each
build of that source with the line as its reason (and still reports and notifies).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from nightly.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

NAME = "pyproject.toml"
# A pyproject.toml is a few KB; numpy's is 8 KB.
MAX_BYTES = 1 << 20


class PyProjectError(UsageError):
    """A project's pyproject.toml that nightly cannot use (not TOML, not PEP 517/621's shape)."""


@dataclass(frozen=True, kw_only=True)
class PyProject:
    """What nightly takes from a pyproject.toml (all empty when there is none)."""

    exists: bool = False
    requires: tuple[str, ...] = ()  # [build-system] requires
    backend: str = ""  # [build-system] build-backend
    name: str = ""  # [project] name
    version: str = ""  # [project] version
    dynamic: tuple[str, ...] = ()  # [project] dynamic
    requires_python: str = ""  # [project] requires-python
    dependencies: tuple[str, ...] = ()  # [project] dependencies
    tools: frozenset[str] = frozenset()  # the names under [tool]
    hatch_version_source: str = ""  # [tool.hatch.version] source


def _fail(path: Path, key: str, problem: str) -> PyProjectError:
    return PyProjectError(
        f"{path}: {key} {problem} (PEP 517/621); fix the project's pyproject.toml"
    )


def _kind(value: object) -> str:
    names: dict[type, str] = {dict: "a table", list: "an array", str: "a string"}
    return names.get(type(value), type(value).__name__)


def _table(data: dict[str, object], key: str, path: Path, where: str) -> dict[str, object]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise _fail(path, f"{where}{key}", f"is {_kind(value)}, not a table")
    return value


def _str(data: dict[str, object], key: str, path: Path, where: str) -> str:
    value = data.get(key, "")
    if not isinstance(value, str):
        raise _fail(path, f"{where}{key}", f"is {_kind(value)}, not a string")
    return value


def _strings(data: dict[str, object], key: str, path: Path, where: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(path, f"{where}{key}", f"is {_kind(value)}, not an array of strings")
    return tuple(value)


def _load(path: Path) -> dict[str, object]:
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise PyProjectError(f"{path}: cannot read it: {e.strerror or e}") from e
    if len(raw) > MAX_BYTES:
        raise PyProjectError(f"{path}: larger than {MAX_BYTES >> 10} KiB, not a pyproject.toml "
                             "nightly reads; fix the project's pyproject.toml")
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise PyProjectError(f"{path}: not UTF-8 (byte {e.start}); TOML files are UTF-8: fix "
                             "the project's pyproject.toml") from e
    except tomllib.TOMLDecodeError as e:
        raise PyProjectError(f"{path}: not TOML ({e}); fix the project's pyproject.toml") from e
    except RecursionError as e:  # tomllib recurses into nested arrays and inline tables
        raise PyProjectError(f"{path}: nested too deeply to read; fix the project's "
                             "pyproject.toml") from e


def read_pyproject(source: Path) -> PyProject:
    """`source`/pyproject.toml as nightly uses it; PyProject() when there is none (a
    symbolic link counts as none: the project's file, not one it points at)."""
    path = source / NAME
    if path.is_symlink() or not path.exists():
        return PyProject()
    if not path.is_file():
        raise PyProjectError(f"{path}: not a file; fix the project's pyproject.toml")
    data = _load(path)
    system = _table(data, "build-system", path, "")
    project = _table(data, "project", path, "")
    tool = _table(data, "tool", path, "")
    hatch = _table(tool, "hatch", path, "tool.")
    hatch_version = _table(hatch, "version", path, "tool.hatch.")
    return PyProject(
        exists=True,
        requires=_strings(system, "requires", path, "build-system."),
        backend=_str(system, "build-backend", path, "build-system."),
        name=_str(project, "name", path, "project."),
        version=_str(project, "version", path, "project."),
        dynamic=_strings(project, "dynamic", path, "project."),
        requires_python=_str(project, "requires-python", path, "project."),
        dependencies=_strings(project, "dependencies", path, "project."),
        tools=frozenset(tool),
        hatch_version_source=_str(hatch_version, "source", path, "tool.hatch.version."),
    )


def read_tool(source: Path) -> dict[str, object]:
    """`source`/pyproject.toml's [tool] table, read as read_pyproject reads the file (bounded,
    no symbolic link); {} when there is none. Callers check the shape of what they take."""
    path = source / NAME
    if path.is_symlink() or not path.is_file():
        return {}
    return _table(_load(path), "tool", path, "")


def pyproject_problem(source: Path) -> str | None:
    """Why `source`'s pyproject.toml cannot be used (one line), or None."""
    try:
        read_pyproject(source)
    except PyProjectError as e:
        return str(e)
    return None


__all__ = ["MAX_BYTES", "PyProject", "PyProjectError", "pyproject_problem", "read_pyproject",
           "read_tool"]
