"""The container executor's overhead per build, against the engine's own CLI.

A recipe that does nothing (`true`) is run N times through ContainerExecutor.run (create,
start, follow the output, wait, inspect, remove, all through the Docker API) and N times as
`podman run --rm IMAGE true` on the same engine, interleaved so both see the same machine
state; also, for reference, `docker run --rm IMAGE true` through the same API socket. Prints
a table of medians and the ratio executor / podman run, and writes the figures to
benchmarks/results/container.json.

    .venv/bin/python benchmarks/bench_container.py [--runs 10]

Starts the engine (and builds the image on first use) through scripts/container-engine.sh.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nightly.executors.base import Job  # noqa: E402
from nightly.executors.container import ContainerExecutor, ContainerSettings  # noqa: E402

SCRIPT = REPO / "scripts" / "container-engine.sh"
RESULTS = Path(os.environ.get("NIGHTLY_BENCH_RESULTS")
               or REPO / "benchmarks" / "results") / "container.json"
IMAGE = os.environ.get("NIGHTLY_BUILDER_IMAGE", "nightly-builder:bookworm")
LABEL = "nightly.benchmark"


def start_engine() -> str:
    print(f"starting the engine: {SCRIPT.relative_to(REPO)}", file=sys.stderr)
    proc = subprocess.run(["bash", str(SCRIPT)], stdout=subprocess.PIPE, text=True, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines or not lines[-1].startswith("DOCKER_HOST="):
        sys.exit(f"{SCRIPT} failed (exit {proc.returncode})")
    return lines[-1].split("=", 1)[1]


def timed(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "median_s": statistics.median(samples),
        "mean_s": statistics.fmean(samples),
        "min_s": min(samples),
        "max_s": max(samples),
        "stdev_s": statistics.stdev(samples) if len(samples) > 1 else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs of each (default 10)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="JSON results file")
    args = parser.parse_args()

    base_url = start_engine()
    engine_dir = Path(base_url.removeprefix("unix://")).parent
    cli_env = {**os.environ, "CONTAINERS_CONF": str(engine_dir / "containers.conf")}
    docker_env = {**os.environ, "DOCKER_HOST": base_url}
    have_docker_cli = shutil.which("docker") is not None

    with tempfile.TemporaryDirectory(prefix="bench-container-") as tmp:
        root = Path(tmp)
        recipe = root / "recipes" / "noop" / "build.sh"
        recipe.parent.mkdir(parents=True)
        recipe.write_text("true\n")
        for d in ("src", "out", "work"):
            (root / d).mkdir()
        job = Job(
            build_id="noop_3.11_cpu",
            package="noop",
            python="3.11",
            cuda="cpu",
            env={"PACKAGE_TYPE": "noop"},
            recipes_dir=root / "recipes",
            source_dir=root / "src",
            output_dir=root / "out",
            work_dir=root / "work",
            timeout_s=120,
            image=IMAGE,
        )
        executor = ContainerExecutor(ContainerSettings(base_url=base_url, labels={LABEL: "1"}))

        def via_executor() -> None:
            result = executor.run(job, lambda _chunk: None, threading.Event())
            if not result.ok:
                sys.exit(f"the no-op build failed: {result}")

        def via_podman() -> None:
            subprocess.run(
                ["podman", "run", "--rm", IMAGE, "true"], env=cli_env, check=True,
                stdout=subprocess.DEVNULL,
            )  # fmt: skip

        def via_docker_cli() -> None:
            subprocess.run(
                ["docker", "run", "--rm", IMAGE, "true"], env=docker_env, check=True,
                stdout=subprocess.DEVNULL,
            )  # fmt: skip

        contenders: dict[str, Callable[[], None]] = {
            "executor": via_executor,
            "podman_run": via_podman,
        }
        if have_docker_cli:
            contenders["docker_cli_run"] = via_docker_cli

        with executor:
            for fn in contenders.values():  # warm-up: client connection, page cache
                fn()
            samples: dict[str, list[float]] = {name: [] for name in contenders}
            for i in range(args.runs):
                # Interleaved, and the order rotated per round, so drift hits all alike.
                names = list(contenders)
                names = names[i % len(names) :] + names[: i % len(names)]
                for name in names:
                    samples[name].append(timed(contenders[name]))
                print(f"round {i + 1}/{args.runs} done", file=sys.stderr)

    stats = {name: summary(s) for name, s in samples.items()}
    ratio = stats["executor"]["median_s"] / stats["podman_run"]["median_s"]
    labels = {
        "executor": "ContainerExecutor.run (API: create/start/logs/wait/remove)",
        "podman_run": f"podman run --rm {IMAGE} true",
        "docker_cli_run": f"docker run --rm {IMAGE} true (same API socket)",
    }
    print()
    print(f"{'':60} {'median':>8} {'min':>8} {'max':>8}")
    for name, st in stats.items():
        print(f"{labels[name]:60} {st['median_s']:8.3f} {st['min_s']:8.3f} {st['max_s']:8.3f}")
    print(f"\nratio executor / podman run (medians): {ratio:.2f}  ({args.runs} runs each)")

    podman_version = subprocess.run(
        ["podman", "version", "--format", "{{.Client.Version}}"],
        env=cli_env, capture_output=True, text=True, check=False,
    ).stdout.strip()  # fmt: skip
    report = {
        "benchmark": "container executor overhead per no-op build",
        "runs": args.runs,
        "image": IMAGE,
        "engine": {"base_url": base_url, "podman": podman_version},
        "machine": {
            "kernel": platform.release(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "results": {
            name: {"what": labels[name], **st, "samples_s": samples[name]} for name, st in stats.items()
        },
        "ratio_executor_to_podman_run": ratio,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
