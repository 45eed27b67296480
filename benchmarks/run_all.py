"""Every benchmark of the project in one run, and one table of ratios.

    .venv/bin/python benchmarks/run_all.py [--index-objects 10000] [--quick | --smoke]
                                           [--peer DIR] [--only NAME]... [--skip NAME]...

--smoke runs each at its smallest (seconds each, cache and images a minute or so; the test
suite's check that every benchmark still runs: its figures mean nothing), except bisect,
whose smallest run is its --quick one (QUICK_IS_SMOKE; the suite runs it with --quick).
It exits 1 naming the benchmarks that failed; one
that needs something absent (index_peer without --peer) is reported as skipped, with why.

Runs one after another (so they do not compete for the machine), each in its own process:

  schedule    bench_schedule.py: makespan / lower bound; orchestration overhead
  container   bench_container.py: the container executor against `podman run --rm`
              (starts the Podman engine through scripts/container-engine.sh)
  index       bench_index.py --objects N: index regeneration against list + HEAD per object
              (N = --index-objects, default 10,000, so that it takes minutes, not the
              half hour of its own default of 100,000)
  cluster     bench_cluster.py: 1,000 builds planned and run on 20 Dask workers
  gpu_tests   bench_gpu_tests.py: 1,000 builds on 20 CPU + 2 GPU Dask workers (sleeping tasks
              through nightly's dispatch): GPU-host seconds and makespan / bound, the old
              gpu_smoke (CUDA builds on GPU workers) against the test stage (--quick: 250
              builds, 10 Pythons, at 400 ms a GPU task: 2-3 minutes for both nights, where
              the full 1,000 builds at 1 s a task take 16 minutes, over 30 under load)
  cluster_tls bench_cluster_tls.py: mutual TLS against plain tcp on real Dask processes;
              sha256 of a fetched package against its copy (verified staging)
  staging_store bench_staging_store.py: the folder staging store read without following
              symlinks (package fetch, listing, a 32 MiB log read back and scrubbed) against
              plain copyfile / os.walk / read of the same files
  index_peer  bench_index_peer.py --peer DIR: index pages against PyTorch's test-infra
              manage_v2.py (DIR: a checkout of pytorch/test-infra, from --peer or
              $NIGHTLY_PEER_TEST_INFRA; skipped without one) on one moto bucket of 5,000 and
              20,000 wheels (--quick: 1,000)
  images      bench_images.py: builder images cold/warm per CUDA, sizes, and the demo CUDA
              night's wall time against the sum of its builds (--quick: a small builder of
              its own on the engine's image, cold / rebuilt from its cache / warm; --smoke:
              the same without the rebuild)
  cache       bench_cache.py: the compiler cache on a generated C++/CUDA project (nvcc 13.0)
              through `nightly run`: warm / cold night, four Pythons with / without cache
              (--quick: a CPU-only core of 3 C++ files, two Pythons; no nvcc; --smoke: one
              Python, night A's cold night reused as the cold-cache night: 3 builds, not 6)
  masking     bench_masking.py: build output masked for every configured secret as it
              streams into the log, against the same log written unmasked
  bisect      bench_bisect.py: `nightly bisect` over a 64-commit demo history with the
              compiler cache against without it (--quick and --smoke: 4 generated C files
              a build, not 24)
  toolchain   bench_toolchain.py: the demo's manywheels and two corpus projects (markupsafe, C;
              mapbox-earcut, C++/CMake) with the portable toolchains (glibc 2.31 sysroot, zig;
              manylinux 2_28) against the host's plain gcc; each toolchain's cold assembly
              (--quick: Python 3.12 only, the demo only)
  provenance  bench_provenance.py: a night of 8 builds of 32 MB wheels published to a file://
              mirror, with `[provenance] key` against without (--quick: 4 builds, 1 run)
  procs       bench_procs.py: a package taken back from OUTPUT_DIR as nightly's own file
              (adopted, and copied where a writer holds it), hashed once and filed, against
              hash-and-rename; a trivial recipe in its own cgroup against without
  history_year bench_history_year.py: a year of nights in the build history (kept whole, and
              pruned to 90 days): open, estimates, failure facts at night 30 and at the end;
              a record with a held connection against one per call
  progress    bench_progress.py: the live progress display's cost per build on a night of
              98 stand-in builds (none / plain lines / live view on a pty; --quick: 1 round)
  cli         measured here: `nightly --help` start-up against `cibuildwheel --help` (a
              tool of the same kind), or `python -m pip --version` when cibuildwheel is not
              installed (the table says which)

then reads what each wrote to benchmarks/results/*.json (only files written by this run: a
benchmark that failed shows as failed, never with an old result) and prints one table.
Each benchmark's own output is shown as it runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from common import RESULTS_DIR, SKIPPED, format_table, write_results  # noqa: E402
from table_rows import ROWS, Row  # noqa: E402


def _venv_bin(name: str) -> str | None:
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else shutil.which(name)


# ---------------------------------------------------------------------------- the runs


# Its --smoke run is its --quick run: nothing smaller measures anything, and a minute is
# small enough for the test suite to run it as --quick does.
QUICK_IS_SMOKE = ("bisect",)


def _args(args: argparse.Namespace, quick: list[str], smoke: list[str]) -> list[str]:
    return smoke if args.smoke else quick if args.quick else []


def benchmarks(args: argparse.Namespace) -> dict[str, tuple[list[str], str]]:
    """name -> (command, results file name)."""
    py = sys.executable
    objects = (300 if args.smoke else 2000 if args.quick else 10_000)
    peer = ["--peer", str(args.peer)] if args.peer else []
    demo = ["--pythons", "3.12", "--corpus", ""]
    return {
        "schedule": ([py, str(HERE / "bench_schedule.py"),
                      *_args(args, ["--repeat", "1", "--noop", "100"],
                             ["--repeat", "1", "--noop", "10", "--ms-per-hour", "100"])],
                     "schedule.json"),
        "container": ([py, str(HERE / "bench_container.py"), *_args(args, ["--runs", "5"], ["--runs", "1"])],
                      "container.json"),
        "index": ([py, str(HERE / "bench_index.py"), "--objects", str(args.index_objects or objects),
                   *_args(args, [], ["--new", "10", "--http-sample", "50"])], "index.json"),
        "cluster": ([py, str(HERE / "bench_cluster.py"),
                     *_args(args, ["--no-baseline"],
                            ["--no-baseline", "--smoke"])],
                    "cluster.json"),
        "gpu_tests": ([py, str(HERE / "bench_gpu_tests.py"),
                       *_args(args, ["--pythons", "10", "--gpu-task-ms", "400"],
                              ["--smoke", "--gpu-task-ms", "200", "--only", "stage"])],
                      "gpu_tests.json"),
        "cluster_tls": ([py, str(HERE / "bench_cluster_tls.py"),
                         *_args(args, ["--runs", "3", "--tasks", "200", "--package-mb", "64"],
                                ["--runs", "1", "--tasks", "20", "--package-mb", "4"])],
                        "cluster_tls.json"),
        "staging_store": ([py, str(HERE / "bench_staging_store.py"),
                           *_args(args, ["--runs", "3", "--package-mb", "64"],
                                  ["--runs", "1", "--package-mb", "4", "--attempts", "20"])],
                          "staging_store.json"),
        "index_peer": ([py, str(HERE / "bench_index_peer.py"), *peer,
                        *_args(args, ["--sizes", "1000"], ["--sizes", "200", "--no-full-all"])],
                       "index_peer.json"),
        "images": ([py, str(HERE / "bench_images.py"), *_args(args, ["--quick"], ["--smoke"])],
                   "images.json"),
        "masking": ([py, str(HERE / "bench_masking.py"),
                     *_args(args, ["--mb", "50", "--runs", "3"], ["--mb", "2", "--runs", "1"])],
                    "masking.json"),
        "cache": ([py, str(HERE / "bench_cache.py"), *_args(args, ["--quick"], ["--smoke"])],
                  "cache.json"),
        "bisect": ([py, str(HERE / "bench_bisect.py"), *_args(args, ["--gen", "4"], ["--gen", "4"])],
                   "bisect.json"),
        "toolchain": ([py, str(HERE / "bench_toolchain.py"),
                       *_args(args, demo, [*demo, "--smoke"])],
                      "toolchain.json"),
        "provenance": ([py, str(HERE / "bench_provenance.py"),
                        *_args(args, ["--runs", "1", "--builds", "4"], ["--runs", "1", "--builds", "2",
                                                                         "--size-mb", "1"])],
                       "provenance.json"),
        "procs": ([py, str(HERE / "bench_procs.py"),
                   *_args(args, ["--mb", "128", "--builds", "10"], ["--mb", "16", "--builds", "3"])],
                  "procs.json"),
        "history_year": ([py, str(HERE / "bench_history_year.py"),
                          *_args(args, ["--quick"], ["--nights", "40", "--builds", "10"])],
                         "history_year.json"),
        "progress": ([py, str(HERE / "bench_progress.py"),
                      *_args(args, ["--rounds", "1"], ["--rounds", "1"])],
                     "progress.json"),
    }  # fmt: skip


def run_one(name: str, cmd: list[str]) -> tuple[str, float, str]:
    """Run one benchmark, its output shown as it comes: (ok / failed / skipped, seconds, the
    last line it printed: a skipped benchmark's reason)."""
    print(f"\n{'=' * 78}\n== {name}: {' '.join(Path(c).name if c.startswith('/') else c for c in cmd)}\n"
          f"{'=' * 78}", flush=True)
    started = time.monotonic()
    last = ""
    with subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"}) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", flush=True)
            last = line.strip() or last
    took = time.monotonic() - started
    if proc.returncode == SKIPPED:
        print(f"-- {name} skipped after {took:.0f} s", flush=True)
        return "skipped", took, last
    if proc.returncode != 0:
        print(f"!! {name} failed (exit {proc.returncode}) after {took:.0f} s", flush=True)
        return "failed", took, last
    return "ok", took, last


def cli_startup(runs: int) -> dict[str, Any]:
    """`nightly --help` against a baseline tool, interleaved, medians of wall time."""
    nightly = _venv_bin("nightly")
    assert nightly, "nightly is not installed in this environment"
    cibw = _venv_bin("cibuildwheel")
    if cibw:
        baseline, base_name = [cibw, "--help"], "cibuildwheel --help"
    else:
        baseline = [sys.executable, "-m", "pip", "--version"]
        base_name = "python -m pip --version (cibuildwheel is not installed)"
    commands = {"nightly --help": [nightly, "--help"], base_name: baseline,
                "python -c pass": [sys.executable, "-c", "pass"]}
    samples: dict[str, list[float]] = {k: [] for k in commands}
    for _ in range(2):  # warm the page cache
        for cmd in commands.values():
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    for _ in range(runs):
        for label, cmd in commands.items():
            t0 = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            samples[label].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in samples.items()}
    result = {
        "runs": runs,
        "baseline": base_name,
        "median_s": {k: round(v, 4) for k, v in med.items()},
        "samples_s": {k: [round(x, 4) for x in v] for k, v in samples.items()},
        "ratio_nightly_to_baseline": round(med["nightly --help"] / med[base_name], 3),
    }
    print(format_table(["command", "median s"], [[k, round(v, 4)] for k, v in med.items()]))
    write_results("cli", result)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index-objects", type=int, default=None,
                    help="objects in the index benchmark's bucket (default 10000; 2000 with --quick)")
    ap.add_argument("--cli-runs", type=int, default=None,
                    help="start-up measurements of each command (default 20; --smoke: 2)")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="smaller runs of everything")
    size.add_argument("--smoke", action="store_true",
                      help="each at its smallest: does every benchmark still run (no figure to read)")
    ap.add_argument("--peer", type=Path, default=None, metavar="DIR",
                    help="a checkout of pytorch/test-infra for index_peer (default: "
                    "$NIGHTLY_PEER_TEST_INFRA; without one index_peer is skipped)")
    ap.add_argument("--only", action="append", default=[], metavar="NAME", choices=[*ROWS],
                    help="run only these benchmarks (repeatable)")
    ap.add_argument("--skip", action="append", default=[], metavar="NAME", choices=[*ROWS],
                    help="skip these benchmarks (repeatable)")
    args = ap.parse_args()
    chosen = [n for n in ROWS if (not args.only or n in args.only) and n not in args.skip]

    started_at = time.time()
    status: dict[str, str] = {}
    why: dict[str, str] = {}
    took: dict[str, float] = {}
    for name, (cmd, _) in benchmarks(args).items():
        if name in chosen:
            status[name], took[name], why[name] = run_one(name, cmd)
    if "cli" in chosen:
        print(f"\n{'=' * 78}\n== cli: start-up of nightly --help against a baseline\n{'=' * 78}", flush=True)
        t0 = time.monotonic()
        try:
            cli_startup(args.cli_runs or (2 if args.smoke else 20))
            status["cli"] = "ok"
        except (subprocess.CalledProcessError, AssertionError, OSError) as e:
            print(f"!! cli failed: {e}")
            status["cli"] = "failed"
        took["cli"] = time.monotonic() - t0
    print_summary(args, chosen, status, why, took, started_at)
    failed = [n for n in chosen if status.get(n) == "failed"]
    skipped = [n for n in chosen if status.get(n) == "skipped"]
    for name in skipped:
        print(f"skipped: {name}: {why[name].removeprefix('skipped: ')}")
    if failed:
        print(f"failed: {', '.join(failed)} (see each one's output above)")
        return 1
    return 0


def print_summary(args: argparse.Namespace, chosen: list[str], status: dict[str, str],
                  why: dict[str, str], took: dict[str, float], started_at: float) -> None:
    """The one table: each benchmark's rows from the results this run wrote."""
    rows: list[Row] = []
    files = {**{n: f for n, (_, f) in benchmarks(args).items()}, "cli": "cli.json"}
    for name in chosen:
        path = RESULTS_DIR / files[name]
        fresh = path.exists() and path.stat().st_mtime >= started_at - 1
        if status.get(name) == "skipped":
            rows.append([name, f"SKIPPED: {why.get(name, '').removeprefix('skipped: ')}", "", "", "", ""])
            continue
        if status.get(name) != "ok" or not fresh:
            rows.append([name, "FAILED: no results from this run", "", "", "", "see its output above"])
            status[name] = "failed"
            continue
        try:
            rows += ROWS[name](json.loads(path.read_text()))
        except (ValueError, OSError) as e:
            rows.append([name, f"unreadable results: {e}", "", "", "", ""])
            status[name] = "failed"

    print(f"\n{'=' * 78}\nAll benchmarks, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, "
          f"load {', '.join(f'{x:.1f}' for x in os.getloadavg())}; "
          f"wall time: {', '.join(f'{n} {t:.0f} s' for n, t in took.items())}\n")
    print(format_table(["benchmark", "measure (value / baseline)", "value", "baseline", "ratio", "reading"],
                       rows))
    print(f"\nresults: {RESULTS_DIR}/")


if __name__ == "__main__":
    sys.exit(main())
