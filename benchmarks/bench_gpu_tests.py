"""GPU hosts building vs only testing: a night of 1,000 builds on 20 CPU + 2 GPU Dask workers.

Two ways to get CUDA builds tested on a GPU, each run on a real Dask scheduler with in-process
workers (as benchmarks/bench_cluster.py runs builds), the tasks sleeping their scaled time and
submitted through nightly's own dispatch code (`nightly.cluster.dispatch`: `Dispatcher`,
`build_resources`, `lpt_priorities`, `task_key`, `gpu_test_resources`, `TEST_PRIORITY`):

- the test stage (`[cluster] gpu_smoke` now): builds need a build slot of their platform
  (`build_resources`), which only the 20 CPU workers declare; when a CUDA build's result comes
  in, its GPU test is submitted as a task of its own (`gpu_test_resources`: one `gpu`, priority
  `TEST_PRIORITY`, as nightly.cluster.gpustage submits it, for the builds whose test has a GPU
  part: `needs_gpu_part`); the 2 GPU workers declare `gpu=1,platform-linux=1` and no slots;
- the old `gpu_smoke` (before the test stage; nightly no longer does this, only this
  benchmark reproduces it): every CUDA build also needs the `gpu` capability, so the whole
  build, then its test (in the same task), runs on one of the 2 GPU workers, which declare
  build slots too (they must, to take builds) and also take CPU builds.

The night: 1,000 Linux manywheels (40 Pythons x cpu + 24 CUDA versions), the project's
estimates (`Config.estimate_for`: CPU 15 min, CUDA 70 min), longest first; a CUDA build's
GPU test takes a tenth of its build time. Time is scaled so that a task on a GPU worker (the
night's bottleneck: a 7-minute test, or an old 77-minute build and test) lasts `--gpu-task-ms`
of wall time (default 1000; about 8 minutes a night): the harness's own cost per task (a
result's round trip through the in-process scheduler, a sleep's overrun: 20-30 ms on a
loaded machine) must stay small beside it; at 250 ms (2 minutes a night) it adds about 8% to
both nights' makespans. Each night has its own scale (the old one, 616 hours of GPU work,
would take over an hour at the test stage's); every figure is scaled back to hours of build
time, so the two compare.

Reported for both: GPU-host hours (the busy time of the GPU workers, building and testing,
measured and scaled back), the measured makespan, its lower bound and makespan / bound; the
ratio of GPU-host seconds old / test stage (goal >= 5) and the test stage's makespan / bound
(goal <= 1.05). Lower bounds: test stage, max(longest build + its test, build work / CPU
slots, shortest CUDA build + test work / GPUs); old, max(longest build and test, GPU-bound
work / GPU workers, all work / all workers). Each is given twice: from the estimates, and
from the tasks' measured durations (so a sleep's overrun on a busy machine, which no
schedule can avoid, is not counted against the schedule).

    .venv/bin/python benchmarks/bench_gpu_tests.py [--gpu-task-ms 1000] [--pythons 40]
                                                   [--only stage|old]

--pythons N: a night of N Pythons (25 builds each) instead of 40. The night's work shrinks in
proportion (CPU build work, GPU test work, the old GPU-bound work), and it still sets both
bounds (at 10 Pythons: 15 h and 154 h against a longest build and test of 77 min), so the
makespan / bound ratios and the GPU-host seconds ratio measure the same thing; run_all.py
--quick runs 10 Pythons (250 builds, 240 GPU tests) at 400 ms a GPU task: about a minute a
night, with the harness's cost per task (20-30 ms) a twentieth of a task, where 1,000 builds
in the same time would need 100 ms tasks (a quarter).

Writes benchmarks/results/gpu_tests.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

from common import print_table, write_results  # noqa: E402

from nightly import config as cfg  # noqa: E402
from nightly.builds.test.smoke import needs_gpu_part  # noqa: E402
from nightly.cluster.dispatch import (  # noqa: E402
    BUILD,
    TEST,
    TEST_PRIORITY,
    Dispatcher,
    TaskItem,
    build_resources,
    gpu_test_resources,
    lpt_priorities,
    task_key,
)
from nightly.cluster.host import GPU  # noqa: E402
from nightly.core.matrix import Build  # noqa: E402

CPU_WORKERS, GPU_WORKERS = 20, 2
TEST_SHARE = 0.1  # a CUDA build's GPU test: a tenth of its build time
PYTHONS = [f"3.{i}" for i in range(5, 45)]  # 40 spellings (the simulation needs no interpreter)
CUDAS = ["cpu", *(f"cu{100 + i}" for i in range(24))]
STAGE, OLD = "stage", "old"


def night_config(smoke: bool = False, pythons: int = len(PYTHONS)) -> cfg.Config:
    """25 builds a Python: 1,000 for all 40 (`smoke`: 4, one Python, cpu and 3 CUDA versions)."""
    data: dict[str, Any] = {
        "root": "/nonexistent-root",
        "project": {"name": "demo", "source": ".", "base_version": "1.0.0"},
        "matrix": {"linux": {"manywheel": {"pythons": PYTHONS[:1] if smoke else PYTHONS[:pythons],
                                          "cudas": CUDAS[:4] if smoke else CUDAS}}},
        "machines": [{"name": "m", "platform": "linux", "queues": 1}],
        "smoke": {"gpu_check": "import torch; torch.zeros(1).cuda()"},
        "cluster": {"gpu_smoke": True},
    }
    return cfg.parse(data, path=REPO / "bench-gpu-tests.toml")


@dataclasses.dataclass(frozen=True)
class SleepSpec:
    build_id: str
    seconds: float


def simulated_task(spec: SleepSpec) -> dict[str, Any]:
    """A build or a GPU test: sleep the scaled time; say where and when."""
    from distributed import get_worker

    started = time.time()
    time.sleep(spec.seconds)
    return {"build": spec.build_id, "worker": get_worker().address, "started": started,
            "ended": time.time()}


def start_cluster(mode: str) -> Any:
    """20 CPU workers in this process (threads, as bench_cluster.py runs them) and the 2 GPU
    workers each in a process of its own: the night's bottleneck, whose every task would
    otherwise wait its turn on the one event loop the in-process workers share."""
    from distributed import Nanny, Scheduler, SpecCluster, Worker

    workers: dict[str, Any] = {}
    for i in range(CPU_WORKERS):
        workers[f"cpu-{i:02d}"] = {"cls": Worker, "options": {
            "nthreads": 1, "resources": {"slots": 1, "platform-linux": 1}}}
    # The test stage: a GPU worker only tests. The old way: it must declare a build slot.
    gpu_res = {GPU: 1, "platform-linux": 1} if mode == STAGE else \
        {"slots": 1, GPU: 1, "platform-linux": 1}
    for i in range(GPU_WORKERS):
        workers[f"gpu-{i}"] = {"cls": Nanny, "options": {"nthreads": 1, "resources": gpu_res,
                                                          "silence_logs": 40}}
    return SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": {  # type: ignore[no-untyped-call]
        "dashboard_address": ":0", "host": "127.0.0.1"}}, silence_logs=40)


def has_gpu_test(config: cfg.Config, b: Build) -> bool:
    """As GpuStage.wants: a CUDA build whose packages include a wheel, with a GPU check."""
    return needs_gpu_part(config, b, [f"{b.id}.whl"] if b.package == "manywheel" else [])


def run_night(client: Any, mode: str, config: cfg.Config, est: dict[str, float],
              scale: float) -> dict[str, Any]:
    builds = sorted(config.builds, key=lambda b: (-est[b.id], b.id))
    by_id = {b.id: b for b in builds}
    run_id = f"{random.getrandbits(32):08x}"
    prio = lpt_priorities(builds, est)
    items = []
    for b in builds:
        res, seconds = build_resources(config, b), est[b.id]
        if mode == OLD and b.is_cuda:  # the old rule: the build and its test on a GPU worker
            res = {**res, GPU: 0.0}
            seconds += est[b.id] * TEST_SHARE if has_gpu_test(config, b) else 0.0
        items.append(TaskItem(build_id=b.id, key=task_key(b, "2019_01_31", run_id),
                              spec=SleepSpec(b.id, seconds * scale), resources=res,
                              priority=prio[b.id]))
    dispatcher = Dispatcher(client, topic=f"bench-gpu-{run_id}", retries=0)
    results: dict[str, dict[str, Any]] = {}
    errors: list[str] = []

    def on_result(item: TaskItem, r: Any) -> None:
        results[item.id] = {**r, "kind": item.kind}
        b = by_id[item.build_id]
        if mode == STAGE and item.kind == BUILD and has_gpu_test(config, b):
            # As nightly.cluster.gpustage.GpuStage.start submits a build's GPU test.
            dispatcher.submit(simulated_task, [TaskItem(
                build_id=b.id, key=task_key(b, "2019_01_31", run_id, what=TEST),
                spec=SleepSpec(b.id, est[b.id] * TEST_SHARE * scale),
                resources=gpu_test_resources(b), priority=TEST_PRIORITY, kind=TEST)])

    t0 = time.time()
    dispatcher.submit(simulated_task, items)
    dispatcher.run(on_result=on_result, on_error=lambda it, e: errors.append(f"{it.id}: {e}"))
    if errors:
        raise SystemExit(f"{len(errors)} tasks failed: {errors[:3]}")
    workers = dispatcher.workers()
    gpu_hosts = {a for a, w in workers.items() if GPU in (w.get("resources") or {})}
    on_gpu = [r for r in results.values() if r["worker"] in gpu_hosts]
    took = {f"{r['kind']}:{r['build']}": (r["ended"] - r["started"]) / scale
            for r in results.values()}
    return {
        "took": took,
        "makespan_s": max(r["ended"] for r in results.values()) - t0,
        "gpu_building_s": sum(r["ended"] - r["started"] for r in on_gpu if r["kind"] == BUILD),
        "gpu_testing_s": sum(r["ended"] - r["started"] for r in on_gpu if r["kind"] == TEST),
        "builds_on_gpu_workers": sum(1 for r in on_gpu if r["kind"] == BUILD),
        "tests_off_gpu_workers": sum(1 for r in results.values()
                                     if r["kind"] == TEST and r["worker"] not in gpu_hosts),
        "tests": sum(1 for r in results.values() if r["kind"] == TEST),
        "builds": sum(1 for r in results.values() if r["kind"] == BUILD),
    }


def lower_bound(mode: str, builds: list[Build], build_s: dict[str, float],
                test_s: dict[str, float]) -> float:
    """The night's lower bound for these build and GPU-test durations (seconds; in the old
    mode a CUDA build's task holds its test)."""
    if mode == OLD:
        gpu_work = sum(build_s[b.id] for b in builds if b.is_cuda)
        return max(max(build_s.values()), gpu_work / GPU_WORKERS,
                   sum(build_s.values()) / (CPU_WORKERS + GPU_WORKERS))
    tested = [b for b in builds if b.id in test_s]
    return max(max(build_s[b.id] + test_s.get(b.id, 0.0) for b in builds),
               sum(build_s.values()) / CPU_WORKERS,
               min(build_s[b.id] for b in tested) + sum(test_s.values()) / GPU_WORKERS)


def nominal(mode: str, config: cfg.Config, est: dict[str, float]
            ) -> tuple[dict[str, float], dict[str, float]]:
    """(build task seconds, GPU test task seconds) from the estimates."""
    test = {b.id: est[b.id] * TEST_SHARE for b in config.builds if has_gpu_test(config, b)}
    if mode == OLD:
        return {b.id: est[b.id] + (test.get(b.id, 0.0) if b.is_cuda else 0.0)
                for b in config.builds}, {}
    return dict(est), test


def measure(mode: str, config: cfg.Config, est: dict[str, float], gpu_task_ms: float
            ) -> dict[str, Any]:
    from distributed import Client

    builds = list(config.builds)
    build_s, test_s = nominal(mode, config, est)
    gpu_task_s = max(build_s.values()) if mode == OLD else min(test_s.values())
    scale = gpu_task_ms / 1000 / gpu_task_s  # wall seconds per second of build time
    cluster = start_cluster(mode)
    client = Client(cluster, set_as_default=False)  # type: ignore[no-untyped-call]
    try:
        r = run_night(client, mode, config, est, scale)
    finally:
        client.close()  # type: ignore[no-untyped-call]
        cluster.close()
    h = 1 / scale / 3600  # wall seconds -> hours of build time
    took = r["took"]
    bound_h = lower_bound(mode, builds, build_s, test_s) / 3600
    measured_bound_h = lower_bound(
        mode, builds, {b.id: took[f"{BUILD}:{b.id}"] for b in builds},
        {bid: took[f"{TEST}:{bid}"] for bid in test_s}) / 3600
    makespan_h = r["makespan_s"] * h
    return {
        "scenario": ("test stage (builds on CPU workers, GPU tests on GPU workers)" if mode == STAGE
                     else "old gpu_smoke (CUDA builds built and tested on GPU workers)"),
        "mode": mode, "builds": r["builds"], "gpu_tests": r["tests"],
        "ms_per_hour": round(scale * 3600 * 1000, 1),
        "gpu_host_building_h": round(r["gpu_building_s"] * h, 2),
        "gpu_host_testing_h": round(r["gpu_testing_s"] * h, 2),
        "gpu_host_s": round((r["gpu_building_s"] + r["gpu_testing_s"]) * h * 3600),
        "makespan_h": round(makespan_h, 3), "lower_bound_h": round(bound_h, 3),
        "makespan_over_bound": round(makespan_h / bound_h, 4),
        "measured_lower_bound_h": round(measured_bound_h, 3),
        "makespan_over_measured_bound": round(makespan_h / measured_bound_h, 4),
        "builds_on_gpu_workers": r["builds_on_gpu_workers"],
        "tests_off_gpu_workers": r["tests_off_gpu_workers"], "wall_s": round(r["makespan_s"], 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu-task-ms", type=float, default=1000.0,
                    help="wall milliseconds of a task on a GPU worker (default 1000)")
    ap.add_argument("--only", choices=(STAGE, OLD), help="run one of the two nights")
    ap.add_argument("--pythons", type=int, default=len(PYTHONS), metavar="N",
                    help="Python versions, 25 builds each (default 40: 1,000 builds)")
    ap.add_argument("--smoke", action="store_true",
                    help="4 builds instead of 1,000: does it still run (no figure to read)")
    args = ap.parse_args()
    if not 1 <= args.pythons <= len(PYTHONS):
        ap.error(f"--pythons {args.pythons}: give 1 to {len(PYTHONS)}")
    config = night_config(args.smoke, args.pythons)
    assert len(config.builds) == 25 * args.pythons or args.smoke, len(config.builds)
    est = {b.id: config.estimate_for(b) for b in config.builds}
    runs = [measure(mode, config, est, args.gpu_task_ms) for mode in (OLD, STAGE)
            if args.only in (None, mode)]
    print_table(
        ["scenario", "GPU build h", "GPU test h", "builds on GPU", "makespan h", "bound h",
         "ratio", "measured bound h", "ratio", "ms/h", "wall s"],
        [[r["scenario"], r["gpu_host_building_h"], r["gpu_host_testing_h"],
          r["builds_on_gpu_workers"], r["makespan_h"], r["lower_bound_h"],
          r["makespan_over_bound"], r["measured_lower_bound_h"],
          r["makespan_over_measured_bound"], r["ms_per_hour"], r["wall_s"]] for r in runs],
        title=f"{len(config.builds):,} builds, {CPU_WORKERS} CPU + {GPU_WORKERS} GPU workers, GPU tests "
              f"a tenth of build time (a GPU worker's task: {args.gpu_task_ms:g} ms)")
    out: dict[str, Any] = {"gpu_task_ms": args.gpu_task_ms, "pythons": args.pythons, "runs": runs}
    if len(runs) == 2:
        ratio = runs[0]["gpu_host_s"] / runs[1]["gpu_host_s"]
        out["gpu_host_s_today_over_test_stage"] = round(ratio, 2)
        print(f"GPU-host seconds, old gpu_smoke / test stage: {ratio:.1f}x (goal >= 5)")
    print(f"wrote {write_results('gpu_tests', out)}")


if __name__ == "__main__":
    main()
