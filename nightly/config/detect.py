"""What a project's source says about how it takes its version: `version_from = "auto"`.

Read with a TOML parser and `packaging` (pyproject.toml's [build-system] and [tool.*]
tables) and, for setup.py-only projects, by looking for the names a build would use. Never
runs the project's code.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from nightly.config.pyproject import PyProject, PyProjectError, read_pyproject

# Strategies a recipe understands (NIGHTLY_VERSION_FROM); "auto" is resolved to one of them.
STRATEGIES = ("env", "setuptools-scm", "rewrite", "keep")
_ENV_VARS = re.compile(r"\b(?:PYTORCH_)?BUILD_VERSION\b|\bOVERRIDE_PACKAGE_VERSION\b")
MAX_READ = 4 << 20  # of setup.py, setup.cfg: more is not a build file nightly reads
_SCM_IN_SETUP = re.compile(r"\bsetuptools_scm\b|\buse_scm_version\b")


@dataclass(frozen=True)
class VersionChoice:
    """The strategy a build uses and why (logged by the recipe, shown by `nightly plan`)."""

    strategy: str
    reason: str


def build_requirement_names(pyproject: PyProject) -> set[str]:
    names: set[str] = set()
    for text in pyproject.requires:
        try:
            names.add(canonicalize_name(Requirement(text).name))
        except InvalidRequirement:
            continue
    return names


def _read(path: Path) -> str:
    """A build file's text, the first MAX_READ bytes (the project's: read bounded)."""
    try:
        with path.open("rb") as f:
            return f.read(MAX_READ).decode("utf-8", errors="replace")
    except OSError:
        return ""


def detect_version_strategy(source: Path) -> VersionChoice:
    """How nightly can give this project's packages the nightly version. A pyproject.toml
    that is not of PEP 517/621's shape raises PyProjectError (one line)."""
    pyproject = read_pyproject(source)
    requires = build_requirement_names(pyproject)
    tool = pyproject.tools
    dynamic = "version" in pyproject.dynamic
    if "setuptools-scm" in requires or "setuptools_scm" in tool:
        return VersionChoice(
            "setuptools-scm", "pyproject.toml builds with setuptools-scm: it takes "
            "SETUPTOOLS_SCM_PRETEND_VERSION",
        )
    if "hatch-vcs" in requires and pyproject.hatch_version_source == "vcs":
        if (source / "PKG-INFO").is_file():
            # Hatchling builds an unpacked sdist with the version in its PKG-INFO: hatch-vcs
            # (and its SETUPTOOLS_SCM_PRETEND_VERSION) is not consulted.
            return VersionChoice(
                "rewrite", "an sdist of a hatch-vcs project: hatchling takes the version from "
                "PKG-INFO, so the built wheel is rewritten",
            )
        return VersionChoice(
            "setuptools-scm", "pyproject.toml builds with hatch-vcs, which takes "
            "SETUPTOOLS_SCM_PRETEND_VERSION",
        )
    if "versioningit" in requires or "versioningit" in tool:
        return VersionChoice(
            "rewrite", "pyproject.toml builds with versioningit, which takes no version "
            "from outside: the built wheel is rewritten",
        )
    setup_py = _read(source / "setup.py")
    build_files = setup_py + _read(source / "setup.cfg") + _read(source / "pyproject.toml")
    if _ENV_VARS.search(build_files):
        return VersionChoice("env", "the build reads BUILD_VERSION")
    if _SCM_IN_SETUP.search(setup_py):
        return VersionChoice(
            "setuptools-scm", "setup.py uses setuptools-scm: it takes SETUPTOOLS_SCM_PRETEND_VERSION",
        )
    if pyproject.exists or setup_py or (source / "setup.cfg").is_file():
        how = "a dynamic version" if dynamic else "its own version"
        return VersionChoice(
            "rewrite", f"the project sets {how} that cannot be set from outside: the built "
            "wheel is rewritten",
        )
    return VersionChoice("env", f"no pyproject.toml or setup.py in {source}: the build gets BUILD_VERSION")


@functools.lru_cache(maxsize=32)
def resolve_version_from(configured: str, source: Path) -> VersionChoice:
    """The strategy for `[project] version_from`: as configured, or detected for "auto"."""
    if configured != "auto":
        return VersionChoice(configured, f"[project] version_from = \"{configured}\"")
    found = detect_version_strategy(source)
    return VersionChoice(found.strategy, f"version_from = \"auto\": {found.reason}")


__all__ = [
    "STRATEGIES",
    "PyProjectError",
    "VersionChoice",
    "build_requirement_names",
    "detect_version_strategy",
    "read_pyproject",
    "resolve_version_from",
]
