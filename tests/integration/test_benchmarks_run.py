"""Every benchmark of benchmarks/run_all.py still runs on today's code (issue 52).

Each is run through `run_all.py --smoke --only NAME` (its smallest sizes: seconds, cache and
images a minute or so), or, for bisect, whose smallest run is its --quick one, through
`run_all.py --quick --only NAME`, exactly as the README's `run_all.py --quick` runs it; its
JSON written to a folder of the test's own (NIGHTLY_BENCH_RESULTS, so a real run's figures
are never overwritten). Asserted: run_all exits 0, the benchmark wrote its results and the
table shows its rows, not FAILED. No figure is asserted: the figures are the benchmarks' to
report, on a machine quiet enough to mean something.

Marked by what each needs: the Dask ones `cluster`, the moto one `s3`, the ones that build
real packages `slow`, the ones that need the container engine take the `engine` fixture.
A test checks that every benchmark of run_all.py is run here (index_peer only where a
checkout of its peer is given).
The peer benchmark needs a checkout of pytorch/test-infra, which is no part of this project:
without one it must say so in one line and run_all must report it skipped, with why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.engine import Engine

REPO = Path(__file__).resolve().parents[2]
RUN_ALL = REPO / "benchmarks" / "run_all.py"
TIMEOUT_S = 600
# A --quick run of cache (six builds through `nightly run`: about 2.5 CPU-minutes) took
# over 600 s at load average 17 on 2 cores (seven suites at once): more room (its --smoke
# run has half the builds; bisect --quick is the slowest left).
QUICK_TIMEOUT_S = 1500
PEER_ENV = "NIGHTLY_PEER_TEST_INFRA"


def run_all(results: Path, *args: str, env: dict[str, str] | None = None,
            mode: str = "--smoke") -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in (env or os.environ).items() if k != PEER_ENV}
    return subprocess.run(
        [sys.executable, str(RUN_ALL), mode, *args],
        env={**environ, "NIGHTLY_BENCH_RESULTS": str(results)},
        capture_output=True, text=True, timeout=QUICK_TIMEOUT_S if mode == "--quick" else TIMEOUT_S,
        check=False, stdin=subprocess.DEVNULL)


def check_ran(name: str, results: Path, proc: subprocess.CompletedProcess[str]) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(proc.args[1:])}: exit {proc.returncode}\n{out[-6000:]}"
    data = json.loads((results / f"{name}.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict), data
    assert data, data
    table = out[out.index("All benchmarks,"):]
    assert "FAILED" not in table, table
    assert "unreadable" not in table, table
    assert any(line.startswith(f"{name} ") for line in table.splitlines()), table


RUN = [
    "schedule",
    "staging_store",
    "masking",
    "provenance",
    "cli",
    "progress",
    "history_year",
    "procs",
    pytest.param("index", marks=pytest.mark.s3),
    pytest.param("cluster", marks=pytest.mark.cluster),
    pytest.param("gpu_tests", marks=pytest.mark.cluster),
    pytest.param("cluster_tls", marks=pytest.mark.cluster),
    pytest.param("toolchain", marks=pytest.mark.slow),
    pytest.param("cache", marks=pytest.mark.slow),
]
# Run as `run_all.py --quick` runs it (its --smoke run is the same: run_all.QUICK_IS_SMOKE).
QUICK = [pytest.param("bisect", marks=pytest.mark.slow)]


@pytest.mark.parametrize("name", RUN)
def test_benchmark_runs(name: str, tmp_path: Path) -> None:
    check_ran(name, tmp_path, run_all(tmp_path, "--only", name))


@pytest.mark.parametrize("name", QUICK)
def test_quick_benchmark_runs(name: str, tmp_path: Path) -> None:
    check_ran(name, tmp_path, run_all(tmp_path, "--only", name, mode="--quick"))


@pytest.mark.parametrize("name", ["container"])
def test_engine_benchmark_runs(name: str, engine: Engine, tmp_path: Path) -> None:
    check_ran(name, tmp_path, run_all(tmp_path, "--only", name, env=engine.env()))


@pytest.mark.slow
def test_images_smoke_runs(engine: Engine, tmp_path: Path) -> None:
    """The small builder of its own, cold / warm (--quick adds the rebuild from its cache), on
    the engine's image (no download of the demo's CUDA images, whatever the machine's caches
    hold)."""
    check_ran("images", tmp_path, run_all(tmp_path, "--only", "images", env=engine.env()))
    times = json.loads((tmp_path / "images.json").read_text())["builders"]["quick"]["times"]["cpu"]
    assert set(times) == {"cold_s", "warm_s"}, times


def test_every_benchmark_is_run_or_said_why() -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from table_rows import ROWS  # type: ignore[import-not-found]  # benchmarks/ is not a package
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    run_here: set[Any] = {p.values[0] if hasattr(p, "values") else p for p in [*RUN, *QUICK]}
    covered = run_here | {"container", "images", "index_peer"}
    assert covered == set(ROWS), sorted(set(ROWS) ^ covered)


def test_index_peer_without_checkout_says_what_it_needs(tmp_path: Path) -> None:
    proc = run_all(tmp_path, "--only", "index_peer")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "Traceback" not in out, out
    need = "needs a checkout of pytorch/test-infra"
    assert f"skipped: index_peer: {need}" in out, out
    assert "--peer DIR" in out, out
    assert f"SKIPPED: {need}" in out, out
    assert not (tmp_path / "index_peer.json").exists()


def test_run_all_fails_naming_the_failed_benchmark(tmp_path: Path) -> None:
    """A peer folder that is no checkout is bad input: that benchmark fails (one line, exit
    2) and run_all exits 1 naming it."""
    proc = run_all(tmp_path, "--only", "index_peer", "--only", "masking", "--peer", str(tmp_path))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    assert "Traceback" not in out, out
    assert f"{tmp_path} has no s3_management/manage_v2.py" in out, out
    assert "failed: index_peer (see each one's output above)" in out, out
    assert (tmp_path / "masking.json").exists()  # the other still ran
