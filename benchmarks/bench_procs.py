"""What containing a build's processes and taking its packages back cost (issue 48).

    .venv/bin/python benchmarks/bench_procs.py [--mb 512] [--builds 20]

1. Taking packages back, per GB: a package of `--mb` MB in a build's OUTPUT_DIR. Baseline:
   what filing did before take-back existed (hash it once, rename it into the day's
   folder). New: the path from the build's output to the upload as it is now: copied into
   nightly's own folder as a new file (nightly.builds.run.takeback.take_hashed), hashed once
   as it is copied, and filed into the day's folder (a rename) with the sha256 it carries;
   signing signs that sha256 without reading the package (issue 59). The upload's own read
   (the copy it sends, hashed: nightly.publish.sending) is in neither: the baseline's upload
   read the package too. Both on the same file system, interleaved, the median of 3; the
   file is in the page cache (as a package just written by its build is): CPU and memory
   bandwidth.
2. The per-build cgroup: a trivial recipe (`true`) run by the local executor, with its box
   (nightly.executors.confine: mkdir, the pid written, cgroup.procs read, cgroup.kill, rmdir)
   and without (the box switched off, as where nightly is not root), `--builds` of each,
   interleaved; the median wall time of one build. Needs root and cgroup v2 (else only 1).

Results: benchmarks/results/procs.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

from common import format_table, median, write_results  # noqa: E402

from nightly.builds.run.takeback import take_hashed  # noqa: E402
from nightly.executors import confine  # noqa: E402
from nightly.executors.base import Job  # noqa: E402
from nightly.executors.local import LocalExecutor  # noqa: E402
from nightly.files import sha256_file  # noqa: E402


def _package(folder: Path, mb: int) -> Path:
    path = folder / "out" / "demo-1.0-py3-none-any.whl"
    path.parent.mkdir(parents=True, exist_ok=True)
    block = os.urandom(1 << 20)
    with path.open("wb") as f:
        for _ in range(mb):
            f.write(block)
    return path


def _baseline(folder: Path, mb: int) -> float:
    src = _package(folder, mb)
    dest = folder / "day" / src.name
    dest.parent.mkdir(exist_ok=True)
    started = time.perf_counter()
    sha256_file(src)
    os.replace(src, dest)
    took = time.perf_counter() - started
    shutil.rmtree(folder)
    return took


def _taken(folder: Path, mb: int, copies: list[float]) -> float:
    src = _package(folder, mb)
    dest = folder / "taken"
    dest.mkdir()
    started = time.perf_counter()
    copy, _digest = take_hashed(src, dest)  # hashed as it is copied, carried from here on
    copies.append(time.perf_counter() - started)
    filed = folder / "day" / copy.name
    filed.parent.mkdir()
    os.replace(copy, filed)  # filed with the sha256 it carries: not read again
    took = time.perf_counter() - started
    shutil.rmtree(folder)
    return took


def take_back(mb: int, runs: int = 3) -> dict[str, Any]:
    base: list[float] = []
    new: list[float] = []
    copies: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-procs-", dir="/var/tmp") as t:
        for i in range(runs):
            base.append(_baseline(Path(t) / f"b{i}", mb))
            new.append(_taken(Path(t) / f"n{i}", mb, copies))
    gb = mb / 1024
    return {"mb": mb, "baseline_s": base, "taken_s": new,
            "baseline_s_per_gb": median(base) / gb, "copy_s_per_gb": median(copies) / gb,
            "taken_s_per_gb": median(new) / gb,
            "added_s_per_gb": (median(new) - median(base)) / gb,
            "ratio": median(new) / median(base)}


def _job(root: Path, i: int) -> Job:
    recipes = root / "recipes"
    (recipes / "t").mkdir(parents=True, exist_ok=True)
    (recipes / "t" / "build.sh").write_text("true\n")
    folder = root / "work" / f"b{i}"
    for d in ("out", "scratch"):
        (folder / d).mkdir(parents=True)
    return Job(build_id=f"t_{i}", package="t", python="3", cuda="cpu", env={},
               recipes_dir=recipes, source_dir=root, output_dir=folder / "out",
               work_dir=folder / "scratch", timeout_s=60)


def per_build(builds: int) -> dict[str, Any]:
    boxed: list[float] = []
    plain: list[float] = []
    on = confine.shared()
    off = confine.Confinement()
    off.base, off.unavailable = None, "switched off for the benchmark"
    ex = LocalExecutor()
    with tempfile.TemporaryDirectory(prefix="bench-procs-") as t:
        for i in range(builds):
            for which, times in (((on, boxed),) if on.base is None else
                                 ((on, boxed), (off, plain))):
                confine._SHARED = which
                job = _job(Path(t) / f"{len(times)}-{id(times)}", i)
                started = time.perf_counter()
                result = ex.run(job, lambda _: None, threading.Event())
                times.append(time.perf_counter() - started)
                assert result.exit_status == 0, result
    confine._SHARED = on
    return {"builds": builds, "cgroup": on.base is not None,
            "unavailable": on.unavailable, "boxed_s": median(boxed),
            "plain_s": median(plain) if plain else None,
            "added_ms": (median(boxed) - median(plain)) * 1000 if plain else None,
            "ratio": median(boxed) / median(plain) if plain else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=512)
    parser.add_argument("--builds", type=int, default=20)
    args = parser.parse_args()
    took = take_back(args.mb)
    box = per_build(args.builds)
    print(format_table(
        ["measure", "baseline", "new", "ratio"],
        [["take back and file (s/GB)", round(took["baseline_s_per_gb"], 3),
          round(took["taken_s_per_gb"], 3), round(took["ratio"], 2)],
         ["of which the hashed copy (s/GB)", "", round(took["copy_s_per_gb"], 3), ""],
         ["trivial build (ms)", round((box["plain_s"] or 0) * 1000, 1),
          round(box["boxed_s"] * 1000, 1), round(box["ratio"] or 0, 3)]]))
    path = write_results("procs", {"take_back": took, "per_build": box})
    print(f"results: {path}")


if __name__ == "__main__":
    main()
