"""PyTorch's 2026 nightly (configs/pytorch-2026.toml: 164 builds over Linux x86_64 and
aarch64, macOS arm64 and Windows x86_64 machines, CPU, CUDA, ROCm and XPU) planned with
routing: each build only on a machine of its platform that declares its architecture and
accelerator.

Reported: the plan's makespan / lower bound (goal <= 1.05; the bound is the routed one: the
longest build, and for each set of machines the work only they can take over their queues),
and the time to plan, against a baseline in the same run: the 2019 config
(configs/pytorch-2019.toml, 76 builds, explicit queues, no routing declared).
Two ways each: in process (load the config + make_plan, the work `nightly plan` does) and
the whole command (`nightly plan --config ... --json` as a subprocess: interpreter start,
imports, history lookups, JSON).

    .venv/bin/python benchmarks/bench_plan_2026.py [--repeat 20] [--cli-repeat 5]

Writes benchmarks/results/plan_2026.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

from common import median, print_table, write_results  # noqa: E402

from nightly.config import load  # noqa: E402
from nightly.plan.schedule import Plan, make_plan  # noqa: E402

CONFIGS = {
    "2019 (baseline)": REPO / "configs" / "pytorch-2019.toml",
    "2026": REPO / "configs" / "pytorch-2026.toml",
}
NIGHTLY = Path(sys.executable).parent / "nightly"


def in_process(path: Path) -> tuple[Plan, float]:
    started = time.perf_counter()
    plan = make_plan(load(path))
    return plan, time.perf_counter() - started


def command(path: Path) -> tuple[dict[str, object], float]:
    started = time.perf_counter()
    out = subprocess.run([str(NIGHTLY), "plan", "--config", str(path), "--json"],
                         check=True, capture_output=True, text=True, timeout=300).stdout
    return json.loads(out), time.perf_counter() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--cli-repeat", type=int, default=5)
    args = ap.parse_args()
    results: dict[str, dict[str, float]] = {}
    rows = []
    for name, path in CONFIGS.items():
        in_proc = []
        plan = None
        for _ in range(args.repeat):
            plan, s = in_process(path)
            in_proc.append(s)
        assert plan is not None
        cli = []
        for _ in range(args.cli_repeat):
            data, s = command(path)
            cli.append(s)
            assert data["makespan_s"] == plan.makespan_s  # the command plans the same
        r = {"builds": len(plan.builds), "machines": len(plan.machines),
             "queues": sum(len(m.queues) for m in plan.machines),
             "makespan_h": plan.makespan_s / 3600, "lower_bound_h": plan.lower_bound_s / 3600,
             "ratio": plan.makespan_s / plan.lower_bound_s,
             "windows_builds": sum(pb.build.platform == "windows" for pb in plan.builds),
             "plan_ms": median(in_proc) * 1000, "command_ms": median(cli) * 1000}
        results[name] = r
        rows.append([name, r["builds"], r["queues"], f"{r['makespan_h']:.2f}",
                     f"{r['lower_bound_h']:.2f}", f"{r['ratio']:.3f}", f"{r['plan_ms']:.1f}",
                     f"{r['command_ms']:.0f}"])
    base, new = results["2019 (baseline)"], results["2026"]
    print_table(["config", "builds", "queues", "makespan h", "bound h", "ratio", "plan ms",
                 "command ms"], rows, title="nightly plan: routed LPT, same run")
    print(f"\n2026 / 2019 plan time: in process {new['plan_ms'] / base['plan_ms']:.2f}x, "
          f"command {new['command_ms'] / base['command_ms']:.2f}x; "
          f"2026 makespan / bound {new['ratio']:.3f} (goal <= 1.05)")
    path = write_results("plan_2026", {"repeat": args.repeat, "cli_repeat": args.cli_repeat,
                                       "configs": results})
    print(f"wrote {path.relative_to(REPO)}")
    return 0 if new["ratio"] <= 1.05 else 1


if __name__ == "__main__":
    sys.exit(main())
