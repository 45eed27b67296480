"""run_all.py's --quick sizes of cache, bisect and images (issue 52): each has a quick mode
of its own, and their --smoke run is that same --quick run, so that the suite's run of them
(tests/integration/test_benchmarks_run.py, through `run_all.py --quick`) is what `--smoke`
and the README's `run_all.py --quick` run."""

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


def test_quick_is_smoke_for_cache_bisect_images(run_all: ModuleType) -> None:
    quick, smoke, full = (commands(run_all, m) for m in ("quick", "smoke", "full"))
    assert set(run_all.QUICK_IS_SMOKE) == {"cache", "bisect", "images"}
    for name in run_all.QUICK_IS_SMOKE:
        assert quick[name] == smoke[name], name
        assert quick[name] != full[name], name  # a smaller workload than the full run
    assert quick["cache"] == ["--quick"]
    assert quick["images"] == ["--quick"]
    assert quick["bisect"] == ["--gen", "4"]


def test_other_benchmarks_keep_a_smaller_smoke(run_all: ModuleType) -> None:
    quick, smoke = commands(run_all, "quick"), commands(run_all, "smoke")
    differ = {n for n in quick if quick[n] != smoke[n]}
    assert differ == set(quick) - set(run_all.QUICK_IS_SMOKE) - {"progress"}, differ
