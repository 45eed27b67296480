"""run_all.py's --quick and --smoke sizes (issue 52): cache, bisect and images have a quick
mode of their own; bisect's --smoke run is that same --quick run (the suite runs it through
`run_all.py --quick`), cache and images have a smaller --smoke of their own (the suite's
size); gpu_tests' --quick is a smaller night than its full 1,000 builds."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def run_all() -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCH))
    try:
        import run_all as module  # type: ignore[import-not-found]  # benchmarks/ is no package

        yield module
    finally:
        sys.path.remove(str(BENCH))


def commands(module: ModuleType, mode: str) -> dict[str, list[str]]:
    args = argparse.Namespace(quick=mode == "quick", smoke=mode == "smoke", peer=None, index_objects=None)
    return {name: cmd[2:] for name, (cmd, _) in module.benchmarks(args).items()}


def test_quick_is_smoke_for_bisect(run_all: ModuleType) -> None:
    quick, smoke, full = (commands(run_all, m) for m in ("quick", "smoke", "full"))
    assert set(run_all.QUICK_IS_SMOKE) == {"bisect"}
    for name in run_all.QUICK_IS_SMOKE:
        assert quick[name] == smoke[name], name
        assert quick[name] != full[name], name  # a smaller workload than the full run
    assert quick["bisect"] == ["--gen", "4"]


def test_cache_and_images_have_a_quick_and_a_smaller_smoke(run_all: ModuleType) -> None:
    quick, smoke, full = (commands(run_all, m) for m in ("quick", "smoke", "full"))
    for name in ("cache", "images"):
        assert quick[name] == ["--quick"], quick[name]
        assert smoke[name] == ["--smoke"], smoke[name]
        assert full[name] == [], full[name]


def test_gpu_tests_quick_is_a_smaller_night(run_all: ModuleType) -> None:
    """The full run's 1,000 builds at 1 s a GPU task take over half an hour on a loaded
    machine: --quick must pass a size (fewer Pythons, and a time scale kept well above the
    harness's 20-30 ms a task)."""
    quick, full = commands(run_all, "quick"), commands(run_all, "full")
    assert full["gpu_tests"] == []
    opts = dict(zip(quick["gpu_tests"][::2], quick["gpu_tests"][1::2], strict=True))
    assert int(opts["--pythons"]) < 40, opts
    assert float(opts["--gpu-task-ms"]) >= 250, opts


def test_other_benchmarks_keep_a_smaller_smoke(run_all: ModuleType) -> None:
    quick, smoke = commands(run_all, "quick"), commands(run_all, "smoke")
    differ = {n for n in quick if quick[n] != smoke[n]}
    assert differ == set(quick) - set(run_all.QUICK_IS_SMOKE) - {"progress"}, differ
