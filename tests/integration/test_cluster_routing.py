"""Routing in cluster mode on a real Dask cluster: workers of two architectures (Dask
resources `arch-x86_64` / `arch-aarch64`, and `accel-rocm` on one), a night whose builds
span both architectures and a ROCm build; each build runs only on a worker that declares
its route, and the plan.json names the resources each build required.

Trivial recipes (tests/support/cluster.py's): the point is where each build runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.support.cluster import DaskCluster, make_project, run_args
from tests.support.fixture_types import MakeProject, MakeRecipe, RunCli

WORKERS = {
    "x86": "slots=2,platform-linux=1,arch-x86_64=1,accel-rocm=1",
    "arm": "slots=2,platform-linux=1,arch-aarch64=1",
    "mac": "slots=1,platform-macos=1",
}

MATRIX = """
[matrix.linux.manywheel]
# Pythons Debian packages for arm64: the "arm" worker is this x86_64 machine, so its local
# executor cross-builds (nightly.images.cross), which needs the target's Python.
pythons = ["3.11", "3.13"]
accelerators = ["cpu", "cu126", "rocm7.2"]
archs = ["x86_64", "aarch64"]

[selectors]
exclude = ["manywheel_*_rocm*_aarch64"]
"""
# The config's machines must be able to build them too (checked when it is read).
MACHINES = """
[[machines]]
name = "arm-host"
platform = "linux"
queues = 2
executor = "local"
archs = ["aarch64"]

[[machines]]
name = "rocm-host"
platform = "linux"
queues = 1
executor = "local"
accelerators = ["rocm"]
"""
X86 = ["manywheel_3.11_cpu", "manywheel_3.11_cu126", "manywheel_3.11_rocm7.2",
       "manywheel_3.13_cpu", "manywheel_3.13_cu126", "manywheel_3.13_rocm7.2"]
ARM = ["manywheel_3.11_cpu_aarch64", "manywheel_3.11_cu126_aarch64",
       "manywheel_3.13_cpu_aarch64", "manywheel_3.13_cu126_aarch64"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaskCluster]:
    c = DaskCluster(tmp_path_factory.mktemp("routing"), workers=WORKERS)
    c.start()
    yield c
    c.close()


def test_each_build_runs_on_a_worker_of_its_architecture_and_accelerator(
    night_project: MakeProject, make_recipe: MakeRecipe, run_cli: RunCli, cluster: DaskCluster
) -> None:
    # Each wheel tagged with the architecture its recipe was told to build for.
    p = make_project(night_project, make_recipe, cluster, matrix=MATRIX, extra=MACHINES,
                     default="sleep:0.2", package="-py3-none-linux_${TARGET_ARCH}.whl")
    code, out, err = run_cli(run_args(p, "--cluster", cluster.address), timeout=120)
    assert code == 0, (out, err)
    state = p.state()["builds"]
    assert sorted(state) == sorted(X86 + ARM)
    for bid in X86 + ARM:
        assert state[bid]["status"] == "succeeded", (bid, state[bid])
    assert {state[b]["worker_name"] for b in ARM} == {"arm"}
    assert {state[b]["worker_name"] for b in X86} == {"x86"}
    for bid in ARM:
        (pkg,) = state[bid]["packages"]
        assert pkg["path"].endswith("-py3-none-linux_aarch64.whl"), pkg
    plan = json.loads((p.day / "logs" / "master" / "plan.json").read_text())
    needs = {b["id"]: b["resources"] for b in plan["cluster"]["builds"]}
    assert needs["manywheel_3.11_cpu_aarch64"] == {
        "slots": 1.0, "platform-linux": 0.0, "arch-aarch64": 0.0}
    assert needs["manywheel_3.11_rocm7.2"] == {
        "slots": 1.0, "platform-linux": 0.0, "arch-x86_64": 0.0, "accel-rocm": 0.0}
