"""The folder staging store read safely, against plain reads of the same files.

    .venv/bin/python benchmarks/bench_staging_store.py [--package-mb 256] [--attempts 300]
                                                      [--runs 5]

Since the store opens every path below its root one component at a time with O_NOFOLLOW
(nightly.stores.nofollow) and caps what it reads, this measures, in the same run:

- fetching a package (FileStore.get with max_bytes, as the collector does) against
  shutil.copyfile of the same file (what the store did before);
- listing a day of attempts (FileStore.list: descriptor-relative walk, lstat) against
  os.walk + os.stat of the same tree;
- reading back a 32 MiB build log (nightly.cluster.stagedlog: bounded read, scrubbed)
  against reading the file whole.

Writes benchmarks/results/staging_store.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import format_table, median, timed, write_results


def _best_of(fn: Callable[[], object], runs: int) -> float:
    return median([timed(fn)[1] for _ in range(runs)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--package-mb", type=int, default=256)
    ap.add_argument("--attempts", type=int, default=300)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()

    from nightly.cluster.stagedlog import STAGED_LOG_MAX, read_staged_log
    from nightly.stores import FileStore

    with tempfile.TemporaryDirectory(prefix="bench-staging-") as tmp:
        root = Path(tmp) / "staging"
        store = FileStore(root, label="staging")
        pkg = Path(tmp) / "pkg.whl"
        with pkg.open("wb") as f:
            for _ in range(args.package_mb):
                f.write(os.urandom(1 << 20))
        size = pkg.stat().st_size
        # The folder store refuses bytes whose hash is not the one given: give the real one.
        from nightly.files import sha256_file

        store.put("day/builds/b/t/packages/pkg.whl", pkg, sha256_file(pkg))
        out = Path(tmp) / "out"
        out.mkdir()
        got = _best_of(lambda: store.get("day/builds/b/t/packages/pkg.whl", out / "a.whl",
                                         max_bytes=size), args.runs)
        plain = _best_of(lambda: shutil.copyfile(root / "day/builds/b/t/packages/pkg.whl",
                                                 out / "b.whl"), args.runs)

        for n in range(args.attempts):
            for name in ("attempt.json", "log/000001", "log/000002", "log.txt",
                         "packages/x.whl", "result.json"):
                p = root / "day" / "builds" / f"b{n % 50}" / f"t{n}" / name
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(b"x")
        files = args.attempts * 6 + 1

        def walk() -> int:
            count = 0
            for d, _, names in os.walk(root / "day"):
                for name in names:
                    os.stat(os.path.join(d, name))
                    count += 1
            return count

        listed = _best_of(lambda: list(store.list("day/")), args.runs)
        walked = _best_of(walk, args.runs)

        log = root / "day" / "builds" / "b" / "t" / "log.txt"
        line = b"[ 42%] Building CXX object caffe2/CMakeFiles/torch_cpu.dir/aten/src/x.cpp.o\n"
        log.write_bytes(line * (STAGED_LOG_MAX // len(line)))
        staged = _best_of(lambda: read_staged_log(store, "day/builds/b/t/", {"log.txt"},
                                                  secrets=("0123456789abcdef" * 4,)), args.runs)
        read = _best_of(log.read_bytes, args.runs)

    results = {
        "package_mb": args.package_mb, "files_listed": files, "log_mb": STAGED_LOG_MAX >> 20,
        "runs": args.runs,
        "median_s": {"get": got, "copyfile": plain, "list": listed, "os_walk": walked,
                     "staged_log": staged, "read_log": read},
        "ratio": {"get_to_copyfile": got / plain, "list_to_os_walk": listed / walked,
                  "staged_log_to_read": staged / read},
    }
    print(format_table(
        ["what", "safe store (s)", "plain (s)", "ratio"],
        [[f"{args.package_mb} MB package: get(max_bytes) / copyfile", got, plain, got / plain],
         [f"list {files} files: FileStore.list / os.walk+stat", listed, walked, listed / walked],
         [f"{STAGED_LOG_MAX >> 20} MiB log: read_staged_log / read_bytes", staged, read,
          staged / read]]))
    write_results("staging_store", results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
