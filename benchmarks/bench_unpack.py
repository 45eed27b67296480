"""`nightly init SDIST`'s checked unpacking (nightly/cli/unpack.py: top folder only, no links
or devices, bounded members and size, exclusive creates, a temporary folder renamed into
place) against what init did before, tarfile's `extractall(filter="data")`, on a real sdist:
the cost of the checks.

    .venv/bin/python benchmarks/bench_unpack.py --sdist numpy-2.1.3.tar.gz [--runs 5]

Any sdist does (numpy 2.1.3's: 20 MB, 7,735 members, 64 MB unpacked; from PyPI). Both run
interleaved on the same machine, each into a fresh folder; the medians and their ratio are
printed and written to benchmarks/results/unpack.json.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import median, print_table, write_results

from nightly.cli.unpack import unpack_sdist


def plain(archive: Path, dest: Path) -> float:
    started = time.perf_counter()
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    return time.perf_counter() - started


def checked(archive: Path, dest: Path) -> float:
    started = time.perf_counter()
    unpack_sdist(archive, dest)
    return time.perf_counter() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sdist", type=Path, required=True, help="a .tar.gz sdist")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tarfile.open(args.sdist) as tar:
        members = tar.getmembers()
    size = sum(m.size for m in members)
    times: dict[str, list[float]] = {"extractall(filter='data')": [], "nightly unpack_sdist": []}
    for _ in range(args.runs):  # interleaved, so both see the same machine
        for name, fn in (("extractall(filter='data')", plain), ("nightly unpack_sdist", checked)):
            with tempfile.TemporaryDirectory(prefix="bench-unpack-") as t:
                times[name].append(fn(args.sdist, Path(t)))
                shutil.rmtree(t, ignore_errors=True)
    base, ours = (median(v) for v in times.values())
    print_table(["unpacking", "median s", "MB/s"],
                [[name, round(median(v), 3), round(size / 1e6 / median(v), 1)]
                 for name, v in times.items()],
                title=f"{args.sdist.name}: {len(members)} members, {size / 1e6:.0f} MB, "
                      f"{args.runs} runs")
    print(f"checked / plain: {ours / base:.2f}")
    write_results("unpack", {
        "sdist": args.sdist.name, "members": len(members), "mb": round(size / 1e6, 1),
        "runs": args.runs, "plain_s": round(base, 4), "checked_s": round(ours, 4),
        "ratio_checked_to_plain": round(ours / base, 3),
    })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
