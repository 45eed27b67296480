"""nightly's index pages against PyTorch's production generator, on the same S3 bucket.

The peer is pytorch/test-infra's `s3_management/manage_v2.py`, run unmodified from a checkout
of it that you give (`--peer DIR` or `$NIGHTLY_PEER_TEST_INFRA`: a clone of
https://github.com/pytorch/test-infra; none is part of this project, and without one the
benchmark says so in one line and exits 77, which run_all.py reports as skipped) in its own
virtual environment (its pinned requirements.txt, cached under ~/.cache/nightly/), with
`AWS_ENDPOINT_URL` pointing at a local moto server.
Both tools index one bucket named `pytorch` in PyTorch's layout: `whl/nightly/<accelerator>/`
folders of torch, torchvision and torchaudio wheels and `pytorch-triton` in the channel root
`whl/nightly/`, every wheel with its `<wheel>.metadata` (PEP 658) beside it, sha256 as
`x-amz-meta-checksum-sha256` on the wheels (PyTorch's convention) and S3's own SHA256
checksum on the metadata files (which the peer requires). nightly is configured like the peer:
`whl/nightly` shared with every accelerator folder, aggregate channel root, newest 60 versions,
and otherwise as a user adopting an S3 bucket would run it (`index_workers` at its default).

For each size, measured from outside (wall seconds of each tool's process, every HTTP request
counted at the server; and the CPU seconds of the tool's process and of the moto server, with
the load average, since on a shared machine wall time follows what others run):
  full-all  nightly's first run showing every version (no `index_versions`: it reads every
            wheel's sha256 and .metadata, where the peer reads its 60 newest versions), against
            the peer's first run; then nightly's manifests are deleted, so that
  full      the first run on the bucket (for nightly: adopting a bucket it did not write)
  rerun     the same again, nothing changed
  +50       after 50 new wheels (with .metadata) of the next night (its pytorch-triton and
            wheels in several accelerator folders); both tools find them by listing (nightly's
            own `nightly upload` skips even the listing: see bench_index)
then pip and uv resolve `torch` from `whl/nightly/cpu/` with each tool's pages (served by a
local HTTP server over the bucket; the peer's absolute links to download-r2.pytorch.org are
pointed at it), counting what they GET. Populating the bucket is not measured (objects go
straight into moto's in-process backend).

    .venv/bin/python benchmarks/bench_index_peer.py --peer DIR [--sizes 5000 20000] [--no-full-all]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import http.server
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import date, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

from common import SKIPPED, format_table, write_results  # noqa: E402

from tests.support.net import free_port  # noqa: E402

PEER = Path()  # the checkout of pytorch/test-infra (--peer), set by main
PEER_SCRIPT = Path("s3_management") / "manage_v2.py"
BUCKET = "pytorch"
ACCELERATORS = ["cpu", "cu126", "cu128", "rocm6.4", "xpu"]
PROJECTS = [("torch", "2.10.0"), ("torchvision", "0.25.0"), ("torchaudio", "2.10.0")]
PYTHONS = ["cp310", "cp311", "cp312", "cp313"]
TRITON = "3.5.0"
PLATFORM = "manylinux_2_28_x86_64"
PEER_HOST = "https://download-r2.pytorch.org"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}


# ---------------------------------------------------------------------------- the bucket


def layout(wheels: int, first_day: date) -> list[tuple[str, str, bytes]]:
    """(key, project, METADATA) of about `wheels` nightly wheels, newest day first, plus one
    pytorch-triton wheel per day and Python in the channel root."""
    out: list[tuple[str, str, bytes]] = []
    per_day = len(ACCELERATORS) * len(PROJECTS) * len(PYTHONS)
    for k in range(max(1, round(wheels / per_day))):
        day = first_day - timedelta(days=k)
        stamp = f"{day:%Y%m%d}"
        triton = f"{TRITON}+git{stamp}"
        for py in PYTHONS:
            name = f"pytorch_triton-{triton}-{py}-{py}-{PLATFORM}.whl"
            out.append((f"whl/nightly/{name}", "pytorch-triton", metadata("pytorch-triton", triton, [])))
        for acc in ACCELERATORS:
            for project, base in PROJECTS:
                version = f"{base}.dev{stamp}+{acc}"
                needs = [f'pytorch-triton=={triton}; platform_system == "Linux"']
                body = metadata(project, version, needs if project == "torch" else [])
                for py in PYTHONS:
                    name = f"{project}-{version}-{py}-{py}-{PLATFORM}.whl"
                    out.append((f"whl/nightly/{acc}/{name}", project, body))
    return out


def metadata(project: str, version: str, requires: list[str]) -> bytes:
    lines = ["Metadata-Version: 2.1", f"Name: {project}", f"Version: {version}",
             "Requires-Python: >=3.10"] + [f"Requires-Dist: {r}" for r in requires]
    return ("\n".join(lines) + "\n\n").encode()


def populate(backend: Any, objects: list[tuple[str, str, bytes]]) -> None:
    """Straight into moto's backend: the wheel (a stand-in body) with PyTorch's
    x-amz-meta-checksum-sha256, and its .metadata with S3's own SHA256 checksum."""
    for key, _, body in objects:
        data = key.encode()  # clients only ever read the metadata when resolving
        obj = backend.put_object(BUCKET, key, data)
        obj.set_metadata({"x-amz-meta-checksum-sha256": hashlib.sha256(data).hexdigest()})
        md = backend.put_object(
            BUCKET, key + ".metadata", body,
            checksum_value=base64.b64encode(hashlib.sha256(body).digest()).decode(),
        )
        md.checksum_algorithm = "SHA256"


# ---------------------------------------------------------------------------- the server


class Counting:
    """WSGI middleware in front of moto: counts requests by kind, and sends moto the
    checksum mode in the spelling it accepts (`ENABLED`; the peer sends `Enabled`, which real
    S3 accepts too)."""

    def __init__(self, app: Any) -> None:
        self.app, self.counts, self.lock = app, Counter[str](), threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("HTTP_X_AMZ_CHECKSUM_MODE", "").upper() == "ENABLED":
            environ["HTTP_X_AMZ_CHECKSUM_MODE"] = "ENABLED"
        method, query = environ["REQUEST_METHOD"], environ.get("QUERY_STRING", "")
        kind = "LIST" if method == "GET" and "list-type" in query else method
        with self.lock:
            self.counts[kind] += 1
        return self.app(environ, start_response)

    def take(self) -> dict[str, int]:
        with self.lock:
            out = dict(self.counts)
            self.counts.clear()
        return out


def start_moto(port: int) -> Counting:
    from moto.server import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    app = Counting(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", port, app, True, request_handler=MotoRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return app


# ---------------------------------------------------------------------------- the tools


def peer_python() -> Path:
    """The peer's own virtual environment (Python 3.11 + its requirements.txt), cached."""
    reqs = PEER / "s3_management" / "requirements.txt"
    digest = hashlib.sha256(reqs.read_bytes()).hexdigest()[:12]
    venv = Path.home() / ".cache" / "nightly" / f"peer-venv-{digest}"
    py = venv / "bin" / "python"
    if not py.exists():
        interpreter = shutil.which("python3.11") or sys.executable
        subprocess.run([interpreter, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "-r", str(reqs)], check=True)
    return py


def run_tool(cmd: list[str], env: dict[str, str], cwd: Path, log: Path, app: Counting) -> dict[str, Any]:
    """Wall seconds, CPU seconds of the tool's process (client) and of this one (the moto
    server: nothing else runs here meanwhile), the load average at the end, requests by kind."""
    app.take()
    server, client = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with open(log, "ab") as out:
        proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=False)
    seconds = time.perf_counter() - started
    requests = app.take()
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[1]} failed (exit {proc.returncode}); see {log}")
    return {"seconds": round(seconds, 2), "requests": sum(requests.values()), "by_kind": requests,
            "client_cpu": round(_cpu(resource.RUSAGE_CHILDREN) - client, 2),
            "server_cpu": round(_cpu(resource.RUSAGE_SELF) - server, 2), "load": round(os.getloadavg()[0], 1)}


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _line(tool: str, label: str, r: dict[str, Any]) -> str:
    return (f"  {tool:8} {label:8} {r['seconds']:8.1f}s (cpu: client {r['client_cpu']:.1f}s, server "
            f"{r['server_cpu']:.1f}s; load {r['load']}) {r['requests']:7} requests {r['by_kind']}")


def nightly_config(work: Path, endpoint: str, versions: int = 60) -> Path:
    path = work / f"nightly-{versions}.toml"
    path.write_text(f"""\
[project]
name = "torch"
source = "."
base_version = "2.10.0"

[matrix.linux.manywheel]
pythons = ["3.11"]
cudas = ["cpu"]

[[machines]]
name = "bench"
platform = "linux"
queues = 1

[publish]
url = "s3://{BUCKET}"
endpoint_url = "{endpoint}"
find_links = "torch_{{channel}}.html"
index_shared = ["whl/nightly"]
index_aggregate = true

[retention]
index_versions = {versions}
""")
    return path


def forget_index(client: Any) -> int:
    """Delete nightly's manifests (and progress records): the bucket is again one nightly
    did not write (pages stay, as the peer's would)."""
    ours = ("/.index.json", "/.index-progress.json")
    keys = [obj["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
            for obj in page.get("Contents", []) if obj["Key"].endswith(ours)]
    for key in keys:
        client.delete_object(Bucket=BUCKET, Key=key)
    return len(keys)


def snapshot(client: Any, prefix: str) -> dict[str, bytes]:
    """The html pages under a prefix, as they are now."""
    pages: dict[str, bytes] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        for obj in page.get("Contents", []):
            if obj["Key"].endswith(".html"):
                pages[obj["Key"]] = client.get_object(Bucket=BUCKET, Key=obj["Key"])["Body"].read()
    return pages


# ---------------------------------------------------------------------------- the clients


def serve_pages(pages: dict[str, bytes], client: Any) -> tuple[Any, Counter[str], str]:
    """HTTP on loopback: the given pages, everything else read from the bucket; counts GETs
    of pages, .metadata files and wheels."""
    gets: Counter[str] = Counter()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            from urllib.parse import unquote

            key = unquote(self.path.split("?")[0].split("#")[0]).lstrip("/")
            if key.endswith("/") or not key:
                key += "index.html"
            kind = "page" if key.endswith(".html") else "metadata" if key.endswith(".metadata") else "wheel"
            gets[kind] += 1
            body = pages.get(key)
            if body is None and kind != "page":
                try:
                    body = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
                except Exception:
                    body = None
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html" if kind == "page" else "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, gets, f"http://127.0.0.1:{server.server_address[1]}"


def resolve(tool: str, index: str, work: Path) -> dict[str, Any]:
    """Resolve `torch` (and its pytorch-triton) with pip or uv, without installing."""
    report = work / f"{tool}-report.json"
    if tool == "pip":
        # --isolated: this machine's pip configuration (extra indexes) must not take part.
        cmd = [sys.executable, "-m", "pip", "--isolated", "install", "--dry-run", "--ignore-installed",
               "--no-cache-dir", "--disable-pip-version-check", "--quiet", "--index-url", index,
               "--report", str(report), "torch"]
    else:
        uv = Path(sys.executable).parent / "uv"
        cmd = [str(uv if uv.exists() else "uv"), "pip", "install", "--dry-run", "--no-cache",
               "--python", sys.executable, "--target", str(work / "uv-target"), "--index-url", index, "torch"]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
    seconds = time.perf_counter() - started
    out = proc.stdout + proc.stderr
    chosen: list[str] = []
    if tool == "pip" and report.exists():
        installs = json.loads(report.read_text())["install"]
        chosen = [f"{i['metadata']['name']}=={i['metadata']['version']}" for i in installs]
    elif tool == "uv":
        chosen = [line.strip()[2:] for line in out.splitlines() if line.strip().startswith("+ ")]
    return {"ok": proc.returncode == 0, "seconds": round(seconds, 2), "resolved": sorted(chosen),
            "output_tail": out[-600:] if proc.returncode else ""}


def clients(pages: dict[str, bytes], client: Any, work: Path, rewrite: bool) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for tool in ("pip", "uv"):
        served = dict(pages)
        server, gets, base = serve_pages(served, client)
        if rewrite:  # the peer's absolute links, pointed at this server
            for k, v in served.items():
                served[k] = v.replace(PEER_HOST.encode(), base.encode())
        try:
            results[tool] = resolve(tool, f"{base}/whl/nightly/cpu/", work) | {"gets": dict(gets)}
        finally:
            server.shutdown()
    return results


# ---------------------------------------------------------------------------- one size


def bench_size(
    wheels: int, app: Counting, endpoint: str, work: Path, full_all: bool = True
) -> dict[str, Any]:
    import boto3
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    client = boto3.client("s3", endpoint_url=endpoint)
    backend.reset()  # a fresh bucket per size
    client.create_bucket(Bucket=BUCKET)
    first_day = date(2026, 11, 21)
    objects = layout(wheels, first_day)
    t0 = time.perf_counter()
    populate(backend, objects)
    print(f"\n== {len(objects)} wheels (+ as many .metadata) in moto in {time.perf_counter() - t0:.1f}s",
          flush=True)
    # The next night's first 50 wheels: its pytorch-triton, then cpu/, cu126/, cu128/...
    new = layout(len(ACCELERATORS) * len(PROJECTS) * len(PYTHONS), first_day + timedelta(days=1))[:50]
    assert len(new) == 50
    assert not {k for k, _, _ in new} & {k for k, _, _ in objects}

    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "R2_"))}, **CREDENTIALS,
           "AWS_ENDPOINT_URL": endpoint}
    peer = [str(peer_python()), str(PEER / PEER_SCRIPT), "whl/nightly"]
    nightly_bin = Path(sys.executable).parent / "nightly"
    ours = [str(nightly_bin), "index", "--full", "--config", str(nightly_config(work, endpoint))]
    peer_cwd = work / "peer-cwd"  # the peer also writes its pages below its working folder
    peer_cwd.mkdir(exist_ok=True)
    log = work / "tools.log"
    phases: dict[str, dict[str, Any]] = {"peer": {}, "nightly": {}}

    def one(tool: str, label: str, cmd: list[str], cwd: Path) -> None:
        r = phases[tool][label] = run_tool(cmd, env, cwd, log, app)
        print(_line(tool, label, r), flush=True)

    def both(label: str) -> None:
        one("peer", label, peer, peer_cwd)
        one("nightly", label, ours, work)

    one("peer", "full", peer, peer_cwd)
    if full_all:
        everything = [*ours[:-1], str(nightly_config(work, endpoint, versions=0))]
        one("nightly", "full-all", everything, work)
        forget_index(client)
    one("nightly", "full", ours, work)
    both("rerun")
    populate(backend, new)
    phases["peer"]["+50"] = run_tool(peer, env, peer_cwd, log, app)
    peer_pages = snapshot(client, "whl/nightly/cpu/")
    phases["nightly"]["+50"] = run_tool(ours, env, work, log, app)
    our_pages = snapshot(client, "whl/nightly/cpu/")
    for tool in ("peer", "nightly"):
        r = phases[tool]["+50"]
        print(_line(tool, "+50", r), flush=True)
    resolved = {
        "peer": clients(peer_pages, client, work, rewrite=True),
        "nightly": clients(our_pages, client, work, rewrite=False),
    }
    for tool, res in resolved.items():
        for client_name, r in res.items():
            print(f"  {client_name} from {tool}'s pages: ok={r['ok']} {r['seconds']}s gets={r['gets']} "
                  f"{r['resolved']}{' ' + r['output_tail'] if not r['ok'] else ''}", flush=True)
    return {"wheels": len(objects), "phases": phases, "clients": resolved}


def ratios(result: dict[str, Any]) -> list[list[object]]:
    rows: list[list[object]] = []
    for label in ("full-all", "full", "rerun", "+50"):
        if label not in result["phases"]["nightly"]:
            continue
        p = result["phases"]["peer"]["full" if label == "full-all" else label]
        n = result["phases"]["nightly"][label]
        cpu = [r["client_cpu"] + r["server_cpu"] for r in (p, n)]
        rows.append([result["wheels"], label, p["seconds"], n["seconds"],
                     round(n["seconds"] / p["seconds"], 3) if p["seconds"] else "n/a",
                     round(cpu[1] / cpu[0], 3) if cpu[0] else "n/a",
                     p["requests"], n["requests"],
                     round(n["requests"] / p["requests"], 3) if p["requests"] else "n/a",
                     f"{p['load']}/{n['load']}"])
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[5000, 20000])
    ap.add_argument("--no-full-all", action="store_true",
                    help="skip nightly's first run without a version cap")
    ap.add_argument("--peer", type=Path, default=os.environ.get("NIGHTLY_PEER_TEST_INFRA") or None,
                    metavar="DIR", help="a checkout of pytorch/test-infra (default: "
                    "$NIGHTLY_PEER_TEST_INFRA)")
    args = ap.parse_args()
    global PEER
    if args.peer is None:
        print("skipped: needs a checkout of pytorch/test-infra (its "
              f"{PEER_SCRIPT}): pass --peer DIR or set NIGHTLY_PEER_TEST_INFRA=DIR", flush=True)
        return SKIPPED
    if not (args.peer / PEER_SCRIPT).is_file():
        print(f"bench_index_peer: error: {args.peer} has no {PEER_SCRIPT}: give --peer a checkout "
              "of pytorch/test-infra", file=sys.stderr)
        return 2
    PEER = args.peer.resolve()
    os.environ.update(CREDENTIALS)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    app = start_moto(port)
    endpoint = f"http://127.0.0.1:{port}"
    results = []
    with tempfile.TemporaryDirectory(prefix="nightly-bench-peer-") as tmp:
        for size in args.sizes:
            work = Path(tmp) / str(size)
            work.mkdir()
            results.append(bench_size(size, app, endpoint, work, full_all=not args.no_full_all))
    headers = ["wheels", "run", "peer s", "nightly s", "s ratio", "cpu ratio", "peer req", "nightly req",
               "req ratio", "load"]
    rows = [row for r in results for row in ratios(r)]
    print("\nnightly vs test-infra manage_v2.py (ratio = nightly / peer; below 1 is better)")
    print(format_table(headers, rows))
    client_rows = [
        [r["wheels"], tool, c, res["ok"], res["seconds"], res["gets"].get("metadata", 0),
         res["gets"].get("wheel", 0), " ".join(res["resolved"])]
        for r in results for tool, per in r["clients"].items() for c, res in per.items()
    ]
    print(format_table(["wheels", "pages", "client", "ok", "s", "metadata GETs", "wheel GETs", "resolved"],
                       client_rows))
    table = [dict(zip(headers, r, strict=True)) for r in rows]
    path = write_results("index_peer", {"results": results, "table": table})
    print(f"results: {path}")
    ok = all(res["ok"] for r in results for per in r["clients"].values() for res in per.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

