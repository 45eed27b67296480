"""Masking every configured secret in a build's output as it streams (nightly/redact.py's
Masker, what the runner puts between the executor and the build log) against writing the same
output to the log unmasked: the cost per megabyte of build output.

    .venv/bin/python benchmarks/bench_masking.py [--mb 200] [--runs 5]

The output is compiler-like text in 64 KiB chunks (what the local executor reads at once)
with six secrets of the lengths nightly sees (AWS keys and session token, anaconda token,
PyPI and SMTP passwords) masked in every form (whole, URL-quoted, base64).
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import median, print_table, write_results

from nightly.redact import Masker

LINE = (b"[ 42%] gcc -O2 -fPIC -c src/native.c -o build/temp.linux-x86_64/native.o "
        b"-I/usr/include/python3.11 warning: unused variable 'x' [-Wunused-variable]\n")


def write_log(chunks: int, chunk: bytes, masker: Masker | None) -> float:
    with tempfile.NamedTemporaryFile(prefix="bench-mask-") as f:
        fd = f.fileno()
        started = time.perf_counter()
        for _ in range(chunks):
            os.write(fd, chunk if masker is None else masker.feed(chunk))
        if masker is not None:
            os.write(fd, masker.flush())
        return time.perf_counter() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=200, help="build output per run, in MB")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    chunk = LINE * (65536 // len(LINE))
    chunks = args.mb * 1_000_000 // len(chunk)
    values = ["AKIA" + secrets.token_hex(8).upper(), secrets.token_urlsafe(30),
              "sess-" + secrets.token_urlsafe(200), "ana-" + secrets.token_hex(20),
              "pypi-" + secrets.token_urlsafe(32), "smtp-" + secrets.token_urlsafe(20)]
    plain, masked = [], []
    for _ in range(args.runs):  # interleaved, so both see the same machine
        plain.append(write_log(chunks, chunk, None))
        masked.append(write_log(chunks, chunk, Masker(values)))
    mb = chunks * len(chunk) / 1e6
    p, m = median(plain), median(masked)
    result = {"mb": round(mb, 1), "runs": args.runs, "secrets": len(values),
              "plain_s": round(p, 4), "masked_s": round(m, 4),
              "plain_mb_s": round(mb / p, 1), "masked_mb_s": round(mb / m, 1),
              "ratio_masked_to_plain": round(m / p, 3)}
    print_table(["log writer", "median s", "MB/s"],
                [["plain", round(p, 4), round(mb / p, 1)], ["masked", round(m, 4), round(mb / m, 1)]],
                title=f"{mb:.0f} MB of build output, {args.runs} runs")
    print(f"masked / plain: {m / p:.2f}")
    write_results("masking", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
