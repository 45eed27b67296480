"""What the cluster's security costs: mutual TLS against plain tcp, and verified staging.

Two real Dask clusters on loopback, each a `dask scheduler` and one `dask worker` process,
one plain (tcp://) and one with certificates from `nightly cluster certs` (tls://, as
docs/cluster.md sets it up), measured in alternation from the same client process:

- connect: a `distributed.Client` connecting (and closing), the orchestrator's start;
- round trips: `--tasks` tiny tasks submitted and gathered, which is what the orchestrator's
  dispatching and the workers' events amount to (packages never travel through Dask).

Verified staging: the orchestrator hashes every package it fetches from staging; measured as
the sha256 of a `--package-mb` MB file against copying it (the folder store's download).

Ratios (lower is better, 1.0 = free): TLS / tcp, and hash / copy.

    .venv/bin/python benchmarks/bench_cluster_tls.py [--runs 5] [--tasks 500] [--package-mb 256]

Writes benchmarks/results/cluster_tls.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

from common import format_table, median, write_results  # noqa: E402

DASK = Path(sys.executable).with_name("dask")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """A scheduler and one worker as subprocesses; plain when `certs` is None."""

    def __init__(self, base: Path, certs: Path | None) -> None:
        self.base, self.certs = base, certs
        self.address = f"{'tls' if certs else 'tcp'}://127.0.0.1:{_free_port()}"
        self.procs: list[subprocess.Popen[bytes]] = []

    def tls(self, name: str) -> list[str]:
        c = self.certs
        return [] if c is None else ["--tls-ca-file", str(c / "ca.pem"), "--tls-cert",
                                     str(c / f"{name}.pem"), "--tls-key", str(c / f"{name}-key.pem")]

    def security(self) -> Any:
        if self.certs is None:
            return None
        from nightly.cluster.tls import TlsFiles, security

        c = self.certs
        return security(TlsFiles(ca_file=c / "ca.pem", cert=c / "orchestrator.pem",
                                 key=c / "orchestrator-key.pem"), require_encryption=True)

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
        proto, port = self.address.split("://")[0], self.address.rsplit(":", 1)[1]
        log = (self.base / f"{proto}.log").open("ab")
        self.procs.append(subprocess.Popen(
            [str(DASK), "scheduler", "--protocol", proto, "--host", "127.0.0.1", "--port", port,
             "--no-dashboard", *self.tls("scheduler")], stdout=log, stderr=subprocess.STDOUT, env=env))
        self.procs.append(subprocess.Popen(
            [str(DASK), "worker", self.address, "--nthreads", "2", "--no-nanny", "--host",
             "127.0.0.1", "--no-dashboard", "--local-directory", str(self.base / proto),
             *self.tls("worker")], stdout=log, stderr=subprocess.STDOUT, env=env))
        from distributed import Client

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with Client(self.address, timeout=5, set_as_default=False,
                            security=self.security()) as c:
                    if c.scheduler_info()["workers"]:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"{self.address} did not come up (see {self.base})")

    def close(self) -> None:
        for p in reversed(self.procs):  # the worker first: it would wait for the scheduler
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _inc(x: int) -> int:
    return x + 1


def measure(cluster: Cluster, tasks: int) -> tuple[float, float]:
    """(connect + close seconds, seconds for `tasks` round trips)."""
    from distributed import Client

    t0 = time.perf_counter()
    c = Client(cluster.address, timeout=20, set_as_default=False, security=cluster.security())
    connected = time.perf_counter() - t0
    try:
        t1 = time.perf_counter()
        futures = c.map(_inc, range(tasks), pure=False)
        assert c.gather(futures) == list(range(1, tasks + 1))
        trips = time.perf_counter() - t1
    finally:
        c.close()
    return connected, trips


def staging_cost(folder: Path, mb: int, runs: int) -> tuple[float, float]:
    """(median copy seconds, median sha256 seconds) of an `mb` MB package."""
    from nightly.files import sha256_file

    src = folder / "package.whl"
    with src.open("wb") as f:
        for _ in range(mb):
            f.write(os.urandom(1 << 20))
    copies, hashes = [], []
    for i in range(runs):
        dest = folder / f"fetched-{i}.whl"
        t0 = time.perf_counter()
        shutil.copyfile(src, dest)
        copies.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        sha256_file(dest)
        hashes.append(time.perf_counter() - t0)
        dest.unlink()
    return median(copies), median(hashes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tasks", type=int, default=500)
    ap.add_argument("--package-mb", type=int, default=256)
    args = ap.parse_args()
    from nightly.cluster.tls import make_certs

    with tempfile.TemporaryDirectory(prefix="bench-tls-") as tmp:
        base = Path(tmp)
        make_certs(base / "certs", ["scheduler", "worker"])
        plain, tls = Cluster(base, None), Cluster(base, base / "certs")
        plain.start()
        tls.start()
        got: dict[str, dict[str, list[float]]] = {
            k: {"connect": [], "trips": []} for k in ("tcp", "tls")}
        try:
            measure(plain, args.tasks)  # warm both (imports, the workers' first tasks)
            measure(tls, args.tasks)
            for _ in range(args.runs):  # alternated, so drift in load hits both alike
                for name, cluster in (("tcp", plain), ("tls", tls)):
                    connect, trips = measure(cluster, args.tasks)
                    got[name]["connect"].append(connect)
                    got[name]["trips"].append(trips)
        finally:
            plain.close()
            tls.close()
        copy_s, hash_s = staging_cost(base, args.package_mb, args.runs)
    med = {k: {m: median(v) for m, v in d.items()} for k, d in got.items()}
    result = {
        "runs": args.runs, "tasks": args.tasks, "package_mb": args.package_mb,
        "median_s": med,
        "samples_s": {k: {m: [round(x, 4) for x in v] for m, v in d.items()} for k, d in got.items()},
        "ratio_tls_to_tcp": {m: round(med["tls"][m] / med["tcp"][m], 3) for m in ("connect", "trips")},
        "staging": {"copy_s": round(copy_s, 4), "sha256_s": round(hash_s, 4),
                    "ratio_hash_to_copy": round(hash_s / copy_s, 3)},
    }
    print(format_table(["measure", "tcp s", "tls s", "tls / tcp"], [
        ["connect + close", round(med["tcp"]["connect"], 4), round(med["tls"]["connect"], 4),
         result["ratio_tls_to_tcp"]["connect"]],
        [f"{args.tasks} task round trips", round(med["tcp"]["trips"], 4),
         round(med["tls"]["trips"], 4), result["ratio_tls_to_tcp"]["trips"]],
    ]))
    print(format_table(["verified staging", "copy s", "sha256 s", "sha256 / copy"], [
        [f"{args.package_mb} MB package", round(copy_s, 4), round(hash_s, 4),
         result["staging"]["ratio_hash_to_copy"]]]))
    write_results("cluster_tls", result)


if __name__ == "__main__":
    main()
