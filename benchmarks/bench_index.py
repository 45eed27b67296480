"""Index regeneration on a bucket of many wheel objects (moto's S3 server on loopback).

Compares, in one run and on the same bucket:

  naive        list every object, HEAD each one for its sha256, write the pages
  full/cold    `nightly index --full` on a bucket without manifests (first run ever)
  full/warm    `nightly index --full` with the manifests in place
  incremental  `nightly index` after N new uploads, with their recorded checksums

Every phase talks to the server over HTTP through the real S3 store, and every HTTP request
is counted. Populating the bucket is not measured: objects are created straight in moto's
in-process backend (tiny bodies, sha256 metadata), because moto accepts only a few hundred
PUTs a second; the HTTP PUT rate is measured on a sample and reported.

    .venv/bin/python benchmarks/bench_index.py [--objects 100000] [--folders 5] [--new 50]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import date, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

RESULTS = Path(os.environ.get("NIGHTLY_BENCH_RESULTS")
               or Path(__file__).resolve().parent / "results") / "index.json"
CUDAS = ["cpu", "cu118", "cu121", "cu124", "cu126", "cu128", "rocm6.2", "xpu"]
PROJECTS = [("torch", "2.6.0"), ("torchvision", "0.21.0"), ("torchaudio", "2.6.0")]
PYTHONS = ["cp39", "cp310", "cp311", "cp312", "cp313"]


def wheel_names(n: int, folders: int) -> list[tuple[str, str]]:
    """(folder, file name) for n distinct, realistic nightly wheels spread over folders."""
    out: list[tuple[str, str]] = []
    day = date(2026, 11, 21)
    per_day = len(PROJECTS) * len(PYTHONS)
    i = 0
    while len(out) < n:
        cuda = CUDAS[i % folders]
        k = i // folders
        d = day - timedelta(days=k // per_day)
        project, base = PROJECTS[(k % per_day) // len(PYTHONS)]
        py = PYTHONS[k % len(PYTHONS)]
        name = f"{project}-{base}.dev{d:%Y%m%d}+{cuda}-{py}-{py}-linux_x86_64.whl"
        out.append((f"whl/nightly/{cuda}", name))
        i += 1
    return out


def measure(store: Any, fn: Callable[[], object]) -> dict[str, Any]:
    store.requests_by_op.clear()
    before = store.requests
    started = time.perf_counter()
    fn()
    return {
        "seconds": round(time.perf_counter() - started, 3),
        "requests": store.requests - before,
        "by_operation": dict(sorted(store.requests_by_op.items())),
    }


def naive(store: Any, folders: list[str], threads: int) -> None:
    """The old way: list everything, one HEAD per object for its sha256, write the pages."""
    from nightly.index import HTML_TYPE, is_package, render_folder

    for folder in folders:
        names = [
            o.key[len(folder) + 1 :] for o in store.list(folder + "/") if is_package(o.key[len(folder) + 1 :])
        ]
        with ThreadPoolExecutor(threads) as pool:
            infos = list(pool.map(lambda n, f=folder: store.head(f"{f}/{n}"), names))
        files = {n: i.sha256 for n, i in zip(names, infos, strict=True) if i is not None}
        for rel, page in render_folder(files).items():
            store.put_bytes(f"{folder}/{rel}", page, HTML_TYPE)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", type=int, default=100_000)
    ap.add_argument("--folders", type=int, default=5, choices=range(1, len(CUDAS) + 1))
    ap.add_argument("--new", type=int, default=50, help="uploads before the incremental run")
    ap.add_argument("--threads", type=int, default=16, help="HEAD concurrency (both methods)")
    ap.add_argument("--http-sample", type=int, default=1000, help="PUTs to time over HTTP")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()

    import boto3
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    import nightly.index as index
    from nightly.index import read_manifest, regenerate, render_folder
    from nightly.stores import S3Store
    from tests.support.s3 import moto_server

    servers = contextlib.ExitStack()  # closed once the measurements are done
    endpoint = servers.enter_context(moto_server("bench", "bench")).endpoint
    bucket = "nightly-bench"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    index.HEAD_THREADS = args.threads

    def new_store() -> S3Store:
        return S3Store(bucket, "", endpoint_url=endpoint, max_concurrency=args.threads)

    names = wheel_names(args.objects + args.new, args.folders)
    existing, fresh = names[: args.objects], names[args.objects :]
    folders = sorted({f for f, _ in names})

    # -- populate: a sample over HTTP through the store (timed), the rest in the backend.
    print(f"populating {args.objects} objects in {len(folders)} folders ...", flush=True)
    tmp = Path(tempfile.mkdtemp())
    body = tmp / "body"
    body.write_bytes(b"wheel")
    digest = hashlib.sha256(b"wheel").hexdigest()
    store = new_store()
    sample = existing[: min(args.http_sample, len(existing))]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.threads) as pool:
        list(pool.map(lambda fn: store.put(f"{fn[0]}/{fn[1]}", body, digest), sample))
    http_rate = len(sample) / (time.perf_counter() - t0)
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    t0 = time.perf_counter()
    for folder, name in existing[len(sample) :]:
        key = backend.put_object(bucket, f"{folder}/{name}", b"wheel")
        key.set_metadata({"x-amz-meta-sha256": digest})
    backend_seconds = time.perf_counter() - t0
    print(f"  HTTP PUT rate {http_rate:.0f}/s (sample of {len(sample)}); "
          f"rest in moto's backend in {backend_seconds:.1f}s", flush=True)  # fmt: skip

    phases: dict[str, dict[str, Any]] = {}

    def run(label: str, fn: Callable[[], object]) -> None:
        print(f"{label} ...", flush=True)
        phases[label] = measure(store, fn)
        print(f"  {phases[label]['seconds']:.1f}s, {phases[label]['requests']} requests",
              flush=True)  # fmt: skip

    store = new_store()
    run("naive", lambda: naive(store, folders, args.threads))
    run("full/cold", lambda: regenerate(store, folders, full=True))
    run("full/warm", lambda: regenerate(store, folders, full=True))

    known: dict[str, dict[str, str]] = {}
    for folder, name in fresh:
        store.put(f"{folder}/{name}", body, digest)
        known.setdefault(folder, {})[name] = digest
    touched = sorted(known)
    run("incremental", lambda: regenerate(store, touched, full=False, known=known))

    # The pages must be exactly what a fresh listing gives.
    for folder in folders:
        files = read_manifest(store, folder).files
        assert files is not None
        listed = [o.key for o in store.list(folder + "/") if o.key.endswith(".whl")]
        assert sorted(files) == sorted(k[len(folder) + 1 :] for k in listed), folder
        for rel, page in render_folder(files).items():
            got = store.get_bytes(f"{folder}/{rel}")
            assert got is not None
            assert got[0] == page, f"{folder}/{rel}"
    servers.close()

    base = phases["naive"]
    rows = []
    for label, p in phases.items():
        rows.append(
            (label, p["seconds"], p["requests"],
             base["seconds"] / p["seconds"] if p["seconds"] else float("inf"),
             base["requests"] / p["requests"] if p["requests"] else float("inf"))
        )  # fmt: skip
    print()
    print(f"{args.objects} objects in {len(folders)} folders, {args.new} new uploads "
          f"in {len(touched)} folders, {args.threads} HEAD threads")  # fmt: skip
    print(f"{'method':<12} {'seconds':>9} {'requests':>9} {'x faster':>9} {'x fewer req':>11}")
    for label, secs, reqs, speed, fewer in rows:
        print(f"{label:<12} {secs:>9.2f} {reqs:>9} {speed:>9.1f} {fewer:>11.1f}")

    result = {
        "objects": args.objects,
        "folders": len(folders),
        "new_uploads": args.new,
        "head_threads": args.threads,
        "populate": {
            "http_put_rate_per_s": round(http_rate, 1),
            "http_sample": len(sample),
            "rest_via_moto_backend_s": round(backend_seconds, 1),
        },
        "phases": phases,
        "ratios_vs_naive": {
            label: {"speed": round(speed, 2), "requests": round(fewer, 2)}
            for label, _, _, speed, fewer in rows
        },
        "environment": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "moto": version("moto"),
            "boto3": version("boto3"),
            "platform": platform.platform(),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
