"""How the full run spreads the tests over pytest-xdist's workers (scripts/test.sh runs
`-n 2 --dist loadfile`): each file stays on one worker, as loadfile means (its module
fixtures made once, its tests in order), except the files in SPREAD, whose tests go one by
one to whichever worker is free; and the heaviest files are handed out first.

Why: with xdist's own order (the files with the most tests first), a file of two 5-minute
tests went last and ran alone on one worker while the other sat idle, and the corpus
(test_corpus.py, the largest share of the suite's time) ran whole on one worker. Longest
first is the classic order for two machines: what is left at the end is a crowd of short
tests that the workers share evenly.

A SPREAD file shares nothing made per module between its tests (a module fixture would be
made on each worker) and does not depend on their order; what its tests share goes through
tests/support/runcache.py (made once per run for all workers) or a cache under a lock.

xdist's `--dist loadgroup` cannot do this on pytest 9 (it renames the tests by setting
`item._nodeid`, which pytest 9 no longer reads), so the controller gets a scheduler of its
own through xdist's `pytest_xdist_make_scheduler` hook, only for `--dist loadfile`. Without
xdist this only orders the tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling

ROOT = Path(__file__).resolve().parents[2]

# The heaviest test files, longest first, from the last full cold run (scripts/test.sh's
# --durations, the seconds of each file's tests on the CI-like 2-core machine). Only the
# order matters: a file missing here runs after them; a wrong place costs some idle minutes
# at the end, never a failure.
HEAVIEST: tuple[str, ...] = (
    "tests/integration/test_corpus.py",
    "tests/integration/test_init.py",
    "tests/integration/test_zig_builds.py",
    "tests/integration/test_py314.py",
    "tests/integration/test_images_runtime.py",
    "tests/integration/test_beyond_cuda.py",
    "tests/integration/test_images.py",
    "tests/integration/test_reproducible.py",
    "tests/integration/test_limited_api.py",
    "tests/integration/test_py315.py",
    "tests/integration/test_aarch64.py",
)

# The slowest tests of the SPREAD files (CI's last full run, --durations, seconds), handed
# out before everything else: the longest work first, so that what is left at the end is short.
# Ordered so that the two workers start one test that builds images (IO: downloads,
# debootstrap, layers; one image build at a time, nightly's cache lock) and one that compiles
# on the host (CPU) side by side: two image builds at once would leave one worker waiting on
# the lock. A test named here that is renamed fails tests/unit/test_suite_schedule.py.
FIRST: tuple[str, ...] = (
    # 208 s: the zig builder image (base and zig layers), then a C++ night in it
    "tests/integration/test_zig_builds.py::"
    "test_a_zig_builder_image_builds_a_cmake_cpp_project_for_manylinux_2_17",
    # 130 s: mapbox-earcut on the host, four Pythons (C++, CMake)
    "tests/integration/test_corpus.py::test_corpus_project[mapbox-earcut]",
    # 168 s: the corpus builder image, then markupsafe in it (offline, four Pythons)
    "tests/integration/test_corpus.py::test_corpus_in_the_builder_image[markupsafe]",
    # 138 s: init + run of cmarkgfm on the host
    "tests/integration/test_init.py::test_a_project_with_dependencies_from_init_to_tested_"
    "manylinux_wheels_over_http[cmarkgfm-sysroot-cffi]",
    # 141 s: mapbox-earcut in the corpus builder image (made by then)
    "tests/integration/test_corpus.py::test_corpus_in_the_builder_image[mapbox-earcut]",
    # 120 s and 105 s: host nights
    "tests/integration/test_corpus.py::test_corpus_project[ujson]",
    "tests/integration/test_corpus.py::test_corpus_project[frozenlist]",
)

# Files whose tests may each run on any worker (each says so beside its `pytestmark`).
SPREAD: frozenset[str] = frozenset({
    "tests/integration/test_corpus.py",
    "tests/integration/test_init.py",
    "tests/integration/test_zig_builds.py",
})


def _file(item: pytest.Item) -> str:
    path = Path(str(item.path)).resolve()
    return path.relative_to(ROOT).as_posix() if ROOT in path.parents else path.as_posix()


def _file_ranks(items: list[pytest.Item]) -> dict[str, tuple[int, int]]:
    """Each file's place: the named heavy files first (in HEAVIEST's order), then those
    with a slow test, then the rest. By file, so a file's tests keep their order."""
    ranks: dict[str, tuple[int, int]] = {}
    for item in items:
        name = _file(item)
        if name in HEAVIEST:
            rank = (0, HEAVIEST.index(name))
        else:
            rank = (1 if item.get_closest_marker("slow") else 2, 0)
        ranks[name] = min(rank, ranks.get(name, rank))
    return ranks


def _first(item: pytest.Item) -> tuple[int, ...]:
    """FIRST's place of a test (by its id from the repository root), else after them all."""
    nodeid = f"{_file(item)}::{item.name}"
    return (0, FIRST.index(nodeid)) if nodeid in FIRST else (1,)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """FIRST's tests, then the heaviest files (a stable sort: within a rank, files keep
    pytest's order, tests their file's). Each xdist worker collects and sends this order;
    the controller hands the work out in it."""
    ranks = _file_ranks(items)
    items.sort(key=lambda item: (_first(item), ranks[_file(item)]))


def scope_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or itself in a SPREAD file (each
    parametrisation on its own)."""
    name = nodeid.split("::", 1)[0]
    return nodeid if name in SPREAD else name


class SuiteScheduling(LoadFileScheduling):  # type: ignore[misc]  # xdist ships no types
    """loadfile with SPREAD's files split by test, in the collection's order."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        # xdist's reorder (most tests first) would undo pytest_collection_modifyitems'.
        config.option.loadscopereorder = False

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)


@pytest.hookimpl(optionalhook=True)  # xdist's hook: a run with `-p no:xdist` has no such hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> SuiteScheduling | None:
    if config.getoption("dist") != "loadfile":
        return None
    return SuiteScheduling(config, log)
