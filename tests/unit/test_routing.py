"""Routing: machines declare the architectures and accelerators they build; the plan puts
each build only on such a machine; a build no machine can take is a config error (exit 2)
naming it and the machines considered; the recipe environment and the cluster's resources
carry the route."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from nightly.builds.run.jobs import axis_env, manylinux_env, package_version, recipe_env
from nightly.cluster.dispatch import build_resources, gpu_test_resources
from nightly.config import Config, load
from nightly.core.manylinux import plat, platform_env
from nightly.core.matrix import Build
from nightly.errors import ConfigError
from nightly.plan import routing
from nightly.plan.schedule import make_plan
from tests.unit.conftest import MINIMAL_CONFIG, CliResult, RunCli, WriteConfig

HEAD = """\
[project]
name = "demo"
source = "."
base_version = "1.0.0"

[matrix.linux.manywheel]
pythons = ["3.12", "3.14t"]
accelerators = ["cpu", "cu130", "rocm7.2", "xpu"]
archs = ["x86_64", "aarch64"]
manylinux = "2_28"

[selectors]
exclude = ["manywheel_*_rocm*_aarch64", "manywheel_*_xpu_aarch64"]

[schedule]
mode = "auto"

[estimates.manywheel]
cpu = "1h"
cuda = "2h"
rocm = "3h"
xpu = "30m"

[estimates.manywheel.aarch64]
cpu = "1h30m"
cuda = "4h"

[images.manywheel]
default = "pytorch/manylinux2_28-builder:{accelerator}"

[images.manywheel.aarch64]
cpu = "arm/cpu-{arch}"
default = "arm/builder:{accelerator}"
"""

MACHINES = """
[[machines]]
name = "x86"
platform = "linux"
queues = 2

[[machines]]
name = "gpu-other"
platform = "linux"
queues = 1
accelerators = ["rocm7.2", "xpu"]

[[machines]]
name = "arm"
platform = "linux"
queues = 2
archs = ["arm64"]
"""


def _load(write_config: WriteConfig, machines: str = MACHINES, head: str = HEAD) -> Config:
    return load(write_config(head + machines))


def test_machines_declare_what_they_build(write_config: WriteConfig) -> None:
    c = _load(write_config)
    x86, other, arm = c.machines
    assert (x86.arch_list, x86.accelerator_list) == (("x86_64",), ("cpu", "cuda"))
    assert (other.arch_list, other.accelerators) == (("x86_64",), ("rocm7.2", "xpu"))
    assert arm.archs == ("aarch64",)  # arm64 is spelt aarch64 on Linux
    assert x86.describe() == "x86 (linux x86_64; cpu, cuda)"


def test_the_plan_puts_each_build_only_where_it_can_run(write_config: WriteConfig) -> None:
    c = _load(write_config)
    assert len(c.builds) == 12  # 2 Pythons x (4 on x86_64 + 2 on aarch64)
    plan = make_plan(c)
    where = {pb.build.id: pb.machine for pb in plan.builds}
    assert sorted(where) == sorted(b.id for b in c.builds)
    for bid, machine in where.items():
        if bid.endswith("_aarch64"):
            assert machine == "arm", bid
        elif "_rocm" in bid or "_xpu" in bid:
            assert machine == "gpu-other", bid
        else:
            assert machine == "x86", bid
    # Estimates per family and architecture.
    est = {pb.build.id: pb.estimate_s for pb in plan.builds}
    assert est["manywheel_3.12_rocm7.2"] == 3 * 3600
    assert est["manywheel_3.12_xpu"] == 1800
    assert est["manywheel_3.12_cu130_aarch64"] == 4 * 3600
    assert est["manywheel_3.12_cpu_aarch64"] == 5400
    # The routed bound: the ROCm/XPU machine's work alone (2 x 3h + 2 x 30 min on 1 queue).
    assert plan.lower_bound_s == 7 * 3600
    assert plan.makespan_s == 7 * 3600


def test_the_plan_shows_the_routing(write_config: WriteConfig, nightly: RunCli) -> None:
    path = write_config(HEAD + MACHINES)
    r: CliResult = nightly("plan", "--config", str(path), "--json")
    assert r.code == 0, r.err
    data = json.loads(r.out)
    arm = next(m for m in data["machines"] if m["name"] == "arm")
    assert (arm["archs"], arm["accelerators"]) == (["aarch64"], ["cpu", "cuda"])
    b = next(b for b in data["builds"] if b["id"] == "manywheel_3.14t_cu130_aarch64")
    assert (b["arch"], b["accelerator"], b["family"], b["machine"]) == (
        "aarch64", "cu130", "cuda", "arm")
    assert b["label"] == "wheel-py3_14t-cuda-aarch6413_0-aarch64"
    r = nightly("plan", "--config", str(path), "--select", "manywheel-py3_14t-rocm7_2")
    assert r.code == 0, r.err
    assert "linux x86_64; builds rocm7.2, xpu; 1 queue," in r.out
    assert "[manywheel-py3_14t-rocm7_2]" in r.out
    assert "manywheel_3.12_" not in r.out


def test_a_build_no_machine_can_take_is_exit_2_naming_it_and_the_machines(
    write_config: WriteConfig, nightly: RunCli
) -> None:
    no_arm = MACHINES[:MACHINES.index('\n[[machines]]\nname = "arm"')]
    path = write_config(HEAD + no_arm)
    r = nightly("plan", "--config", str(path))
    assert r.code == 2
    assert "Traceback" not in r.err
    assert len(r.err.strip().splitlines()) == 1
    assert "no machine can build manywheel_3.12_cpu_aarch64 (linux aarch64, cpu)" in r.err
    assert "considered: x86 (linux x86_64; cpu, cuda); gpu-other (linux x86_64; rocm7.2, xpu)" \
        in r.err
    assert '"aarch64" to a linux machine\'s archs' in r.err


def test_explicit_queues_may_not_name_a_build_the_machine_cannot_run(
    write_config: WriteConfig,
) -> None:
    head = HEAD.replace('mode = "auto"', 'mode = "explicit"')
    machines = MACHINES.replace('queues = 2\n\n[[machines]]\nname = "gpu-other"',
                                'queues = 2\nexplicit_queues = [["manywheel_3.12_xpu"]]\n\n'
                                '[[machines]]\nname = "gpu-other"')
    c = _load(write_config, machines, head)
    with pytest.raises(ConfigError, match=r"manywheel_3\.12_xpu .* cannot build it"):
        make_plan(c)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (('accelerators = ["cpu", "cu130", "rocm7.2", "xpu"]',
          'accelerators = ["cpu"]\ncudas = ["cpu"]'), "cudas and accelerators say the same"),
        (('archs = ["x86_64", "aarch64"]', 'archs = ["x86_64", "riscv64"]'),
         "'riscv64' is not a linux architecture"),
        (('accelerators = ["cpu", "cu130", "rocm7.2", "xpu"]', 'accelerators = ["cpu", "rocm7"]'),
         "'rocm7' is not a ROCm version"),
        (('xpu = "30m"', 'xpu = "30m"\nnpu = "1h"'), "unknown key"),
    ],
)
def test_bad_axes_are_config_errors(
    write_config: WriteConfig, edit: tuple[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(write_config, head=HEAD.replace(*edit))


def test_a_machine_key_misspelt_is_named(write_config: WriteConfig) -> None:
    with pytest.raises(ConfigError, match="did you mean 'accelerators'"):
        _load(write_config, MACHINES.replace('accelerators = ["rocm7.2"', 'accelerator = ["rocm7.2"'))


def test_images_per_architecture(write_config: WriteConfig) -> None:
    c = _load(write_config)
    by_id = {b.id: b for b in c.builds}
    assert c.image_for(by_id["manywheel_3.12_cu130"]) == "pytorch/manylinux2_28-builder:cuda13.0"
    assert c.image_for(by_id["manywheel_3.12_rocm7.2"]) == "pytorch/manylinux2_28-builder:rocm7.2"
    assert c.image_for(by_id["manywheel_3.12_cpu_aarch64"]) == "arm/cpu-aarch64"
    assert c.image_for(by_id["manywheel_3.12_cu130_aarch64"]) == "arm/builder:cuda13.0"


def test_the_recipe_environment_carries_the_axes(write_config: WriteConfig) -> None:
    c = _load(write_config)
    by_id = {b.id: b for b in c.builds}
    rocm = by_id["manywheel_3.14t_rocm7.2"]
    env = recipe_env(c, rocm, version="1.0.0.dev20260101", date=dt.date(2026, 1, 1),
                     channel="nightly")
    assert {k: env[k] for k in ("ACCELERATOR", "DESIRED_CUDA", "ROCM_VERSION", "TARGET_ARCH",
                                "NIGHTLY_ARCH", "NIGHTLY_PYTHON_ABI", "NIGHTLY_FREE_THREADED",
                                "NIGHTLY_LABEL")} == {
        "ACCELERATOR": "rocm", "DESIRED_CUDA": "rocm7.2", "ROCM_VERSION": "7.2",
        "TARGET_ARCH": "x86_64", "NIGHTLY_ARCH": "x86_64", "NIGHTLY_PYTHON_ABI": "cp314t",
        "NIGHTLY_FREE_THREADED": "1", "NIGHTLY_LABEL": "manywheel-py3_14t-rocm7_2"}
    arm = axis_env(by_id["manywheel_3.12_cpu_aarch64"])
    assert (arm["ACCELERATOR"], arm["TARGET_ARCH"], arm["ROCM_VERSION"]) == ("cpu", "aarch64", "")
    assert package_version(rocm, "1.0.0.dev1", "env") == "1.0.0.dev1+rocm7.2"
    assert package_version(by_id["manywheel_3.12_xpu"], "1.0.0.dev1", "env") == "1.0.0.dev1+xpu"
    assert package_version(by_id["manywheel_3.12_cpu"], "1.0.0.dev1", "env") == "1.0.0.dev1"


def test_the_manylinux_platform_comes_from_the_build(write_config: WriteConfig) -> None:
    c = _load(write_config)
    by_id = {b.id: b for b in c.builds}
    env = manylinux_env(c, by_id["manywheel_3.12_cpu_aarch64"], "container")
    assert env == {"NIGHTLY_MANYLINUX": "2_28", "MANYLINUX_PLATFORM": "manylinux_2_28_aarch64",
                   "AUDITWHEEL_PLAT": "manylinux_2_28_aarch64",
                   "NIGHTLY_MANYLINUX_TOOLCHAIN": "sysroot"}
    env = manylinux_env(c, by_id["manywheel_3.12_cpu"], "container")
    assert env["MANYLINUX_PLATFORM"] == "manylinux_2_28_x86_64"
    assert plat("2_17", "arm64") == "manylinux_2_17_aarch64"
    assert platform_env("off", "aarch64") == {"NIGHTLY_MANYLINUX": "off"}
    assert platform_env("", "aarch64") == {}
    with pytest.raises(ValueError, match="'sparc' is not an architecture"):
        plat("2_28", "sparc")


def test_cluster_resources_carry_the_route(write_config: WriteConfig) -> None:
    c = _load(write_config)
    by_id = {b.id: b for b in c.builds}
    assert build_resources(c, by_id["manywheel_3.12_cpu_aarch64"]) == {
        "slots": 1.0, "platform-linux": 0.0, "arch-aarch64": 0.0}
    assert build_resources(c, by_id["manywheel_3.12_cpu"]) == {
        "slots": 1.0, "platform-linux": 0.0, "arch-x86_64": 0.0}
    assert build_resources(c, by_id["manywheel_3.12_xpu"]) == {
        "slots": 1.0, "platform-linux": 0.0, "arch-x86_64": 0.0, "accel-xpu": 0.0}
    assert gpu_test_resources(by_id["manywheel_3.12_cu130_aarch64"]) == {
        "gpu": 1.0, "platform-linux": 0.0, "arch-aarch64": 0.0}
    # A night of one architecture and CPU/CUDA asks its workers nothing new.
    old = load(write_config(MINIMAL_CONFIG, "old.toml"))
    assert {build_resources(old, b)["platform-linux"] for b in old.builds} == {0.0}
    assert all(set(build_resources(old, b)) == {"slots", "platform-linux"} for b in old.builds)


def test_the_routed_bound() -> None:
    # Two machines of 1 queue; builds of 4h only machine 0 can take, and 1h ones either can.
    builds = [(4.0, (0,)), (4.0, (0,)), (1.0, (0, 1)), (1.0, (0, 1))]
    assert routing.bound(builds, [1, 1]) == 8.0  # machine 0's own work
    assert routing.bound([(1.0, (0, 1))] * 4, [1, 1]) == 2.0
    assert routing.bound([], [1]) == 0.0


def test_one_off_builds_nobody_can_take_are_refused(write_config: WriteConfig) -> None:
    c = _load(write_config)
    b = Build(package="manywheel", python="3.12", cuda="rocm7.2", arch="aarch64")
    with pytest.raises(ConfigError, match=r"no machine can build manywheel_3\.12_rocm7\.2_aarch64"):
        make_plan(c, [b])


def test_a_one_off_build_may_name_its_architecture(write_config: WriteConfig, nightly: RunCli) -> None:
    path = write_config(HEAD + MACHINES)
    r = nightly("build", "manywheel", "3.12", "cu130", "--arch", "arm64", "--config", str(path),
                "--dry-run", "--executor", "container")
    assert r.code == 0, r.err
    assert '"TARGET_ARCH": "aarch64"' in r.out
    assert '"MANYLINUX_PLATFORM": "manylinux_2_28_aarch64"' in r.out
    assert '"image": "arm/builder:cuda13.0"' in r.out
    r = nightly("build", "manywheel", "3.12", "cu130", "--arch", "sparc", "--config", str(path))
    assert r.code == 2
    assert "'sparc' is not a linux architecture: write x86_64 or aarch64" in r.err


def test_the_interpreter_is_chosen_by_abi(tmp_path: Path) -> None:
    from nightly.builds.run.jobs import interpreter_env
    from tests.support.policy_config import text

    config = text().replace('pythons = ["3.11"]\ncudas = ["cpu", "11.8"]',
                            'pythons = ["3.11", "3.13", "3.13t"]\ncudas = ["cpu", "11.8"]', 1)
    config = config.replace('pythons = { "3.11" = "distro" }',
                            'pythons = { "3.11" = "distro", "3.13" = "host:/opt/py313" }')
    path = tmp_path / "nightly.toml"
    path.write_text(config)
    c = load(path)
    by_id = {b.id: b for b in c.builds}
    assert interpreter_env(c, by_id["manywheel_3.13_cpu"], "container") == {
        "PYTHON": "/opt/python/cp313-cp313/bin/python"}
    # The declared image's 3.13 is no 3.13t: the manylinux layout's free-threaded one.
    assert interpreter_env(c, by_id["manywheel_3.13t_cpu"], "container") == {
        "PYTHON": "/opt/python/cp313-cp313t/bin/python"}
    assert interpreter_env(c, by_id["manywheel_3.13t_cpu"], "local") == {}


@pytest.mark.parametrize(
    ("tag", "arch"),
    [("manylinux_2_28_aarch64", "aarch64"), ("manylinux2014_x86_64", "x86_64"),
     ("linux_aarch64", "aarch64"), ("any", ""), ("macosx_11_0_arm64", "")],
)
def test_the_architecture_of_a_platform_tag(tag: str, arch: str) -> None:
    from nightly.core.manylinux import tag_arch

    assert tag_arch(tag) == arch


def test_a_wheel_of_another_architecture_fails_its_build(tmp_path: Path) -> None:
    from nightly.core.manylinux import check_packages

    def wheel(tag: str) -> Path:
        p = tmp_path / f"demo-1.0-cp312-cp312-{tag}.whl"
        p.write_bytes(b"")
        return p

    x86 = wheel("manylinux_2_28_x86_64")
    arm = wheel("manylinux_2_28_aarch64")
    assert check_packages("manywheel", "2_28", [arm], arch="aarch64").reason is None
    v = check_packages("manywheel", "2_28", [x86], arch="aarch64")
    assert v.reason is not None
    assert f"{x86.name} is for x86_64, not aarch64, the build's architecture" in v.reason
    assert check_packages("manywheel", "", [wheel("linux_x86_64")], arch="aarch64").reason
    assert check_packages("manywheel", "", [wheel("any")], arch="aarch64").reason is None
    # Without an architecture (callers before it), as before.
    assert check_packages("manywheel", "2_28", [x86]).reason is None
