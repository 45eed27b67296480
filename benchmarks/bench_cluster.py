"""The cluster schedule, measured: a simulated night of 1,000 builds on 20 Dask workers.

The night is planned like `nightly run --cluster` plans it (estimates, `make_plan`, then
longest-first priorities and per-build resources) and submitted through the same code
(`nightly.cluster.dispatch.Dispatcher`, `build_resources`, `lpt_priorities`, `task_key`) to a real
Dask scheduler with 20 workers: 16 "linux" (slots=1, platform-linux=1) and 4 "macos"
(slots=1, platform-macos=1). On a small machine the workers are in-process (threads, as
LocalCluster(processes=False) would make them; one per worker, so each has its own
resources). Each task sleeps its build's estimated duration, an hour of build time scaled to
`--ms-per-hour` milliseconds: CPU builds 15 min, CUDA builds 70 min, libtorch 1 h per variant.

Reported: the lower bound (per platform: max(longest build, work / slots)), the list schedule
the estimates predict, the measured makespan (first submission to last result, scaled back
to hours) and measured / lower bound: as `nightly run --cluster` submits (longest first, the
next build going out as a slot frees, two queued per worker), and for contrast with every
task handed to the scheduler at once, with and without priorities (all 0, shuffled). Also
the time to plan the 1,000 builds (`schedule.make_plan`) and to compute the priorities and
bounds.

    .venv/bin/python benchmarks/bench_cluster.py [--ms-per-hour 400] [--no-baseline]

Writes benchmarks/results/cluster.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import random
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

from common import median, print_table, timed, write_results  # noqa: E402

from nightly import config as cfg  # noqa: E402
from nightly.cluster.dispatch import (  # noqa: E402
    Dispatcher,
    TaskItem,
    build_resources,
    cluster_bounds,
    lpt_priorities,
    task_key,
)
from nightly.core.matrix import Build  # noqa: E402
from nightly.plan.schedule import make_plan  # noqa: E402

LINUX_WORKERS, MACOS_WORKERS = 16, 4
PYTHONS = [f"3.{i}" for i in range(5, 25)]  # 20 spellings (the simulation needs no interpreter)


def cuda_list(n: int) -> list[str]:
    """cpu and n-1 CUDA versions."""
    return ["cpu", *(f"cu{100 + i}" for i in range(n - 1))]


def night_config(slots: int, smoke: bool = False) -> cfg.Config:
    """1,000 builds: Linux 800 (manywheel 300, conda 300, libtorch 200 variants), macOS 200
    (wheel 100, conda 80, libtorch 20); one machine per worker, as many queues as slots.
    `smoke`: one Python and at most 2 CUDA versions of each (a few dozen builds)."""
    py = PYTHONS[:1] if smoke else PYTHONS

    def cudas(n: int) -> list[str]:
        return cuda_list(min(n, 2) if smoke else n)
    machines = [{"name": f"lin-{i:02d}", "platform": "linux", "queues": slots}
                for i in range(LINUX_WORKERS)]
    machines += [{"name": f"mac-{i}", "platform": "macos", "queues": slots}
                 for i in range(MACOS_WORKERS)]
    data: dict[str, Any] = {
        "root": "/nonexistent-root",
        "project": {"name": "demo", "source": ".", "base_version": "1.0.0"},
        "schedule": {"mode": "auto", "history_estimates": "never"},
        "matrix": {
            "linux": {
                "manywheel": {"pythons": py, "cudas": cudas(15)},
                "conda": {"pythons": py, "cudas": cudas(15)},
                "libtorch": {"cudas": cudas(50)},
            },
            "macos": {
                "wheel": {"pythons": py, "cudas": cudas(5)},
                "conda": {"pythons": py, "cudas": cudas(4)},
                "libtorch": {"cudas": cudas(5)},
            },
        },
        "machines": machines,
    }
    return cfg.parse(data, path=REPO / "bench-cluster.toml")


@dataclasses.dataclass(frozen=True)
class SleepSpec:
    build_id: str
    seconds: float


def simulated_build(spec: SleepSpec) -> dict[str, Any]:
    """The benchmark's task: sleep the scaled estimate; say where and when."""
    from distributed import get_worker

    started = time.time()
    time.sleep(spec.seconds)
    return {"build": spec.build_id, "worker": get_worker().address, "started": started,
            "ended": time.time(), "status": "succeeded"}


def start_cluster(slots: int) -> Any:
    from distributed import Scheduler, SpecCluster, Worker

    workers: dict[str, Any] = {}
    for i in range(LINUX_WORKERS):
        workers[f"lin-{i:02d}"] = {"cls": Worker, "options": {
            "nthreads": slots, "resources": {"slots": slots, "platform-linux": 1}}}
    for i in range(MACOS_WORKERS):
        workers[f"mac-{i}"] = {"cls": Worker, "options": {
            "nthreads": slots, "resources": {"slots": slots, "platform-macos": 1}}}
    return SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": {  # type: ignore[no-untyped-call]
        "dashboard_address": ":0", "host": "127.0.0.1"}}, silence_logs=40)


def run_night(
    client: Any, config: cfg.Config, builds: list[Build], estimates: dict[str, float],
    scale: float, *, prioritised: bool, lookahead: int | None,
) -> dict[str, Any]:
    run_id = f"{random.getrandbits(32):08x}"
    prio = lpt_priorities(builds, estimates) if prioritised else {b.id: 0 for b in builds}
    order = list(builds)
    if not prioritised:
        random.Random(7).shuffle(order)
    items = [
        TaskItem(build_id=b.id, key=task_key(b, "2019_01_31", run_id),
                 spec=SleepSpec(b.id, estimates[b.id] * scale),
                 resources=build_resources(config, b), priority=prio[b.id])
        for b in order
    ]
    dispatcher = Dispatcher(client, topic=f"bench-{run_id}", retries=0, lookahead=lookahead)
    results: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    t0 = time.time()
    _, submit_s = timed(lambda: dispatcher.submit(simulated_build, items))
    dispatcher.run(on_result=lambda it, r: results.__setitem__(it.build_id, r),
                   on_error=lambda it, e: errors.append(f"{it.build_id}: {e}"))
    if errors or len(results) != len(builds):
        raise SystemExit(f"{len(errors)} tasks failed: {errors[:3]}")
    workers = dispatcher.workers()
    platform_of = {a: ("linux" if "platform-linux" in (w.get("resources") or {}) else "macos")
                   for a, w in workers.items()}
    misplaced = [r["build"] for r in results.values()
                 if platform_of[r["worker"]] != next(b.platform for b in builds if b.id == r["build"])]
    end = max(r["ended"] for r in results.values())
    # Where the time beyond the list schedule goes: idle gaps between a worker's builds (the
    # dispatch round trip) and sleeps that overran on a busy machine.
    by_worker: dict[str, list[dict[str, Any]]] = {}
    for r in results.values():
        by_worker.setdefault(r["worker"], []).append(r)
    gaps = []
    for rs in by_worker.values():
        rs.sort(key=lambda r: r["started"])
        gaps += [b["started"] - a["ended"] for a, b in itertools.pairwise(rs)]
    overrun = [r["ended"] - r["started"] - estimates[r["build"]] * scale for r in results.values()]
    return {"makespan_s": end - t0, "submit_s": submit_s, "misplaced": len(misplaced),
            "per_worker": len(by_worker), "gap_ms": 1000 * median(gaps) if gaps else 0.0,
            "mean_gap_ms": 1000 * sum(gaps) / max(len(gaps), 1),
            "overrun_ms": 1000 * sum(overrun) / len(overrun)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ms-per-hour", type=float, default=400.0,
                    help="milliseconds of wall time per hour of build time (default 400)")
    ap.add_argument("--slots", type=int, default=1, help="build slots per worker (default 1)")
    ap.add_argument("--no-baseline", action="store_true",
                    help="only the night as `nightly run --cluster` submits it")
    ap.add_argument("--smoke", action="store_true",
                    help="a few dozen builds instead of 1,000: does it still run (no figure to read)")
    args = ap.parse_args()
    scale = args.ms_per_hour / 1000 / 3600  # wall seconds per second of build time

    config = night_config(args.slots, args.smoke)
    builds = list(config.builds)
    assert len(builds) == 1000 or args.smoke, len(builds)
    plans = [timed(lambda: make_plan(config)) for _ in range(5)]
    plan = plans[-1][0]
    plan_s = median([t for _, t in plans])
    estimates = {b.id: config.estimate_for(b) for b in builds}
    _, prio_s = timed(lambda: lpt_priorities(builds, estimates))

    cluster = start_cluster(args.slots)
    from distributed import Client

    client = Client(cluster, set_as_default=False)  # type: ignore[no-untyped-call]
    try:
        workers = client.scheduler_info(n_workers=-1)["workers"]
        resources = {b.id: build_resources(config, b) for b in builds}
        bounds, bounds_s = timed(lambda: cluster_bounds(estimates, resources, workers))
        scenarios: list[tuple[str, bool, int | None]] = [("longest first", True, 2)]
        if not args.no_baseline:
            scenarios += [("longest first, all at once", True, None),
                          ("no priorities, all at once", False, None)]
        rows, out = [], []
        for name, prioritised, lookahead in scenarios:
            r = run_night(client, config, builds, estimates, scale, prioritised=prioritised,
                          lookahead=lookahead)
            measured_h = r["makespan_s"] / scale / 3600
            lb_h = bounds.lower_bound_s / 3600
            entry = {
                "scenario": name, "builds": len(builds), "workers": len(workers),
                "slots": sum(bounds.slots.values()), "lower_bound_h": round(lb_h, 3),
                "list_schedule_h": round(bounds.makespan_s / 3600, 3),
                "measured_makespan_h": round(measured_h, 3),
                "measured_over_lower_bound": round(measured_h / lb_h, 4),
                "wall_s": round(r["makespan_s"], 2), "submit_s": round(r["submit_s"], 3),
                "misplaced": r["misplaced"], "workers_used": r["per_worker"],
                "mean_gap_between_builds_ms": round(r["mean_gap_ms"], 2),
                "mean_sleep_overrun_ms": round(r["overrun_ms"], 2),
            }
            out.append(entry)
            rows.append([name, len(builds), len(workers), round(lb_h, 2),
                         round(bounds.makespan_s / 3600, 2), round(measured_h, 2),
                         round(measured_h / lb_h, 3), round(r["makespan_s"], 1),
                         round(r["mean_gap_ms"], 1), round(r["overrun_ms"], 1), r["misplaced"]])
    finally:
        client.close()  # type: ignore[no-untyped-call]
        cluster.close()

    print_table(
        ["scenario", "builds", "workers", "lower bound h", "list schedule h", "measured h",
         "measured/LB", "wall s", "gap ms", "overrun ms", "misplaced"],
        rows, title=f"{len(builds):,} builds on {LINUX_WORKERS} linux + {MACOS_WORKERS} macos workers "
                    f"({args.ms_per_hour:g} ms per hour of build time)",
    )
    print_table(["step", "ms"], [
        [f"make_plan ({len(builds):,} builds, 20 machines)", round(plan_s * 1000, 1)],
        ["longest-first priorities", round(prio_s * 1000, 2)],
        ["cluster bounds (lower bound, list schedule)", round(bounds_s * 1000, 2)],
    ], title="planning")
    path = write_results("cluster", {
        "ms_per_hour": args.ms_per_hour,
        "slots_per_worker": args.slots,
        "plan": {"make_plan_ms": round(plan_s * 1000, 2), "plan_makespan_h":
                 round(plan.makespan_s / 3600, 3), "plan_lower_bound_h":
                 round(plan.lower_bound_s / 3600, 3),
                 "priorities_ms": round(prio_s * 1000, 3), "bounds_ms": round(bounds_s * 1000, 3)},
        "runs": out,
    })
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
