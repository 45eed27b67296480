"""Which files are packages, and the PEP 503 project and version each belongs to."""

from __future__ import annotations

import re
from functools import lru_cache

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

PACKAGE_SUFFIXES = (".whl", ".zip", ".tar.gz", ".tar.bz2")

_VALID_PROJECT = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)
_LOOSE_NAME = re.compile(r"^(?P<name>.+?)-\d")


def is_package(name: str) -> bool:
    return "/" not in name and not name.startswith(".") and name.endswith(PACKAGE_SUFFIXES)


# A full run parses each name several times (view, pages, projects): 20,000 wheels are
# 100,000 parses without the cache.
@lru_cache(maxsize=1 << 17)
def parse_package(filename: str) -> tuple[str, Version] | None:
    """(normalised project, version) of a wheel, sdist or libtorch archive; None if not one."""
    try:
        if filename.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(filename)
            return str(name), version
        if filename.endswith((".zip", ".tar.gz")):
            # libtorch-shared-with-deps-2.1.0.dev20230801+cpu.zip parses like an sdist.
            name, version = parse_sdist_filename(filename)
            return str(name), version
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        pass
    return None


def project_of(filename: str) -> str | None:
    """The PEP 503 project a file belongs to, or None (then it is only on the flat page)."""
    parsed = parse_package(filename)
    if parsed is not None:
        return parsed[0]
    # Tolerate names packaging rejects (e.g. a non-PEP 440 version) when the project part is
    # a valid project name; anything else cannot be served by a simple index anyway.
    m = _LOOSE_NAME.match(filename)
    if m and _VALID_PROJECT.match(m["name"]):
        return str(canonicalize_name(m["name"]))
    return None
