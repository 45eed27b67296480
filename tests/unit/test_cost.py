"""A build's cost read from its state entry: build and test seconds, where each ran, and the
night's GPU-host seconds building vs testing."""

from __future__ import annotations

from nightly.workspace.cost import GpuHosts, build_cost, gpu_host_seconds
from nightly.workspace.records import TestRecord
from nightly.workspace.state import BuildEntry


def _entry(machine: str, cuda: str, gpu_where: str | None) -> BuildEntry:
    tested: dict[str, object] = {"result": "passed", "cpu": {"result": "passed", "where": machine,
                                                             "seconds": 2.0}}
    if gpu_where is not None:
        tested["gpu"] = ({"result": "passed", "where": gpu_where, "seconds": 5.0} if gpu_where
                         else {"result": "not run", "where": "", "seconds": 0.0})
    return BuildEntry(status="succeeded", machine=machine, cuda=cuda, duration_s=100.0,
                      tested=TestRecord.from_json(tested))


def test_cpu_builder_gpu_tester() -> None:
    c = build_cost(_entry("cpu-1", "cu126", "gpu-1"), GpuHosts(names=frozenset({"gpu-1"})))
    assert (c.build_s, c.test_s, c.built_on, c.tested_on) == (100.0, 7.0, "cpu-1", "cpu-1, gpu-1")
    assert (c.gpu_build_s, c.gpu_test_s) == (0.0, 5.0)


def test_gpu_host_building_counts_and_not_run_costs_nothing() -> None:
    hosts = GpuHosts(names=frozenset({"big"}))
    on_gpu = build_cost(_entry("big", "cu126", "big"), hosts)
    untested = build_cost(_entry("small", "cu126", ""), hosts)
    assert (on_gpu.gpu_build_s, on_gpu.gpu_test_s) == (100.0, 7.0)
    assert (untested.test_s, untested.tested_on, untested.gpu_test_s) == (2.0, "small", 0.0)
    assert gpu_host_seconds([on_gpu, untested]) == {"building": 100.0, "testing": 7.0}
    # A cluster night: a build on a GPU worker (one that also declares build slots) counts.
    workers = GpuHosts(names=frozenset({"tls://10.0.0.9:4001"}))
    assert build_cost(_entry("tls://10.0.0.9:4001", "cu126", None), workers).gpu_build_s == 100.0
    assert build_cost(_entry("tls://10.0.0.7:4001", "cu126", None), workers).gpu_build_s == 0.0
    assert build_cost(BuildEntry(status="failed"), hosts).test_s is None
