"""GPU hosts building vs only testing: a simulated night of 1,000 builds, 20 CPU + 2 GPU workers.

Two ways to get CUDA builds tested on a GPU:

- today's `[cluster] gpu_smoke` (before the test stage): every CUDA build needs the `gpu`
  resource (`nightly.cluster.dispatch.build_resources` with gpu_smoke on), so the whole build,
  then its test, runs on one of the 2 GPU workers; the GPU workers also declare build slots
  (they must, to take builds) and take CPU builds when no CUDA build is waiting;
- the test stage: builds need a build slot (`build_resources` with gpu_smoke off), which only
  the 20 CPU workers declare; each CUDA build's GPU part is a task of its own, submitted when
  the build ends, needing the `gpu` resource; the GPU workers declare no build slots.

The night (1,000 Linux builds: manywheel and conda, 20 Pythons x cpu + 24 CUDA versions) is
planned with the project's estimates (`Config.estimate_for`: CPU 15 min, CUDA 70 min) and
longest-first priorities (`lpt_priorities`); a CUDA build's GPU test takes a tenth of its
build time. The schedule is simulated event by event as Dask runs it: a worker that frees
takes the highest-priority task it can run that is ready (a test is ready once its build
ended). No sleeping: the figures are exact for the model, in hours of simulated time.

Reported for both: GPU-host busy seconds (building, testing), the makespan, its lower bound
(per resource: max(longest chain, work / workers)) and makespan / bound; the ratio of GPU-host
seconds today / with the test stage (goal: >= 5) and makespan / bound (goal: <= 1.05).

    .venv/bin/python benchmarks/bench_gpu_tests.py

Writes benchmarks/results/gpu_tests.json.
"""

from __future__ import annotations

import dataclasses
import heapq
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

from common import print_table, write_results  # noqa: E402

from nightly import config as cfg  # noqa: E402
from nightly.cluster.dispatch import build_resources, lpt_priorities  # noqa: E402
from nightly.cluster.worker import GPU, SLOTS  # noqa: E402
from nightly.plan.matrix import Build  # noqa: E402

CPU_WORKERS, GPU_WORKERS = 20, 2
TEST_SHARE = 0.1  # a CUDA build's GPU test: a tenth of its build time
PYTHONS = [f"3.{i}" for i in range(5, 25)]
CUDAS = ["cpu", *(f"cu{100 + i}" for i in range(24))]


def night_config(gpu_smoke: bool) -> cfg.Config:
    data: dict[str, Any] = {
        "root": "/nonexistent-root",
        "project": {"name": "demo", "source": ".", "base_version": "1.0.0"},
        "matrix": {"linux": {"manywheel": {"pythons": PYTHONS, "cudas": CUDAS},
                             "conda": {"pythons": PYTHONS, "cudas": CUDAS}}},
        "machines": [{"name": "m", "platform": "linux", "queues": 1}],
        "smoke": {"gpu_check": "import torch; torch.zeros(1).cuda()"},
        "cluster": {"gpu_smoke": gpu_smoke},
    }
    return cfg.parse(data, path=REPO / "bench-gpu-tests.toml")


@dataclasses.dataclass(frozen=True)
class Task:
    key: str
    seconds: float
    priority: int
    needs: frozenset[str]  # resources a worker must declare: "slots" (a build), "gpu"
    kind: str  # "build" or "test"
    then: Task | None = None  # the task submitted when this one ends (a build's GPU test)


@dataclasses.dataclass
class Worker:
    name: str
    has: frozenset[str]
    gpu_host: bool
    busy: dict[str, float] = dataclasses.field(default_factory=lambda: {"build": 0.0, "test": 0.0})


def simulate(tasks: list[Task], workers: list[Worker]) -> float:
    """Dask's behaviour for these tasks: a free worker takes the ready task of highest priority
    among those it can run (ties: submission order). Returns the makespan in seconds."""
    ready: list[tuple[int, int, Task]] = []
    seq = 0
    for t in tasks:
        heapq.heappush(ready, (-t.priority, seq, t))
        seq += 1
    events: list[tuple[float, int, Worker, Task]] = []
    free = list(workers)
    now = 0.0
    while ready or events:
        # Hand out work: each free worker the best ready task it can run.
        skipped: list[tuple[int, int, Task]] = []
        for w in list(free):
            while ready and not ready[0][2].needs <= w.has:
                skipped.append(heapq.heappop(ready))
            if ready:
                _, _, t = heapq.heappop(ready)
                free.remove(w)
                w.busy[t.kind] += t.seconds
                heapq.heappush(events, (now + t.seconds, seq, w, t))
                seq += 1
            for item in skipped:
                heapq.heappush(ready, item)
            skipped.clear()
        if not events:
            break
        now, _, w, t = heapq.heappop(events)
        free.append(w)
        if t.then is not None:
            heapq.heappush(ready, (-t.then.priority, seq, t.then))
            seq += 1
    return now


def night(gpu_smoke: bool) -> tuple[list[Task], list[Worker], dict[str, float]]:
    config = night_config(gpu_smoke)
    builds: list[Build] = list(config.builds)
    est = {b.id: config.estimate_for(b) for b in builds}
    prio = lpt_priorities(builds, est)
    tasks = []
    for b in builds:
        res = build_resources(config, b)
        test = est[b.id] * TEST_SHARE if b.is_cuda else 0.0
        needs = frozenset(r for r in res if r in (SLOTS, GPU))
        if gpu_smoke:  # today: the test runs in the build's task, on its GPU worker
            tasks.append(Task(b.id, est[b.id] + test, prio[b.id], needs, "build"))
            continue
        then = Task(f"test-{b.id}", test, round(test * 1000), frozenset({GPU}), "test") \
            if b.is_cuda else None
        tasks.append(Task(b.id, est[b.id], prio[b.id], needs, "build", then))
    cpu = [Worker(f"cpu-{i}", frozenset({SLOTS}), False) for i in range(CPU_WORKERS)]
    # Today a GPU worker must declare build slots to get the CUDA builds; with the test stage
    # it declares only the gpu resource, so it takes no build.
    gpu_has = frozenset({SLOTS, GPU}) if gpu_smoke else frozenset({GPU})
    gpu = [Worker(f"gpu-{i}", gpu_has, True) for i in range(GPU_WORKERS)]
    bound = lower_bound(tasks, gpu_smoke)
    return tasks, cpu + gpu, {"lower_bound_s": bound}


def lower_bound(tasks: list[Task], gpu_smoke: bool) -> float:
    longest = max(t.seconds + (t.then.seconds if t.then else 0.0) for t in tasks)
    total = sum(t.seconds for t in tasks)
    if gpu_smoke:
        gpu_only = sum(t.seconds for t in tasks if GPU in t.needs)
        return max(longest, gpu_only / GPU_WORKERS, total / (CPU_WORKERS + GPU_WORKERS))
    tests = sorted(t.then.seconds for t in tasks if t.then)
    first_test_at = min(t.seconds for t in tasks if t.then)
    return max(longest, total / CPU_WORKERS, first_test_at + sum(tests) / GPU_WORKERS)


def run(gpu_smoke: bool) -> dict[str, Any]:
    tasks, workers, info = night(gpu_smoke)
    makespan = simulate(tasks, workers)
    gpu = [w for w in workers if w.gpu_host]
    return {
        "scenario": "today's gpu_smoke (CUDA builds on GPU workers)" if gpu_smoke
        else "test stage (build on CPU, GPU part on GPU workers)",
        "builds": len(tasks),
        "cuda_builds": sum(1 for t in tasks if GPU in t.needs or t.then),
        "gpu_host_building_s": round(sum(w.busy["build"] for w in gpu), 1),
        "gpu_host_testing_s": round(sum(w.busy["test"] for w in gpu), 1),
        "gpu_host_s": round(sum(w.busy["build"] + w.busy["test"] for w in gpu), 1),
        "makespan_h": round(makespan / 3600, 3),
        "lower_bound_h": round(info["lower_bound_s"] / 3600, 3),
        "makespan_over_bound": round(makespan / info["lower_bound_s"], 4),
    }


def main() -> None:
    today, stage = run(True), run(False)
    ratio = today["gpu_host_s"] / stage["gpu_host_s"]
    rows = [[r["scenario"], r["gpu_host_building_s"], r["gpu_host_testing_s"], r["makespan_h"],
             r["lower_bound_h"], r["makespan_over_bound"]] for r in (today, stage)]
    print_table(["scenario", "GPU build s", "GPU test s", "makespan h", "bound h", "ratio"],
                rows, title=f"1,000 builds, {CPU_WORKERS} CPU + {GPU_WORKERS} GPU workers")
    print(f"GPU-host seconds, today / test stage: {ratio:.1f}x (goal >= 5)")
    path = write_results("gpu_tests", {"runs": [today, stage],
                                       "gpu_host_s_today_over_test_stage": round(ratio, 2)})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
