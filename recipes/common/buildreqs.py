"""Build requirements of a project, checked against the interpreter that runs this file.

Run by the recipes with the build's own interpreter (Python 3.7+) for builds *without*
isolation ([build] isolation = false): the build then sees only the packages of the
interpreter (or the image), so every requirement of the project's build system must already
be there, at a version its specifier accepts. Requirements are read with a TOML parser and
evaluated with `packaging` (the installed one, else the copy pip vendors), never by hand:
extras, version specifiers and environment markers all count, as pip would count them.

  buildreqs.py check SRC     exit 0 if every requirement of SRC's build system is met here
                             (the static [build-system] requires, then what the backend asks
                             for in get_requires_for_build_wheel); else print each unmet
                             requirement with the version installed, and exit 1
  buildreqs.py list SRC      the static requirements, one a line (markers kept)
  buildreqs.py dynamic SRC PYTHON
                             what SRC's backend asks for on top of them
                             (get_requires_for_build_wheel), one a line, the backend run by
                             the interpreter PYTHON (whose environment has the static ones);
                             this file may run with another interpreter that has pip
  buildreqs.py backend SRC   the backend's module (setuptools.build_meta, mesonpy, ...)

Isolated builds use list and dynamic to install the requirements into the build's own venv,
whose path is the same every night (lib.sh, stable_build_requirements).
"""

from __future__ import annotations

import os
import sys

# PEP 517's fallback for a project without a [build-system] table.
DEFAULT_REQUIRES = ["setuptools>=40.8.0"]
DEFAULT_BACKEND = "setuptools.build_meta:__legacy__"


def _toml_loads():
    """A TOML parser's loads: tomllib, tomli, pip's vendored tomli (pip >= 21.2) or toml
    (older pips, e.g. Debian bullseye's 20.3 beside its Python 3.9)."""
    try:
        import tomllib  # Python 3.11+

        return tomllib.loads
    except ImportError:
        pass
    try:
        import tomli

        return tomli.loads
    except ImportError:
        pass
    try:
        from pip._vendor import tomli  # pip >= 21.2 vendors tomli

        return tomli.loads
    except ImportError:
        from pip._vendor import toml  # pip < 21.2

        return toml.loads


def _packaging():
    """(Requirement, Version, InvalidVersion, canonicalize_name) from packaging."""
    try:
        from packaging.requirements import Requirement
        from packaging.utils import canonicalize_name
        from packaging.version import InvalidVersion, Version
    except ImportError:
        from pip._vendor.packaging.requirements import Requirement
        from pip._vendor.packaging.utils import canonicalize_name
        from pip._vendor.packaging.version import InvalidVersion, Version
    return Requirement, Version, InvalidVersion, canonicalize_name


def build_system(src):
    """(requires, backend, backend_path) of the project in folder src."""
    path = os.path.join(src, "pyproject.toml")
    if not os.path.isfile(path):
        return list(DEFAULT_REQUIRES), DEFAULT_BACKEND, []
    with open(path, "rb") as f:
        data = _toml_loads()(f.read().decode("utf-8"))
    table = data.get("build-system")
    if table is None:
        return list(DEFAULT_REQUIRES), DEFAULT_BACKEND, []
    requires = table.get("requires")
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        raise SystemExit(f"{path}: [build-system] requires must be a list of strings")
    backend = table.get("build-backend") or DEFAULT_BACKEND
    return requires, backend, list(table.get("backend-path") or [])


def installed_version(name):
    """The installed version of distribution `name` here, or None."""
    from importlib import metadata

    _, _, _, canonicalize_name = _packaging()
    wanted = canonicalize_name(name)
    for dist in metadata.distributions():
        dist_name = dist.metadata["Name"]
        if dist_name and canonicalize_name(dist_name) == wanted:
            return dist.version
    return None


def unmet(requirements, extra="", seen=None):
    """(requirement, installed version or None) for each requirement not satisfied here,
    following the extras a requirement asks for into the distribution's own requirements."""
    from importlib import metadata

    Requirement, Version, InvalidVersion, canonicalize_name = _packaging()
    seen = set() if seen is None else seen
    problems = []
    for text in requirements:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        key = (canonicalize_name(req.name), str(req.specifier), tuple(sorted(req.extras)))
        if key in seen:
            continue
        seen.add(key)
        have = installed_version(req.name)
        if have is None:
            problems.append((text, None))
            continue
        try:
            ok = req.specifier.contains(Version(have), prereleases=True)
        except InvalidVersion:
            ok = False
        if not ok:
            problems.append((text, have))
            continue
        for wanted_extra in sorted(req.extras):
            dependencies = metadata.requires(req.name) or []
            problems += unmet(dependencies, extra=wanted_extra, seen=seen)
    return problems


def dynamic_requires(src, backend, backend_path, python=None):
    """What the backend asks for on top of the static requirements (setuptools: wheel for
    old versions; meson-python: ninja when there is none on PATH)."""
    try:
        from pyproject_hooks import BuildBackendHookCaller, quiet_subprocess_runner
    except ImportError:
        try:
            from pip._vendor.pyproject_hooks import (
                BuildBackendHookCaller,
                quiet_subprocess_runner,
            )
        except ImportError:
            try:  # pip < 23.1 vendors pep517 (Debian bullseye's pip 20.3 beside Python 3.9)
                from pip._vendor.pep517.wrappers import Pep517HookCaller as BuildBackendHookCaller
                from pip._vendor.pep517.wrappers import quiet_subprocess_runner
            except ImportError:
                return []  # no hook caller at all: static requirements only
    hooks = BuildBackendHookCaller(
        os.path.abspath(src),
        backend,
        backend_path=backend_path or None,
        runner=quiet_subprocess_runner,
        python_executable=python or sys.executable,
    )
    return list(hooks.get_requires_for_build_wheel({}))


def report(problems, what):
    print(
        f"the build runs without isolation ([build] isolation = false), so {sys.executable} must provide "
        "the project's build requirements; these are not met:"
    )
    for text, have in problems:
        state = "not installed" if have is None else f"installed: {have}"
        print(f"  - {text} ({what}; {state})")
    print(
        "Install them in the image (pip install these requirements), or build with "
        "isolation ([build] isolation = true) or from a wheelhouse ([build] wheelhouse = true)."
    )


def check(src):
    requires, backend, backend_path = build_system(src)
    problems = unmet(requires)
    if problems:
        report(problems, "[build-system] requires")
        return 1
    try:
        dynamic = dynamic_requires(src, backend, backend_path)
    except Exception as e:  # the backend itself failed: the build would fail the same way
        print(f"the build backend {backend} failed in get_requires_for_build_wheel: {e}")
        return 1
    problems = unmet(dynamic)
    if problems:
        report(problems, f"asked for by {backend}")
        return 1
    print("build requirements met by {}: {}".format(sys.executable, ", ".join(requires + dynamic)))
    return 0


def main(argv):
    if len(argv) == 2 and argv[0] == "check":
        return check(argv[1])
    if len(argv) == 2 and argv[0] == "list":
        for requirement in build_system(argv[1])[0]:
            print(requirement)
        return 0
    if len(argv) == 3 and argv[0] == "dynamic":
        _, backend, backend_path = build_system(argv[1])
        # The backend may print: only the requirements go to stdout.
        for requirement in dynamic_requires(argv[1], backend, backend_path, python=argv[2]):
            print(requirement)
        return 0
    if len(argv) == 2 and argv[0] == "backend":
        print(build_system(argv[1])[1].split(":")[0])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
