"""What containing a build's processes and taking its packages back cost (issue 48).

    .venv/bin/python benchmarks/bench_procs.py [--mb 512] [--builds 20]

1. Taking packages back, per GB: a package of `--mb` MB in a build's OUTPUT_DIR (the build
   account's file, uid 65534, where the benchmark runs as root). Baseline: what filing did
   before take-back existed (hash it once, rename it into the day's folder). New: the path
   from the build's output to the upload as it is now (nightly.builds.run.takeback.take_hashed):
   the package's inode adopted (one link, no open writer: made nightly's, hashed in one read)
   and filed into the day's folder (a rename) with the sha256 it carries; signing signs that
   sha256 without reading the package (issue 59). Also the copy take-back falls back to (a
   writer still holds the package open: copied into a new file, hashed as it is copied).
   The upload's own read (the copy it sends, hashed: nightly.publish.sending) is in neither:
   the baseline's upload read the package too. All on the same file system, interleaved,
   the median of 3; the file is in the page cache (as a package just written by its build
   is): CPU and memory bandwidth.
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
    if os.geteuid() == 0:  # the build account's, as a build user leaves it
        os.chown(path, 65534, 65534)
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


def _taken(folder: Path, mb: int, *, writer: bool) -> tuple[float, bool]:
    """One take-back and filing: (seconds, whether the inode was adopted). `writer`: a
    descriptor open for writing holds the package, so it is copied."""
    src = _package(folder, mb)
    held = os.open(src, os.O_WRONLY) if writer else None
    dest = folder / "taken"
    dest.mkdir()
    started = time.perf_counter()
    ino = src.stat().st_ino
    taken, _digest = take_hashed(src, dest)  # hashed in its one read, carried from here on
    filed = folder / "day" / taken.name
    filed.parent.mkdir()
    os.replace(taken, filed)  # filed with the sha256 it carries: not read again
    took = time.perf_counter() - started
    if held is not None:
        os.close(held)
    adopted = filed.stat().st_ino == ino
    shutil.rmtree(folder)
    return took, adopted


def take_back(mb: int, runs: int = 3) -> dict[str, Any]:
    base: list[float] = []
    new: list[float] = []
    copies: list[float] = []
    adopted: list[bool] = []
    with tempfile.TemporaryDirectory(prefix="bench-procs-", dir="/var/tmp") as t:
        for i in range(runs):
            base.append(_baseline(Path(t) / f"b{i}", mb))
            took, was_adopted = _taken(Path(t) / f"n{i}", mb, writer=False)
            new.append(took)
            adopted.append(was_adopted)
            copies.append(_taken(Path(t) / f"c{i}", mb, writer=True)[0])
    gb = mb / 1024
    return {"mb": mb, "baseline_s": base, "taken_s": new, "copied_s": copies,
            "adopted": adopted, "baseline_s_per_gb": median(base) / gb,
            "copy_s_per_gb": median(copies) / gb, "taken_s_per_gb": median(new) / gb,
            "added_s_per_gb": (median(new) - median(base)) / gb,
            "ratio": median(new) / median(base), "copy_ratio": median(copies) / median(base)}


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
        [["take back (adopted) and file (s/GB)", round(took["baseline_s_per_gb"], 3),
          round(took["taken_s_per_gb"], 3), round(took["ratio"], 2)],
         ["take back (copied: open writer) and file (s/GB)", "",
          round(took["copy_s_per_gb"], 3), round(took["copy_ratio"], 2)],
         ["trivial build (ms)", round((box["plain_s"] or 0) * 1000, 1),
          round(box["boxed_s"] * 1000, 1), round(box["ratio"] or 0, 3)]]))
    if not all(took["adopted"]):
        print("note: a package was copied where it should have been adopted "
              f"(adopted: {took['adopted']}): see take_hashed's conditions", flush=True)
    path = write_results("procs", {"take_back": took, "per_build": box})
    print(f"results: {path}")


if __name__ == "__main__":
    main()
