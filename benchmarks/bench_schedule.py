"""The schedule, measured: nights simulated through the real runner and queues.

Each configuration (configs/pytorch-2019.toml as written, with explicit queues; the same
builds with `[schedule] mode = "auto"`; configs/pytorch-modern.toml) is planned by
`schedule.make_plan`, then every machine's share runs through `Runner.run_queues` with the
local executor (work-conserving queues, state.json, logs, packages: all of it), machines side
by side. The recipe sleeps the build's estimated duration with an hour of build time scaled
down (default 1 h -> 2 s): CPU builds 15 min, CUDA builds 70 min, libtorch 4 h for `all`
and 1 h per single variant (the estimates of both configurations, checked below).

Reported per configuration: the plan's estimated makespan / lower bound, the measured
makespan (the slowest machine's wall time, scaled back to hours) / lower bound, and
automatic / explicit for 2019. Target: automatic within 1.05 of the lower bound. The lower
bound (longest build, or the work spread evenly) is not always reachable, so the table also
gives the optimum, computed exactly, and the plan against it.

Also the orchestration overhead: N no-op builds through Runner.run_queues on 2 queues
against spawning `bash noop.sh` N times directly (also 2 at a time), in the same run.

    .venv/bin/python benchmarks/bench_schedule.py [--ms-per-hour 2000] [--repeat 2] [--noop 200]
        [--user NBUILD --overhead-only]   (as root: the no-op builds as a build user, boxed)

Writes benchmarks/results/schedule.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

from common import DELIVER_WHEEL, median, print_table, stand_in_wheel, timed, write_results  # noqa: E402

from nightly import config as cfg  # noqa: E402
from nightly.builds.run.jobs import RunContext  # noqa: E402
from nightly.builds.run.runner import Runner  # noqa: E402
from nightly.core.matrix import Build, normalize_cuda  # noqa: E402
from nightly.executors.local import LocalExecutor  # noqa: E402
from nightly.plan.schedule import Plan, make_plan  # noqa: E402
from nightly.workspace import Day, State  # noqa: E402

DATE = dt.date(2019, 1, 31)
HOST_PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable

# Minutes of build time by kind: what the recipe sleeps (scaled) and what the plan assumes.
MINUTES = {"cpu": 15, "cuda": 70, "libtorch_all": 240, "libtorch_variant": 60}

SLEEP_RECIPE = r"""#!/usr/bin/env bash
# Sleeps the build's estimated duration, @MS@ ms per hour of build time.
case "$PACKAGE_TYPE" in
  libtorch) if [ "$LIBTORCH_VARIANT" = all ]; then min=@ALL@; else min=@VARIANT@; fi ;;
  *) if [ "$DESIRED_CUDA" = cpu ]; then min=@CPU@; else min=@CUDA@; fi ;;
esac
ms=$(( min * @MS@ / 60 ))
sleep "$(( ms / 1000 )).$(printf '%03d' $(( ms % 1000 )))"
""" + DELIVER_WHEEL  # the project's package, under the build's own name, as a real recipe's

NOOP_RECIPE = DELIVER_WHEEL

SCENARIOS = [
    ("2019 explicit", REPO / "configs" / "pytorch-2019.toml", "explicit"),
    ("2019 auto", REPO / "configs" / "pytorch-2019.toml", "auto"),
    ("modern auto", REPO / "configs" / "pytorch-modern.toml", None),
]


def recipe_minutes(b: Build) -> int:
    if b.package == "libtorch":
        return MINUTES["libtorch_all"] if b.variant == "all" else MINUTES["libtorch_variant"]
    return MINUTES["cuda"] if b.is_cuda else MINUTES["cpu"]


def write_recipes(recipes: Path, text: str, projects: tuple[str, ...] = ("torch",)) -> None:
    """The recipe of every package type, and beside the recipes the wheel of each project
    that it delivers."""
    wheels = recipes.parent / "wheels"
    for name in projects:
        stand_in_wheel(wheels / f"{name}.whl", name)
    for pkg in ("conda", "manywheel", "wheel", "libtorch"):
        r = recipes / pkg / "build.sh"
        r.parent.mkdir(parents=True, exist_ok=True)
        r.write_text(text.replace("@WHEELS@", str(wheels)))
        r.chmod(0o755)


def sim_config(src: Path, work: Path, mode: str | None) -> cfg.Config:
    """A copy of a shipped configuration for simulation: local executor everywhere, every
    interpreter mapped to this host's python3, every CUDA version to a fake toolkit, the
    sleep recipes, a scratch root. The matrix, machines, queues and estimates are untouched."""
    data: dict[str, Any] = tomllib.loads(src.read_text(encoding="utf-8"))
    data["root"] = str(work / "root")
    data["recipes"] = str(work / "recipes")
    data["project"]["source"] = str(work / "src")
    for m in data["machines"]:
        m["executor"] = "local"
    if mode:
        data.setdefault("schedule", {})["mode"] = mode
    pythons: set[str] = set()
    cudas: set[str] = set()
    for plat in data["matrix"].values():
        for pkg in plat.values():
            pythons.update(pkg.get("pythons", []))
            if "python" in pkg:
                pythons.add(pkg["python"])
            cudas.update(normalize_cuda(c) for c in pkg["cudas"] if c != "cpu")
    toolkit = work / "fake-cuda"
    data.setdefault("executor", {})["local"] = {
        "pythons": dict.fromkeys(sorted(pythons), HOST_PYTHON),
        "cuda": dict.fromkeys(sorted(cudas), str(toolkit)),
    }
    data["smoke"] = {"enabled": False}
    config = cfg.parse(data, path=src)
    for b in config.builds:  # the recipe sleeps what the plan assumes
        assert config.estimate_for(b) == recipe_minutes(b) * 60, (b.id, config.estimate_for(b))
    return config


def prepare_work(work: Path, ms_per_hour: int) -> None:
    (work / "src").mkdir(parents=True, exist_ok=True)
    nvcc = work / "fake-cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True, exist_ok=True)
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    text = SLEEP_RECIPE.replace("@MS@", str(ms_per_hour))
    for key, name in (("libtorch_all", "@ALL@"), ("libtorch_variant", "@VARIANT@"),
                      ("cpu", "@CPU@"), ("cuda", "@CUDA@")):
        text = text.replace(name, str(MINUTES[key]))
    projects = {tomllib.loads(src.read_text(encoding="utf-8"))["project"]["name"] for _, src, _ in SCENARIOS}
    write_recipes(work / "recipes", text, tuple(sorted(projects)))


def optimal_makespan_s(estimates: list[float], queues: int, upper: float) -> float:
    """The best possible makespan of these builds on `queues` identical queues (exact: the
    smallest whole minute T for which the builds pack into the queues, by a search over how
    many builds of each duration each queue takes). The lower bound max(longest, work /
    queues) is not always reachable; this is what a perfect plan would do."""
    sizes = sorted({round(e / 60) for e in estimates}, reverse=True)
    counts = tuple(sum(1 for e in estimates if round(e / 60) == s) for s in sizes)

    def load(p: tuple[int, ...]) -> int:
        return sum(x * y for x, y in zip(p, sizes, strict=True))

    def patterns(limit: int) -> list[tuple[int, ...]]:
        out: list[tuple[int, ...]] = [()]
        for i, size in enumerate(sizes):
            out = [(*p, k) for p in out for k in range(counts[i] + 1)
                   if load((*p, *[0] * (len(sizes) - len(p)))) + k * size <= limit]
        return sorted((p for p in out if any(p)), key=lambda p: -load(p))

    def feasible(limit: int) -> bool:
        pats = patterns(limit)

        @functools.cache
        def fill(bins: int, rem: tuple[int, ...]) -> bool:
            left = load(rem)
            if left == 0:
                return True
            if left > bins * limit:
                return False
            # The queue holding the longest remaining build: try each way to fill it.
            first = next(i for i, r in enumerate(rem) if r)
            return any(
                fill(bins - 1, tuple(r - x for r, x in zip(rem, p, strict=True)))
                for p in pats
                if p[first] and all(x <= r for x, r in zip(p, rem, strict=True))
            )

        return fill(queues, counts)

    work = load(counts)
    lo, hi = max(max(sizes), -(-work // queues)), round(upper / 60)
    while lo < hi:
        mid = (lo + hi) // 2
        if feasible(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo * 60.0


def optimal_plan_s(plan: Plan) -> float:
    """Per platform (its builds may go to any of its machines' queues), the best makespan."""
    best = 0.0
    for plat in {m.platform for m in plan.machines}:
        ms = [m for m in plan.machines if m.platform == plat]
        est = [pb.estimate_s for m in ms for pb in m.builds]
        upper = max(m.makespan_s for m in ms)
        best = max(best, optimal_makespan_s(est, sum(len(m.queues) for m in ms), upper))
    return best


def run_night(config: cfg.Config, plan: Plan, work: Path, label: str) -> dict[str, float]:
    """Every machine's share of `plan` through Runner.run_queues, machines side by side.
    Returns each machine's wall time in seconds."""
    executor = LocalExecutor(pythons=config.local.pythons, cuda=config.local.cuda)
    walls: dict[str, float] = {}
    errors: list[str] = []

    def machine(name: str) -> None:
        mp = plan.machine(name)
        day = Day(config.root, DATE, name=f"{label}-{name}")
        day.create()
        ctx = RunContext(config=config, day=day, state=State(day.state_path),
                         source_dir=work / "src", version="1.0.0.dev20190131", machine=name)
        queues = [[pb.build for pb in q.builds] for q in mp.queues]
        order = [pb.build for pb in mp.in_order()]
        outcomes, wall = timed(lambda: Runner(ctx, executor).run_queues(queues, order))
        bad = [f"{o.build_id}: {o.reason}" for o in outcomes if not o.ok]
        if bad or len(outcomes) != len(order):
            errors.append(f"machine {name}: {len(outcomes)}/{len(order)} ran; failed: {bad}")
        walls[name] = wall

    threads = [threading.Thread(target=machine, args=(m.name,)) for m in plan.machines
               if m.builds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit("simulation failed:\n" + "\n".join(errors))
    return walls


def bench_schedules(ms_per_hour: int, repeat: int) -> list[dict[str, Any]]:
    s_per_hour = ms_per_hour / 1000
    out = []
    with tempfile.TemporaryDirectory(prefix="bench-schedule-") as tmp:
        work = Path(tmp)
        prepare_work(work, ms_per_hour)
        for label, src, mode in SCENARIOS:
            config = sim_config(src, work, mode)
            plan = make_plan(config)
            runs = []
            for r in range(repeat):
                walls = run_night(config, plan, work, f"{label.replace(' ', '-')}-{r}")
                runs.append({m: w / s_per_hour for m, w in walls.items()})
            measured = median([max(r.values()) for r in runs])
            lb = plan.lower_bound_s / 3600
            best = optimal_plan_s(plan) / 3600
            out.append({
                "config": label,
                "source": str(src.relative_to(REPO)),
                "mode": mode or config.schedule_mode,
                "builds": len(plan.builds),
                "machines": {m.name: len(m.queues) for m in plan.machines},
                "lower_bound_h": round(lb, 4),
                "plan_makespan_h": round(plan.makespan_s / 3600, 4),
                "plan_ratio": round(plan.makespan_s / plan.lower_bound_s, 4),
                "optimal_makespan_h": round(best, 4),
                "plan_over_optimal": round(plan.makespan_s / 3600 / best, 4),
                "measured_makespan_h": round(measured, 4),
                "measured_ratio": round(measured / lb, 4),
                "per_machine_h": {
                    m.name: {
                        "plan": round(m.makespan_s / 3600, 4),
                        "measured": round(median([r[m.name] for r in runs if m.name in r]), 4),
                    }
                    for m in plan.machines if m.builds
                },
                "runs_h": [round(max(r.values()), 4) for r in runs],
            })
    return out


def user_area(user: str, config: cfg.Config, day: Day, work: Path) -> tuple[Any, Any]:
    """(the build user, its build area for the no-op night, staged as a night stages it):
    the builds run as `user`, each in the box nightly gives a build user's build."""
    import pwd

    from nightly.builds.area import userarea
    from nightly.builds.cache.wiring import CacheSettings
    from nightly.hardening import BuildUser

    pw = pwd.getpwnam(user)
    who = BuildUser(name=user, uid=pw.pw_uid, gid=pw.pw_gid, home=pw.pw_dir)
    area = userarea.area_for("", who, day.name, project="noop", nightlies=config.root)
    userarea.make_root(area, None)
    userarea.stage(area, source=work / "src", stamp="bench", recipes=work / "recipes",
                   wheelhouse=None, sccache=None, cache=CacheSettings(enabled=False), jobs=[])
    return who, area


def bench_overhead(n: int, user: str = "") -> dict[str, Any]:
    """n no-op builds through Runner.run_queues on 2 queues, against spawning the same
    script n times directly, 2 at a time. `user`: as that build user, in its build area
    (nightly as root)."""
    # A build user reads the stand-in wheel: outside /tmp (a box's /tmp is its own), open.
    with tempfile.TemporaryDirectory(prefix="bench-overhead-", dir="/var/tmp" if user else None) as tmp:
        work = Path(tmp)
        work.chmod(0o755)
        (work / "src").mkdir()
        write_recipes(work / "recipes", NOOP_RECIPE, ("noop",))
        config = cfg.parse(
            {
                "root": str(work / "root"),
                "recipes": str(work / "recipes"),
                "project": {"name": "noop", "source": str(work / "src"), "base_version": "1.0"},
                "matrix": {"linux": {"manywheel": {"pythons": ["3.12"], "cudas": ["cpu"]}}},
                "machines": [{"name": "m", "platform": "linux", "queues": 2}],
                "smoke": {"enabled": False},
                # A build user's builds: no compiler cache server per no-op build.
                **({"cache": {"enabled": False}} if user else {}),
            },
            path=work / "nightly.toml",
        )
        builds = [Build(package="manywheel", python=f"3.{i}", cuda="cpu") for i in range(n)]
        day = Day(config.root, DATE)
        day.create()
        who, area = user_area(user, config, day, work) if user else (None, None)
        executor = LocalExecutor(pythons={b.python: HOST_PYTHON for b in builds}, user=who)
        ctx = RunContext(config=config, day=day, state=State(day.state_path),
                         source_dir=work / "src", version="1.0.dev20190131", machine="m",
                         area=area)
        runner = Runner(ctx, executor)
        outcomes, runner_s = timed(lambda: runner.run_queues([builds[0::2], builds[1::2]]))
        if len(outcomes) != n or not all(o.ok for o in outcomes):
            failed = next((o for o in outcomes if not o.ok), None)
            raise SystemExit(f"no-op builds failed: {failed}")

        script = work / "recipes" / "manywheel" / "build.sh"
        outs = work / "direct"

        def spawn(indices: range) -> None:
            for i in indices:
                d = outs / str(i)
                d.mkdir(parents=True)
                subprocess.run(["bash", str(script)], env={"OUTPUT_DIR": str(d), "PATH": "/usr/bin:/bin",
                                                               "PROJECT_NAME": "noop"},
                               check=True, stdin=subprocess.DEVNULL)

        def direct() -> None:
            ts = [threading.Thread(target=spawn, args=(range(q, n, 2),)) for q in (0, 1)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()

        _, direct_s = timed(direct)
    return {
        "builds": n,
        "queues": 2,
        "runner_s": round(runner_s, 3),
        "direct_s": round(direct_s, 3),
        "runner_builds_per_s": round(n / runner_s, 1),
        "direct_spawns_per_s": round(n / direct_s, 1),
        "runner_time_over_direct": round(runner_s / direct_s, 2),
        # Each queue runs n/2 builds: the time the runner adds to one build.
        "overhead_ms_per_build": round((runner_s - direct_s) / (n / 2) * 1000, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ms-per-hour", type=int, default=2000,
                    help="wall milliseconds per hour of build time (default 2000)")
    ap.add_argument("--repeat", type=int, default=2, help="nights per configuration (median)")
    ap.add_argument("--noop", type=int, default=200, help="no-op builds for the overhead")
    ap.add_argument("--user", default="", help="the no-op builds as this build user, in its "
                    "build area and box (as root; docs/security.md, \"Each build alone\")")
    ap.add_argument("--overhead-only", action="store_true", help="only the no-op builds")
    args = ap.parse_args()

    started = time.perf_counter()
    overhead = bench_overhead(args.noop, args.user)
    if args.overhead_only:
        print(json.dumps(overhead))
        return
    schedules = bench_schedules(args.ms_per_hour, args.repeat)
    by = {s["config"]: s for s in schedules}
    auto_vs_explicit = {
        "plan": round(by["2019 auto"]["plan_makespan_h"] / by["2019 explicit"]["plan_makespan_h"], 4),
        "measured": round(
            by["2019 auto"]["measured_makespan_h"] / by["2019 explicit"]["measured_makespan_h"], 4
        ),
    }
    target = {
        s["config"]: {
            "measured_over_lower_bound": s["measured_ratio"],
            "plan_over_lower_bound": s["plan_ratio"],
            "optimum_over_lower_bound": round(s["optimal_makespan_h"] / s["lower_bound_h"], 4),
            "met": s["measured_ratio"] <= 1.05,
        }
        for s in schedules if s["mode"] == "auto"
    }

    print_table(
        ["config", "builds", "lower bound h", "optimum h", "plan h", "plan/LB", "plan/opt",
         "measured h", "measured/LB"],
        [[s["config"], s["builds"], s["lower_bound_h"], s["optimal_makespan_h"],
          s["plan_makespan_h"], s["plan_ratio"], s["plan_over_optimal"],
          s["measured_makespan_h"], s["measured_ratio"]] for s in schedules],
        title=f"Schedules (1 h of build time = {args.ms_per_hour} ms; median of {args.repeat})",
    )
    print(f"2019 automatic / explicit: plan {auto_vs_explicit['plan']:.3f}, "
          f"measured {auto_vs_explicit['measured']:.3f}")
    for name, t in target.items():
        verdict = "met" if t["met"] else "not met"
        why = ""
        if not t["met"] and t["optimum_over_lower_bound"] > 1.05:
            why = (f" (no schedule can: the optimum is {t['optimum_over_lower_bound']:.3f} x the "
                   f"lower bound; the plan is {t['plan_over_lower_bound']:.3f})")
        print(f"target, automatic within 1.05 of the lower bound: {name} "
              f"{t['measured_over_lower_bound']:.3f} {verdict}{why}")
    print_table(
        ["", "seconds", "builds/s"],
        [["Runner.run_queues (2 queues)", overhead["runner_s"], overhead["runner_builds_per_s"]],
         ["bash noop.sh directly (2 at a time)", overhead["direct_s"],
          overhead["direct_spawns_per_s"]]],
        title=f"Orchestration overhead ({overhead['builds']} no-op builds)",
    )
    print(f"runner time / direct time: {overhead['runner_time_over_direct']:.2f}; "
          f"overhead per build: {overhead['overhead_ms_per_build']:.1f} ms")
    path = write_results("schedule", {
        "ms_per_hour": args.ms_per_hour,
        "repeat": args.repeat,
        "schedules": schedules,
        "auto_over_explicit_2019": auto_vs_explicit,
        "target_auto_within_1_05": target,
        "overhead": overhead,
        "seconds": round(time.perf_counter() - started, 1),
    })
    print(f"\nwritten: {path} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
