"""The compiler cache across nights (issue 41, point 7): the demo built on two dates from
identical sources, through `nightly run`, on the host and in containers.

    .venv/bin/python benchmarks/bench_cache_nights.py [--executor local] [--executor container
        --image nightly-builder:bookworm]   (container: DOCKER_HOST set)
        [--sdist PATH ...]   real projects as `nightly init` sets them up, instead of the demo

A project's sdist (`--sdist`, repeatable) is set up by `nightly init` as a user would, built
for the first of `--pythons` only, with init's manylinux policy left out (the cache does not
depend on it, and pycairo's repair needs a cairo this machine's sysroot lacks); its builds
count when night 1 compiled, whether or not the wheel met anything after. Build systems
compile their own configure probes (CMake's compiler checks, meson's `compiler.has_argument`)
in folders of a random name each run; those can never hit, and count as misses here.

Each executor gets its own scratch root and cache folder: night 1 fills the cache, night 2
(the next date, the same sources) is measured: its hit rate (hits / (hits + misses) over
every build, from state.json as the report shows it) and its wall time against night 1's
(warm / cold, the same run's baseline). Builds the image cannot run (an interpreter it lacks)
are left out of both nights' figures. Results: benchmarks/results/cache_nights.json.
"""

from __future__ import annotations

import argparse
import json
import os
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

from common import format_table, machine_info, write_results  # noqa: E402

CUDA_HOME = Path("/usr/local/cuda-13.0")


def config(folder: Path, executor: str, image: str, pythons: list[str]) -> Path:
    cuda = '"13.0"' if (CUDA_HOME / "bin" / "nvcc").exists() else ""
    where = (
        f'[images]\ndefault = "{image}"\n\n[executor.container]\n'
        f'base_url = "{os.environ.get("DOCKER_HOST", "")}"\n'
        + (f'cuda_mounts = {{ "cu130" = "{CUDA_HOME}" }}\n' if cuda else "")
        if executor == "container"
        else ('[executor.local]\nuser = "root"\n' if os.geteuid() == 0 else "")
        + (f'[executor.local.cuda]\n"cu130" = "{CUDA_HOME}"\n' if cuda else "")
    )
    policy = 'manylinux = "2_28"' if executor == "local" else ""
    path = folder / "nightly.toml"
    path.write_text(f"""
root = "nightlies"
recipes = "{REPO / "recipes"}"

[project]
name = "nightlydemo"
source = "demo"
base_version = "0.1.0"

[matrix.linux.manywheel]
pythons = {json.dumps(pythons)}
cudas = ["cpu"{", " + cuda if cuda else ""}]
{policy}

[matrix.linux.libtorch]
variants = ["shared-with-deps", "static-without-deps"]
python = "{pythons[0]}"
cudas = ["cpu"]

[[machines]]
name = "bench"
platform = "linux"
queues = 1
executor = "{executor}"

{where}
[smoke]
import_name = "nightlydemo"
libtorch_program = "smoke/main.cpp"
libtorch_libs = ["demo"]

[cache]
dir = "{folder / "sccache"}"
""")
    return path


def project_config(folder: Path, sdist: Path, executor: str, image: str, python: str) -> Path:
    """`nightly init`'s configuration for `sdist`, for one Python, without its policy."""
    nightly = Path(sys.executable).parent / "nightly"
    shutil.copy(sdist, folder / sdist.name)
    subprocess.run([str(nightly), "init", sdist.name], cwd=folder, check=True, capture_output=True, text=True)
    path = folder / "nightly.toml"
    lines = []
    for line in path.read_text().splitlines():
        if line.startswith("root = "):
            line += f'\nrecipes = "{REPO / "recipes"}"'
        elif line.startswith("pythons = "):
            line = f'pythons = ["{python}"]'
        elif line.startswith(("manylinux = ", "toolchain = ")):
            continue
        elif line.startswith("executor = "):
            line = f'executor = "{executor}"'
        elif line.startswith("default = ") and executor == "container":
            line = f'default = "{image}"'
        lines.append(line)
    lines += ["", "[cache]", f'dir = "{folder / "sccache"}"']
    if executor == "container":
        lines += ["", "[executor.container]", f'base_url = "{os.environ.get("DOCKER_HOST", "")}"']
    elif os.geteuid() == 0:
        lines += ["", "[executor.local]", 'user = "root"']
    path.write_text("\n".join(lines) + "\n")
    return path


def night(cfg: Path, date: str) -> dict[str, Any]:
    nightly = Path(sys.executable).parent / "nightly"
    started = time.monotonic()
    subprocess.run(
        [str(nightly), "run", "--config", str(cfg), "--date", date, "--no-upload"],
        cwd=cfg.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    took = time.monotonic() - started
    builds = json.loads((cfg.parent / "nightlies" / date / "state.json").read_text())["builds"]
    return {
        "wall_s": round(took, 1),
        "builds": {
            b: {"status": e["status"], "cache": e.get("cache"), "reason": (e.get("reason") or "")[:300]}
            for b, e in sorted(builds.items())
        },
    }


def figures(first: dict[str, Any], second: dict[str, Any], compiled: bool) -> dict[str, Any]:
    """Night 2's hits over the builds night 1 got through (`compiled`: those that compiled)."""
    ok = [
        b
        for b, e in first["builds"].items()
        if (compiled and (e["cache"] or {}).get("requests")) or e["status"] == "succeeded"
    ]
    hits = sum((second["builds"][b]["cache"] or {}).get("hits", 0) for b in ok)
    misses = sum((second["builds"][b]["cache"] or {}).get("misses", 0) for b in ok)
    return {
        "builds": ok,
        "hits": hits,
        "misses": misses,
        "hit_rate": round(hits / (hits + misses), 4) if hits + misses else None,
        "night1_s": first["wall_s"],
        "night2_s": second["wall_s"],
        "warm_over_cold": round(second["wall_s"] / first["wall_s"], 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--executor", action="append", choices=["local", "container"])
    ap.add_argument("--image", default="nightly-builder:bookworm", help="container builds' image")
    ap.add_argument("--pythons", default="3.11,3.12")
    ap.add_argument(
        "--sdist",
        action="append",
        type=Path,
        default=[],
        help="a project's sdist, set up by nightly init (instead of the demo)",
    )
    args = ap.parse_args()
    results: dict[str, Any] = {"machine": machine_info()}
    rows = []
    projects: list[Path | None] = list(args.sdist) or [None]
    for executor in args.executor or ["local"]:
        for sdist in projects:
            name = sdist.name.split("-")[0] if sdist else "demo"
            got = measure(executor, sdist, args)
            results[f"{executor}:{name}"] = got
            rows.append(
                [
                    executor,
                    name,
                    len(got["builds"]),
                    f"{got['hits']} of {got['hits'] + got['misses']}",
                    got["hit_rate"],
                    got["night1_s"],
                    got["night2_s"],
                    got["warm_over_cold"],
                ]
            )
    print(
        format_table(
            [
                "executor",
                "project",
                "builds",
                "night-2 hits",
                "hit rate",
                "night 1 s",
                "night 2 s",
                "warm/cold",
            ],
            rows,
        )
    )
    print(f"results: {write_results('cache_nights', results)}")
    return 0


def measure(executor: str, sdist: Path | None, args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix=f"nightly-bench-nights-{executor}-"))
    try:
        pythons = args.pythons.split(",")
        if sdist is None:
            shutil.copytree(REPO / "examples" / "demo", folder / "demo")
            cfg = config(folder, executor, args.image, pythons)
        else:
            cfg = project_config(folder, sdist.resolve(), executor, args.image, pythons[0])
        first, second = night(cfg, "2030_01_01"), night(cfg, "2030_01_02")
        return {**figures(first, second, compiled=sdist is not None), "nights": [first, second]}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
