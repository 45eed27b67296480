"""Free-threaded builds (3.14t, 3.15t) need a free-threaded interpreter where they run. Debian
packages none and these machines cannot build or download CPython, so `nightly build` of
such builds on a host that has none is refused in one line (exit 2) that says what it needs,
before anything starts, instead of a recipe failing later; in a night the build fails alone
with the local executor's line, and the others go on. How a site supplies one: docs/images.md,
"Free-threaded Pythons".
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from nightly.config import Config
from nightly.core.axes import manylinux_interpreter
from nightly.core.matrix import Build, python_number
from nightly.errors import UsageError

DOCS = 'docs/images.md, "Free-threaded Pythons"'


def missing_interpreter(config: Config, build: Build, executor: str,
                        environ: Mapping[str, str] | None = None) -> str:
    """Why this host cannot run a free-threaded build ("" when it can, or cannot tell: an
    image nightly did not make may have its own /opt/python/cpXY-cpXYt)."""
    if not build.python_abi.endswith("t"):
        return ""
    number = python_number(build.python)
    name = f"python{number}t"
    if executor == "container":
        spec = config.builder_for(build)
        if spec is None or spec.base_image:
            return ""  # a site's own image, or one built on a manylinux image's /opt/python
        return (f"{build.id} needs a free-threaded CPython {number} ({name}), and the builder "
                f"image @{spec.name} has none (Debian packages no free-threaded Python): build "
                "it in an image with its own /opt/python/"
                f"{manylinux_interpreter(build.python).split('/')[3]} (a builder with "
                f"base_image = a manylinux image, or your own image in [images]; {DOCS})")
    if build.python in config.local.pythons:
        return ""  # configured: find_python checks the path and says so
    path = (environ if environ is not None else os.environ).get("PATH", "")
    on_path = any(os.access(os.path.join(d, name), os.X_OK) for d in path.split(os.pathsep) if d)
    if on_path or os.access(manylinux_interpreter(build.python), os.X_OK):
        return ""
    return (f"{build.id} needs a free-threaded CPython {number} ({name}), and this host has "
            f"none ({name} not on PATH, no {manylinux_interpreter(build.python)}): install "
            f"one and map it in [executor.local.pythons] \"{build.python}\" = \"/path/to/"
            f"{name}\", or build it in a builder image that has one ({DOCS})")


def refuse_missing(config: Config, builds: Sequence[Build], executor_of: Mapping[str, str],
                   environ: Mapping[str, str] | None = None) -> None:
    """A one-off build of nothing but free-threaded builds this host cannot run: one line
    (exit 2), the first one's reason. Beside builds that can run, they are left to fail on
    their own (the local executor's line says the same), so the others still build.
    `executor_of` maps a build id to the executor it runs with."""
    reasons = [missing_interpreter(config, b, executor_of.get(b.id, "local"), environ)
               for b in builds]
    if builds and all(reasons):
        more = len(reasons) - 1
        raise UsageError(reasons[0] + (f" [and {more} more free-threaded builds]" if more
                                       else ""))


__all__ = ["missing_interpreter", "refuse_missing"]
