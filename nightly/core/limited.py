"""Limited-API (abi3) wheels in the matrix: one build per limited-API floor, its wheel tested
on every Python of the range (cibuildwheel's "build once, test on each"). Pure: no I/O.

A project whose extension uses CPython's limited API (PEP 384) at floor 3.X delivers one
`cp3X-abi3` wheel that installs on CPython 3.X and every later version. With `[project]
limited_api = "cp310"` the matrix's wheel builds (manywheel, wheel) of Python 3.10 and newer
of one package type, accelerator, platform and architecture become one build: it builds with
the lowest of those Pythons and its wheel is tested on each of them. Pythons below the floor
stay builds of their own (the wheel does not install there), and so does a free-threaded
Python (3.13t, 3.14t: the abi3 wheel does not install there; PEP 803's abi3t is a build of
its own).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

import nightly.core.axes as axes
from nightly.core.matrix import Build

# Package types whose packages are wheels (conda packages pin their Python; libtorch none).
WHEEL_PACKAGES = ("manywheel", "wheel")
# The limited API is CPython 3's (3.2 and newer: PEP 384).
_TAG_RE = re.compile(r"^(?:cp3([0-9]{1,2})|3\.([0-9]{1,2}))$")


def normalize_limited_api(text: str) -> str:
    """`cp310`, `3.10` -> `cp310`; "" stays "" (no limited API). AxisError for another
    spelling."""
    s = str(text).strip().lower()
    if not s:
        return ""
    m = _TAG_RE.match(s)
    minor = int(m.group(1) or m.group(2)) if m else -1
    if minor < 2:
        raise axes.AxisError(
            f"'{text}' is not a limited-API floor: write cp3X (cp310) or 3.X (3.10), the "
            "oldest CPython its wheel is for (Py_LIMITED_API 0x030A0000 is cp310)"
        )
    return f"cp3{minor}"


def floor_of(tag: str) -> tuple[int, int]:
    """`cp310` -> (3, 10)."""
    return 3, int(normalize_limited_api(tag)[3:])


def is_abi3_build(build: Build) -> bool:
    """A build whose wheel is a limited-API one, tested on several Pythons."""
    return bool(build.limited_api)


def _joins(build: Build, floor: tuple[int, int]) -> bool:
    """Whether this build's Python is one the floor's wheel serves."""
    if build.package not in WHEEL_PACKAGES:
        return False
    try:
        major, minor, suffix = axes.python_parts(build.python)
    except axes.AxisError:
        return False
    return not suffix and (major, minor) >= floor


def collapse(builds: Sequence[Build], limited_api: str) -> list[Build]:
    """The builds with each group of wheel builds the floor serves (same package type,
    accelerator, platform, toolchain and architecture) made one: the group's lowest Python
    builds, `tests_on` lists every Python of the group, lowest first. The others stay as they
    are; order is kept (a group takes its first member's place)."""
    if not limited_api:
        return list(builds)
    tag = normalize_limited_api(limited_api)
    floor = floor_of(tag)
    groups: dict[tuple[str, str, str, str, str], list[Build]] = {}
    order: list[Build | tuple[str, str, str, str, str]] = []
    for b in builds:
        if not _joins(b, floor):
            order.append(b)
            continue
        key = (b.package, b.cuda, b.platform, b.devtoolset, b.arch)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(b)
    out: list[Build] = []
    for item in order:
        if isinstance(item, Build):
            out.append(item)
            continue
        members = sorted(groups[item], key=lambda b: axes.python_parts(b.python)[:2])
        pythons = tuple(dict.fromkeys(b.python for b in members))
        out.append(replace(members[0], limited_api=tag, tests_on=pythons))
    return out


def describe(build: Build) -> str:
    """`cp310-abi3 wheel built with 3.10, tested on 3.10, 3.11, 3.12`; "" for another build."""
    if not build.limited_api:
        return ""
    return (f"{build.limited_api}-abi3 wheel built with {build.python}, tested on "
            f"{', '.join(build.tests_on)}")


__all__ = ["WHEEL_PACKAGES", "collapse", "describe", "floor_of", "is_abi3_build",
           "normalize_limited_api"]
