"""What a build cost, and where: its build seconds and test seconds and the hosts each ran on,
and for the night the seconds GPU hosts spent building against testing (GPU hosts cost about
ten times what CPU hosts do: they should test, not compile). Read from state.json's entries
(`duration_s`, `machine`, and the test stage's `tested`, nightly.builds.test.smoke)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from nightly.workspace.state import BuildEntry


@dataclass(frozen=True, kw_only=True)
class BuildCost:
    build_s: float | None  # the build alone (recipe, packages filed)
    test_s: float | None  # its test stage, every part (None: not tested)
    built_on: str
    tested_on: str  # the hosts of its test parts that ran, "cpu-host, gpu-host"
    gpu_build_s: float  # of build_s, on a GPU host
    gpu_test_s: float  # of test_s, on a GPU host


@dataclass(frozen=True, kw_only=True)
class GpuHosts:
    """Which hosts have a GPU: machines with `gpu = true` by name; in a cluster night, the
    workers that declared the gpu resource, by address (state.json's meta `gpu_workers`)."""

    names: frozenset[str] = frozenset()

    def has(self, host: str) -> bool:
        return host in self.names


def build_cost(entry: BuildEntry, gpu: GpuHosts) -> BuildCost:
    tested = entry.tested
    parts = tested.parts if tested is not None else ()
    ran = [p for p in parts if p.ran]
    test_s = round(sum(p.seconds for p in ran), 3) if parts else None
    on_gpu = entry.machine and gpu.has(entry.machine)
    gpu_test_s = 0.0
    for p in ran:
        gpu_part = tested is not None and p is tested.gpu
        if (gpu_part and p.where) or gpu.has(p.where):
            gpu_test_s += p.seconds
    hosts = list(dict.fromkeys(p.where for p in ran if p.where))
    return BuildCost(
        build_s=entry.duration_s, test_s=test_s, built_on=entry.machine,
        tested_on=", ".join(hosts), gpu_build_s=float(entry.duration_s or 0) if on_gpu else 0.0,
        gpu_test_s=round(gpu_test_s, 3),
    )


def gpu_host_seconds(costs: Iterable[BuildCost]) -> dict[str, float]:
    """The night's seconds on GPU hosts: {"building": ..., "testing": ...}."""
    building = testing = 0.0
    for c in costs:
        building += c.gpu_build_s
        testing += c.gpu_test_s
    return {"building": round(building, 3), "testing": round(testing, 3)}


# What a succeeded build's test says (state.json's `tested`): a build is "tested" only when
# its test ran and passed; an untested one is never shown as plain "succeeded".
PASSED, UNTESTED, PARTLY = "passed", "untested", "GPU test not run"


def verdict_of(entry: BuildEntry) -> str:
    """"passed", "failed", "GPU test not run" (the CPU part passed, the GPU part was not run)
    or "untested" (no test ran: [smoke] enabled = false, or none recorded)."""
    tested = entry.tested
    result = tested.result if tested is not None else ""
    if result == PASSED:
        return PASSED
    if result == "failed":
        return "failed"
    cpu = tested.cpu if tested is not None else None
    if result == "not run" and cpu is not None and cpu.result == PASSED:
        return PARTLY
    return UNTESTED


def shown_status(status: str, verdict: str) -> str:
    """The status a person reads: "succeeded" only for a tested build, else
    "succeeded (untested)" / "succeeded (GPU test not run)"."""
    if status != "succeeded" or verdict in (PASSED, ""):
        return status
    return f"{status} ({verdict})"
