"""A machine's per-architecture executors (`executors = { aarch64 = "local" }`): one x86_64
machine builds its own architecture in containers and cross-builds aarch64 on the host, in
one night. The config, the plan, the images the night needs, and which executor the runner
gives each build."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nightly.builds.run.runner import Runner
from nightly.config import Config, load
from nightly.core.matrix import Build
from nightly.errors import ConfigError
from nightly.images import commands
from tests.unit.conftest import CliResult, WriteConfig

HEAD = """\
[project]
name = "demo"
source = "."
base_version = "1.0.0"

[matrix.linux.manywheel]
pythons = ["3.12"]
accelerators = ["cpu", "rocm7.2"]
archs = ["x86_64", "aarch64"]

[selectors]
exclude = ["manywheel_*_rocm*_aarch64"]

[images.manywheel]
default = "site/builder:{accelerator}"
"""

MACHINE = """
[[machines]]
name = "here"
platform = "linux"
queues = 2
executor = "container"
archs = ["x86_64", "arm64"]
accelerators = ["cpu", "rocm"]
executors = { arm64 = "local" }
"""


def _load(write_config: WriteConfig, machine: str = MACHINE) -> Config:
    return load(write_config(HEAD + machine))


def test_a_machine_names_the_executor_of_an_architecture(write_config: WriteConfig) -> None:
    (m,) = _load(write_config).machines
    assert m.arch_executors == (("aarch64", "local"),)  # arm64 is spelt aarch64 on Linux
    assert m.executor_for("aarch64") == "local"
    assert m.executor_for("x86_64") == "container"


@pytest.mark.parametrize(("edit", "words"), [
    (('archs = ["x86_64", "arm64"]', 'archs = ["x86_64"]'),
     "executors names aarch64, which the machine does not build"),
    (('{ arm64 = "local" }', '{ arm64 = "qemu" }'), "'qemu' is not one of"),
    (('{ arm64 = "local" }', '{ sparc = "local" }'), "not a linux architecture"),
])
def test_bad_executors_name_the_key(write_config: WriteConfig, edit: tuple[str, str],
                                    words: str) -> None:
    with pytest.raises(ConfigError, match=words) as e:
        _load(write_config, MACHINE.replace(*edit))
    assert "machines[0].executors" in str(e.value)


def test_the_plan_shows_each_architectures_executor(write_config: WriteConfig, nightly: Any) -> None:
    path = write_config(HEAD + MACHINE)
    r: CliResult = nightly("plan", "--config", str(path), "--json")
    assert r.code == 0, r.err
    (m,) = json.loads(r.out)["machines"]
    assert (m["executor"], m["arch_executors"]) == ("container", {"aarch64": "local"})
    r = nightly("plan", "--config", str(path))
    assert r.code == 0, r.err
    assert "container; aarch64 local" in " ".join(r.out.split())


def test_images_are_needed_only_by_builds_run_in_containers(write_config: WriteConfig) -> None:
    c = _load(write_config)
    wanted = {n.tag: n.builds for n in commands.needed(c)}
    # The cpu image serves the x86_64 cpu build only; the aarch64 one is built on the host.
    assert wanted == {"site/builder:cpu": ["manywheel_3.12_cpu"],
                      "site/builder:rocm7.2": ["manywheel_3.12_rocm7.2"]}
    everywhere = _load(write_config, MACHINE.replace('executors = { arm64 = "local" }', ""))
    assert "manywheel_3.12_cpu_aarch64" in {b for n in commands.needed(everywhere)
                                           for b in n.builds}


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name


def test_the_runner_gives_each_build_its_architectures_executor(tmp_path: Path) -> None:
    container: Any = _Named("container")  # executors, as far as the runner can tell
    local: Any = _Named("local")
    runner = Runner(None, container, by_arch={"aarch64": (local, None)})  # type: ignore[arg-type]
    arm = Build(package="manywheel", python="3.12", cuda="cpu", arch="aarch64")
    x86 = Build(package="manywheel", python="3.12", cuda="rocm7.2")
    assert runner.executor_of(arm) is local
    assert runner.executor_of(x86) is container
