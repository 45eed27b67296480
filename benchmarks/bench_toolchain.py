"""The portable toolchain's cost (issue 26): the README's demo manywheels built with the
glibc 2.31 sysroot toolchain and `manylinux = "2_28"`, against the same builds with the
host's plain gcc (no policy), through `nightly build` with the local executor.

    .venv/bin/python benchmarks/bench_toolchain.py [--pythons 3.10,3.11,3.12] [--repeat 1]

Measured in one run:
  1. the demo's manywheels (each Python x cpu, CUDA 13.0) with the compiler cache off, one
     queue, plain and portable nights interleaved: portable / plain wall time (and the sum
     of the builds' own durations), with the tags each reached;
  2. assembling the toolchain cold into an empty cache (apt-get update + download of seven
     MB of bullseye .debs + unpack): seconds, and the toolchain's size on disk.

Results: benchmarks/results/toolchain.json.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
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

from common import format_table, machine_info, write_results  # noqa: E402


def config_text(root: Path, pythons: list[str], portable: bool) -> str:
    text = (REPO / "nightly.toml").read_text()
    policy = re.search(r'^manylinux = "2_28"\n', text, re.M)
    assert policy, "nightly.toml declares no manylinux policy"
    if not portable:
        text = text.replace(policy.group(0), "")
    text = text.replace('root = "nightlies"', f'root = "{root}"')
    text = text.replace('source = "examples/demo"', f'source = "{REPO / "examples" / "demo"}"')
    text = text.replace('pythons = ["3.10", "3.11", "3.12"]', f"pythons = {json.dumps(pythons)}")
    text = text.replace("queues = 2", "queues = 1")  # builds do not compete: time = their sum
    return text


def night(scratch: Path, name: str, pythons: list[str], portable: bool, date: str) -> dict[str, Any]:
    folder = scratch / name
    folder.mkdir()
    config = folder / "nightly.toml"
    text = config_text(folder / "nightlies", pythons, portable)
    # The compiler cache would hide the compile cost being measured.
    config.write_text(f'recipes = "{REPO / "recipes"}"\n' + text + "\n[cache]\nenabled = false\n")
    nightly = Path(sys.executable).parent / "nightly"
    t0 = time.monotonic()
    proc = subprocess.run([str(nightly), "build", "manywheel", ",".join(pythons), "cpu,cu130",
                           "--config", str(config), "--no-upload", "--date", date],
                          capture_output=True, text=True, check=False)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"{name}: nightly build failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}"
                 f"\n{proc.stderr[-3000:]}")
    state = json.loads((folder / "nightlies" / date / "state.json").read_text())["builds"]
    return {
        "wall_s": round(wall, 2),
        "builds_s": round(sum(float(e.get("duration_s") or 0) for e in state.values()), 2),
        "tags": {bid: (e.get("manylinux") or {}).get("tags") for bid, e in sorted(state.items())},
        "glibc": {bid: (e.get("manylinux") or {}).get("glibc") for bid, e in sorted(state.items())},
    }


def cold_toolchain(scratch: Path) -> dict[str, Any]:
    from nightly.images import sysroot

    cache = scratch / "cache"
    t0 = time.monotonic()
    toolchain = sysroot.assemble(cache, log=lambda line: print(f"  {line}", flush=True))
    took = time.monotonic() - t0
    size = sum(p.stat().st_size for p in toolchain.rglob("*") if p.is_file() and not p.is_symlink())
    debs = sum(p.stat().st_size for p in (cache / "debs").rglob("*.deb"))
    return {"cold_s": round(took, 2), "size_mb": round(size / 1e6, 1), "debs_mb": round(debs / 1e6, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pythons", default="3.10,3.11,3.12")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    pythons = [p.strip() for p in args.pythons.split(",") if p.strip()]
    runs: dict[str, list[dict[str, Any]]] = {"plain": [], "portable": []}
    with tempfile.TemporaryDirectory(prefix="nightly-bench-toolchain-") as t:
        scratch = Path(t)
        print("assembling the toolchain cold (empty cache):", flush=True)
        cold = cold_toolchain(scratch)
        # Warm: the nights use nightly's own cache, assembled once before timing.
        night(scratch, "warmup", pythons[:1], True, "2026_02_01")
        day = 2
        for i in range(args.repeat):
            for kind in ("plain", "portable"):
                print(f"night {i + 1}/{args.repeat}: {kind}", flush=True)
                runs[kind].append(night(scratch, f"{kind}{i}", pythons, kind == "portable",
                                        f"2026_02_{day:02d}"))
                day += 1
        shutil.rmtree(scratch, ignore_errors=True)
    plain = min(r["wall_s"] for r in runs["plain"])
    portable = min(r["wall_s"] for r in runs["portable"])
    result = {
        "machine": machine_info(),
        "pythons": pythons,
        "builds_per_night": 2 * len(pythons),
        "plain": runs["plain"],
        "portable": runs["portable"],
        "plain_wall_s": plain,
        "portable_wall_s": portable,
        "ratio_portable_to_plain": round(portable / plain, 3),
        "toolchain": cold,
    }
    rows = [
        ["demo manywheels, wall (s)", plain, portable, result["ratio_portable_to_plain"]],
        ["sum of the builds (s)", runs["plain"][0]["builds_s"], runs["portable"][0]["builds_s"],
         round(runs["portable"][0]["builds_s"] / runs["plain"][0]["builds_s"], 3)],
    ]
    print(format_table(["measure", "plain gcc", "portable (sysroot)", "portable / plain"], rows))
    print(f"toolchain cold: {cold['cold_s']} s ({cold['debs_mb']} MB of .debs), "
          f"{cold['size_mb']} MB on disk")
    for kind in ("plain", "portable"):
        print(f"{kind} glibc needed per build: {runs[kind][0]['glibc']}")
    write_results("toolchain", result)


if __name__ == "__main__":
    main()
