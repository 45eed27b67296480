"""The portable toolchains' cost (issue 26): manywheels built with `manylinux = "2_28"` through
the glibc 2.31 sysroot toolchain (the default) and through zig (`toolchain = "zig"`), against
the same builds with the host's plain gcc (no policy), through `nightly build` with the
local executor.

    .venv/bin/python benchmarks/bench_toolchain.py [--pythons 3.10,3.11,3.12] [--repeat 1]
                                                   [--corpus markupsafe,mapbox-earcut] [--smoke]

Measured in one run, the nights of each project interleaved (plain, sysroot, zig), the
compiler cache off, one queue (the builds do not compete: the time is their sum):
  1. the README demo's manywheels (each Python x cpu, CUDA 13.0; zig builds only the cpu
     ones: CUDA builds always use the sysroot);
  2. two corpus projects from their PyPI sdists: markupsafe (C, setuptools) and
     mapbox-earcut (C++, pybind11 + scikit-build-core / CMake);
  3. each toolchain assembled cold into an empty cache: seconds and size on disk.
Ratios are portable / plain of the same builds; every tag reached is recorded. Each
toolchain is warmed first (zig builds its glibc stubs, compiler-rt and libc++ once per cache).

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

from common import format_table, machine_info, write_results  # noqa: E402

KINDS = ("plain", "sysroot", "zig")
Maker = Callable[[Path, str], str]  # (root, toolchain kind) -> config text
POLICY = {"plain": "", "sysroot": 'manylinux = "2_28"\n',
          "zig": 'manylinux = "2_28"\ntoolchain = "zig"\n'}


def demo_config(root: Path, pythons: list[str], kind: str) -> str:
    text = (REPO / "nightly.toml").read_text()
    policy = re.search(r'^manylinux = "2_28"\n', text, re.M)
    assert policy, "nightly.toml declares no manylinux policy"
    # The manywheels' policy only (the first); libtorch's stays as it is: it has no toolchain key.
    text = text.replace(policy.group(0), POLICY[kind], 1)
    text = text.replace('root = "nightlies"', f'root = "{root}"')
    text = text.replace('source = "examples/demo"', f'source = "{REPO / "examples" / "demo"}"')
    text = text.replace('pythons = ["3.10", "3.11", "3.12"]', f"pythons = {json.dumps(pythons)}")
    return text.replace("queues = 2", "queues = 1")


def corpus_config(key: str, root: Path, pythons: list[str], kind: str) -> str:
    text = (REPO / "configs" / "corpus" / f"{key}.toml").read_text()
    text = text.replace('root = "nightlies"', f'root = "{root}"')
    old = 'pythons = ["3.10", "3.11", "3.12", "3.13"]\ncudas = ["cpu"]\n'
    assert old in text, key
    text = text.replace(old, f"pythons = {json.dumps(pythons)}\ncudas = [\"cpu\"]\n{POLICY[kind]}")
    return text.replace("queues = 2", "queues = 1")


def night(scratch: Path, name: str, make: Maker, kind: str, args: list[str],
          date: str) -> dict[str, Any]:
    """One `nightly build` of the selection in its own folder: wall time, the builds' own
    durations, the tags and glibc each reached."""
    folder = scratch / name
    folder.mkdir()
    text = make(folder / "nightlies", kind)
    config = folder / "nightly.toml"
    # The compiler cache would hide the compile cost being measured.
    config.write_text(f'recipes = "{REPO / "recipes"}"\n' + text + "\n[cache]\nenabled = false\n")
    nightly = Path(sys.executable).parent / "nightly"
    t0 = time.monotonic()
    proc = subprocess.run([str(nightly), "build", *args, "--config", str(config), "--no-upload",
                           "--date", date], capture_output=True, text=True, check=False)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"{name}: nightly build failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}"
                 f"\n{proc.stderr[-3000:]}")
    state = json.loads((folder / "nightlies" / date / "state.json").read_text())["builds"]
    durations = {bid: round(float(e.get("duration_s") or 0), 2) for bid, e in state.items()}
    return {
        "wall_s": round(wall, 2),
        "builds_s": round(sum(durations.values()), 2),
        "durations": durations,
        "tags": {bid: (e.get("manylinux") or {}).get("tags") for bid, e in sorted(state.items())},
        "glibc": {bid: (e.get("manylinux") or {}).get("glibc") for bid, e in sorted(state.items())},
    }


def cold_toolchains(scratch: Path) -> dict[str, Any]:
    """Each toolchain assembled into an empty cache: seconds and size on disk."""
    from nightly.images import sysroot, zig

    out: dict[str, Any] = {}
    for name, assemble in (("sysroot", sysroot.assemble), ("zig", zig.assemble)):
        cache = scratch / f"cache-{name}"
        t0 = time.monotonic()
        folder = assemble(cache, log=lambda line: print(f"  {line}", flush=True))
        took = time.monotonic() - t0
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
        out[name] = {"cold_s": round(took, 2), "size_mb": round(size / 1e6, 1)}
        shutil.rmtree(cache, ignore_errors=True)
    return out


def projects(pythons: list[str], corpus: list[str],
             cuda: bool = True) -> list[tuple[str, Maker, dict[str, list[str]]]]:
    """(project, config maker, build arguments per toolchain)."""
    demo_args = {k: ["manywheel", ",".join(pythons), "cpu" if k == "zig" or not cuda else "cpu,cu130"]
                 for k in KINDS}

    def demo(root: Path, kind: str) -> str:
        return demo_config(root, pythons, kind)

    out: list[tuple[str, Maker, dict[str, list[str]]]] = [("demo", demo, demo_args)]
    for key in corpus:
        def project(root: Path, kind: str, key: str = key) -> str:
            return corpus_config(key, root, pythons, kind)

        out.append((key, project, {k: ["manywheel", ",".join(pythons), "cpu"] for k in KINDS}))
    return out


def ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pythons", default="3.10,3.11,3.12")
    ap.add_argument("--corpus", default="markupsafe,mapbox-earcut",
                    help="corpus projects (configs/corpus/KEY.toml); empty: the demo only")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--smoke", action="store_true",
                    help="does it still run: no cold assembly, no warm-up, the cpu builds only")
    args = ap.parse_args()
    pythons = [p.strip() for p in args.pythons.split(",") if p.strip()]
    keys = [k.strip() for k in args.corpus.split(",") if k.strip()]
    from tests.integration import corpus

    for key in keys:
        corpus.unpack(corpus.BY_KEY[key])
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory(prefix="nightly-bench-toolchain-") as t:
        scratch = Path(t)
        cold: dict[str, Any] = {}
        if not args.smoke:
            print("assembling the toolchains cold (empty caches):", flush=True)
            cold = cold_toolchains(scratch)
        day = 1
        for name, make, build_args in projects(pythons, keys, cuda=not args.smoke):
            runs[name] = {k: [] for k in KINDS}
            # Warm: nightly's own cache of each toolchain, and zig's builds of libc++ etc.
            for kind in () if args.smoke else ("sysroot", "zig"):
                warm = [*build_args[kind][:1], pythons[0], *build_args[kind][2:]]
                night(scratch, f"{name}-warm-{kind}", make, kind, warm, f"2026_02_{day:02d}")
                day += 1
            for i in range(args.repeat):
                for kind in KINDS:
                    print(f"{name} {i + 1}/{args.repeat}: {kind}", flush=True)
                    runs[name][kind].append(night(scratch, f"{name}-{kind}-{i}", make, kind,
                                                  build_args[kind], f"2026_02_{day:02d}"))
                    day += 1
        shutil.rmtree(scratch, ignore_errors=True)
    summary = summarize(runs)
    result = {"machine": machine_info(), "pythons": pythons, "corpus": keys, "runs": runs,
              "projects": summary, "toolchains": cold,
              # The README demo's figures under the names run_all.py reads.
              "plain_wall_s": summary["demo"]["plain_wall_s"],
              "portable_wall_s": summary["demo"]["sysroot_wall_s"],
              "ratio_portable_to_plain": summary["demo"]["sysroot_over_plain"],
              "builds_per_night": (1 if args.smoke else 2) * len(pythons),
              "toolchain": cold.get("sysroot")}
    rows = []
    for name, s in summary.items():
        rows.append([name, s["plain_builds_s"], s["sysroot_builds_s"], s["sysroot_over_plain"],
                     s["zig_builds_s"], s["zig_over_plain_cpu"]])
    print(format_table(["project (sum of builds, s)", "plain gcc", "sysroot", "sysroot / plain",
                        "zig (cpu)", "zig / plain (cpu)"], rows))
    for name, c in cold.items():
        print(f"{name} toolchain cold: {c['cold_s']} s, {c['size_mb']} MB on disk")
    for name in summary:
        for kind in KINDS:
            print(f"{name} {kind}: glibc needed per build {runs[name][kind][0]['glibc']}")
    write_results("toolchain", result)


def summarize(runs: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, dict[str, Any]]:
    """Per project: the best wall time and the builds' sum per toolchain, and the ratios.
    zig builds only the cpu builds; its ratio is against plain's cpu builds."""
    out: dict[str, dict[str, Any]] = {}
    for name, kinds in runs.items():
        s: dict[str, Any] = {}
        for kind, rs in kinds.items():
            s[f"{kind}_wall_s"] = min(r["wall_s"] for r in rs)
            s[f"{kind}_builds_s"] = min(r["builds_s"] for r in rs)
        s["sysroot_over_plain"] = ratio(s["sysroot_builds_s"], s["plain_builds_s"])
        s["sysroot_over_plain_wall"] = ratio(s["sysroot_wall_s"], s["plain_wall_s"])
        plain_cpu = min(sum(float(t) for b, t in _durations(r).items() if b.endswith("_cpu"))
                        for r in kinds["plain"])
        s["zig_over_plain_cpu"] = ratio(s["zig_builds_s"], plain_cpu)
        out[name] = s
    return out


def _durations(run: dict[str, Any]) -> dict[str, float]:
    return {b: float(s) for b, s in run["durations"].items()}


if __name__ == "__main__":
    main()
