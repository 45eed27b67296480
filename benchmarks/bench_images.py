"""Builder images: cold and warm build time per image, image sizes, and the demo CUDA night's
wall time against the sum of its build times (the parallel speed-up).

    .venv/bin/python benchmarks/bench_images.py [--warm-only] [--no-night] [--no-rebuild]
                                                [--config configs/demo-cuda.toml]
                                                [--quick | --smoke]

Images are those of the config's builders (configs/demo-cuda.toml: cpu, CUDA 11.8, 12.4,
13.0 on one bookworm base, and the runtime image its wheels are tested in). Per image:

- cold: the image and everything nightly cached for its own layer removed first (the base:
  the debootstrap rootfs and its .debs; cpu: the interpreter wheels; a CUDA image: its
  wheels, .deb and assembled toolkit; the runtime image: its base's debootstrap rootfs and
  image), then built; layers below it are present (they are measured on their own, in order
  base, cpu, CUDA..., runtime). `--warm-only` skips this (it takes
  minutes and downloads ~600 MB);
- rebuild: the tag removed, nightly's caches and the engine's layer cache warm;
- warm: `nightly images build` when the image is present (the content-hash tag is found).

Sizes: each image's size as the engine reports it, and the layer each adds over its parent
(what the engine stores once). The night: `nightly run --no-upload` of the whole matrix in
a fresh root; sum of the builds' durations / wall time = the speed-up of running queues in
parallel. Writes benchmarks/results/images.json.

--quick (a minute or so, whatever the machine's caches hold): one small builder of its own,
`quick`, on the engine's image (nightly-builder:bookworm, which scripts/container-engine.sh
makes; `base_image`), with the suite's Python 3.11 and nightly's tools: its cpu layer built
cold (an empty images cache of its own, so the tools and interpreter wheels are downloaded,
and no tag), rebuilt from that cache (tag removed), and found warm; its size over the base.
Its image is removed at the end (the benchmark made it); the base is never touched.
--smoke (the test suite's size: does it still run): --quick without the rebuild from the cache.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
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

from common import format_table, write_results  # noqa: E402

from nightly.config import load  # noqa: E402
from nightly.core.matrix import cuda_version  # noqa: E402
from nightly.core.spec import BuilderSpec  # noqa: E402
from nightly.images import engine, runtime  # noqa: E402
from tests.support.day import find_day  # noqa: E402

SCRIPT = REPO / "scripts" / "container-engine.sh"


def start_engine() -> str:
    proc = subprocess.run(["bash", str(SCRIPT)], stdout=subprocess.PIPE, text=True, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines or not lines[-1].startswith("DOCKER_HOST="):
        sys.exit(f"{SCRIPT} failed (exit {proc.returncode})")
    return lines[-1].split("=", 1)[1]


def log(line: str) -> None:
    print(f"  {line}", file=sys.stderr, flush=True)


def _rm(client: Any, tag: str) -> None:
    from docker.errors import NotFound  # Podman answers a plain 404, not ImageNotFound

    with contextlib.suppress(NotFound):
        client.images.remove(tag, force=True)


def _wipe_caches(cache: Path, spec: BuilderSpec, layer: str) -> None:
    """Remove what nightly cached for one layer (so its cold build downloads again)."""
    if layer == "base":
        targets = [cache / "rootfs" / f"{spec.suite}-{spec.base_hash()}", cache / "debootstrap-debs"]
    elif layer == "runtime":
        targets = [cache / "rootfs" / f"{spec.suite}-runtime-{runtime.base_hash(spec)}"]
    elif layer == "cpu":
        targets = [cache / "wheels" / f"py{p.version}" for p in spec.pythons]
        targets.append(cache / "wheels" / "tools")
    else:
        v = cuda_version(layer)
        targets = [cache / "wheels" / f"cuda-{v}", cache / "debs" / f"nvidia-cuda-toolkit-{v}"]
        targets += list((cache / "cuda").glob(f"cuda-{v}*"))
    for t in targets:
        if t.is_dir():
            subprocess.run(["rm", "-rf", "--one-file-system", str(t)], check=False)


def _ensure(client: Any, spec: BuilderSpec, layer: str, cache: Path) -> str:
    if layer == "base":
        return engine.ensure_base(client, spec, cache, log)
    if layer == "runtime":
        return runtime.ensure(client, spec, cache, log)
    return engine.ensure_cuda(client, spec, layer, cache, log)


def _tag(spec: BuilderSpec, layer: str) -> str:
    if layer == "runtime":
        return runtime.tag(spec)
    return spec.base_tag() if layer == "base" else spec.tag_for(layer)


def build_times(client: Any, spec: BuilderSpec, cache: Path, cold: bool,
                rebuild: bool = True) -> dict[str, Any]:
    # The runtime image nightly makes (not a site's runtime_image; none on a base_image).
    made = bool(runtime.tag(spec)) and not spec.runtime_image
    layers = ["base", *spec.cudas, *(["runtime"] if made else [])]
    out: dict[str, Any] = {layer: {} for layer in layers}
    if cold:
        for layer in reversed(layers):  # children first: a parent in use cannot go
            _rm(client, _tag(spec, layer))
        _rm(client, runtime.base_tag(spec))
        for layer in layers:
            print(f"cold build: {layer}", file=sys.stderr, flush=True)
            _wipe_caches(cache, spec, layer)
            t0 = time.perf_counter()
            _ensure(client, spec, layer, cache)
            out[layer]["cold_s"] = round(time.perf_counter() - t0, 1)
    else:
        for layer in layers:
            _ensure(client, spec, layer, cache)
    # Rebuild the CUDA layers from warm caches (the base is an import of the cached rootfs;
    # the cpu layer would take every CUDA image with it).
    for layer in spec.cudas if rebuild else ():
        if layer == "cpu":
            continue
        _rm(client, _tag(spec, layer))
        print(f"rebuild from caches: {layer}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        _ensure(client, spec, layer, cache)
        out[layer]["rebuild_s"] = round(time.perf_counter() - t0, 1)
    for layer in layers:
        t0 = time.perf_counter()
        _ensure(client, spec, layer, cache)
        out[layer]["warm_s"] = round(time.perf_counter() - t0, 3)
    return out


def sizes(client: Any, spec: BuilderSpec) -> dict[str, Any]:
    def size(layer: str) -> int:
        info = engine.inspect(client, _tag(spec, layer))
        return info.size if info else 0

    base, cpu = size("base"), size("cpu")
    out: dict[str, Any] = {"base": {"tag": spec.base_tag(), "image_mb": round(base / 1e6),
                                    "layer_mb": round(base / 1e6)}}
    stored = base
    for layer in spec.cudas:
        s = size(layer)
        parent = base if layer == "cpu" else cpu
        out[layer] = {"tag": spec.tag_for(layer), "image_mb": round(s / 1e6),
                      "layer_mb": round((s - parent) / 1e6)}
        stored += s - parent
    if runtime.tag(spec) and not spec.runtime_image:
        tested, tested_base = (engine.inspect(client, t) for t in (runtime.tag(spec),
                                                                    runtime.base_tag(spec)))
        mb = [round(i.size / 1e6) if i else 0 for i in (tested, tested_base)]
        out["runtime"] = {"tag": runtime.tag(spec), "image_mb": mb[0], "layer_mb": mb[0] - mb[1]}
    out["stored_once_mb"] = round(stored / 1e6)
    out["sum_of_images_mb"] = round(sum(size(c) for c in spec.cudas) / 1e6)
    return out


def night(config: Path, base_url: str) -> dict[str, Any]:
    nightly = Path(sys.executable).parent / "nightly"
    with tempfile.TemporaryDirectory(prefix="bench-images-night-") as root:
        env = {**os.environ, "DOCKER_HOST": base_url}
        t0 = time.perf_counter()
        proc = subprocess.run([str(nightly), "run", "--config", str(config), "--root", root,
                               "--no-upload"], env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        summaries = list(Path(root).glob("*/summary.json"))
        if not summaries:
            sys.exit(f"the night wrote no summary (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        data = json.loads(find_day(Path(root)).summary_path.read_text())
    builds = data["builds"]
    durations = {k: v.get("duration_s") or 0.0 for k, v in builds.items()}
    total = sum(durations.values())
    ok = sum(1 for v in builds.values() if v.get("outcome") == "succeeded")
    return {"builds": len(builds), "succeeded": ok, "exit_code": proc.returncode,
            "wall_s": round(wall, 1), "night_duration_s": data.get("duration_s"),
            "sum_of_builds_s": round(total, 1), "speedup": round(total / wall, 2),
            "durations_s": {k: round(v, 1) for k, v in sorted(durations.items())}}


QUICK_CONFIG = """
root = "nightlies"
[project]
name = "nightlydemo"
source = "{demo}"
base_version = "0.1.0"
[matrix.linux.manywheel]
pythons = ["3.11"]
cudas = ["cpu"]
[images]
default = "@quick"
[builders.quick]
repository = "nightly-bench-images-quick"
base_image = "{base}"
cudas = ["cpu"]
[builders.quick.pythons]
"3.11" = "distro"
[[machines]]
name = "local"
platform = "linux"
queues = 1
executor = "container"
"""


def quick(client: Any, steps: tuple[str, ...] = ("cold_s", "rebuild_s", "warm_s")) -> dict[str, Any]:
    """The quick builder's cpu layer: cold (empty cache, no tag) / rebuild from the cache /
    warm (`steps`: those of them to take, in this order); its sizes. Its own cache folder and
    image, both removed at the end."""
    base = os.environ.get("NIGHTLY_BUILDER_IMAGE") or "nightly-builder:bookworm"
    if engine.inspect(client, base) is None:
        sys.exit(f"the engine has no {base}: run scripts/container-engine.sh (it builds it)")
    with tempfile.TemporaryDirectory(prefix="bench-images-quick-") as tmp:
        path = Path(tmp) / "quick.toml"
        path.write_text(QUICK_CONFIG.format(demo=REPO / "examples" / "demo", base=base))
        spec = load(path).builders["quick"]
        cache = Path(tmp) / "cache"
        tag = spec.tag_for("cpu")
        times: dict[str, float] = {}
        try:
            for step in steps:
                if step != "warm_s":
                    _rm(client, tag)
                print(f"quick builder, cpu layer: {step.removesuffix('_s')}", file=sys.stderr, flush=True)
                t0 = time.perf_counter()
                engine.ensure_cpu(client, spec, cache, log)
                times[step] = round(time.perf_counter() - t0, 3 if step == "warm_s" else 1)
            sz = sizes(client, spec)
        finally:
            _rm(client, tag)
    return {"config": "quick builder on " + base, "builders": {"quick": {"times": {"cpu": times},
                                                                          "sizes": sz}}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, default=REPO / "configs" / "demo-cuda.toml")
    ap.add_argument("--warm-only", action="store_true", help="skip the cold builds")
    ap.add_argument("--no-night", action="store_true", help="skip the night of the matrix")
    ap.add_argument("--no-rebuild", action="store_true",
                    help="skip the CUDA layers' rebuilds from caches (no image is removed)")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="a small builder of its own on the engine's image: cold / rebuild / warm")
    size.add_argument("--smoke", action="store_true", help="--quick without the rebuild")
    args = ap.parse_args()
    base_url = start_engine()
    client = engine.connect(base_url)
    if args.quick or args.smoke:
        result = quick(client, ("cold_s", "warm_s") if args.smoke else ("cold_s", "rebuild_s", "warm_s"))
        t, sz = result["builders"]["quick"]["times"]["cpu"], result["builders"]["quick"]["sizes"]
        print(format_table(["image", "cold s", "rebuild s", "warm s", "image MB", "layer MB"],
                           [["quick:cpu", t["cold_s"], t.get("rebuild_s", "-"), t["warm_s"],
                             sz["cpu"]["image_mb"], sz["cpu"]["layer_mb"]]]))
        write_results("images", result)
        return
    config = load(args.config)
    cache = engine.default_cache()
    result: dict[str, Any] = {"config": str(args.config.relative_to(REPO)), "builders": {}}
    rows = []
    for name, spec in config.builders.items():
        times = build_times(client, spec, cache, cold=not args.warm_only, rebuild=not args.no_rebuild)
        sz = sizes(client, spec)
        result["builders"][name] = {"times": times, "sizes": sz}
        for layer in times:
            t, s = times[layer], sz[layer]
            rows.append([f"{name}:{layer}", t.get("cold_s", "-"), t.get("rebuild_s", "-"),
                         t["warm_s"], s["image_mb"], s["layer_mb"]])
        rows.append([f"{name}: stored once / sum of images (MB)", "", "", "",
                     sz["stored_once_mb"], sz["sum_of_images_mb"]])
    print(format_table(["image", "cold s", "rebuild s", "warm s", "image MB", "layer MB"], rows))
    if not args.no_night:
        n = night(args.config, base_url)
        result["night"] = n
        print(f"\nnight of {n['builds']} builds ({n['succeeded']} succeeded): wall "
              f"{n['wall_s']} s, sum of build times {n['sum_of_builds_s']} s, "
              f"speed-up {n['speedup']}x")
    write_results("images", result)


if __name__ == "__main__":
    main()
