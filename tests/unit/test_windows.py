"""Windows as a platform of the matrix, up to the recipe: the `[matrix.windows.*]` tables,
PyTorch's Windows build names, routing to `platform = "windows"` machines only, the recipe
contract's environment (docs/recipes.md, "Windows recipes"), and the one-line refusal to run
a Windows build on this (non-Windows) host. Also the free-threaded preflight: a 3.14t build
on a host with no free-threaded interpreter is refused in one line that says what it needs.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from nightly.builds.rules import freethreaded
from nightly.builds.run import windows
from nightly.config import Config, load
from nightly.core.matrix import Build, parse_spec
from nightly.errors import ConfigError, UsageError
from nightly.plan.schedule import make_plan
from tests.unit.conftest import CliResult, RunCli, WriteConfig

HEAD = """\
[project]
name = "demo"
source = "."
base_version = "1.0.0"

[matrix.linux.manywheel]
pythons = ["3.12"]
cudas = ["cpu"]

[matrix.windows.wheel]
pythons = ["3.12", "3.14t"]
accelerators = ["cpu", "cu126", "xpu"]

[matrix.windows.libtorch]
variants = ["shared-with-deps"]
accelerators = ["cpu", "cu130"]

[schedule]
mode = "auto"
"""

LINUX = """
[[machines]]
name = "lin"
platform = "linux"
queues = 2
"""

WINDOWS = """
[[machines]]
name = "win"
platform = "windows"
queues = 3
executor = "local"
accelerators = ["cpu", "cuda", "xpu"]
"""


def _config(write_config: WriteConfig, text: str) -> Config:
    return load(write_config(text))


def test_windows_builds_carry_pytorchs_names_and_their_own_ids(write_config: WriteConfig) -> None:
    c = _config(write_config, HEAD + LINUX + WINDOWS)
    win = {b.id: b.label for b in c.builds if b.platform == "windows"}
    assert win == {
        "wheel_3.12_cpu_windows": "wheel-py3_12-cpu",
        "wheel_3.12_cu126_windows": "wheel-py3_12-cuda12_6",
        "wheel_3.12_xpu_windows": "wheel-py3_12-xpu",
        "wheel_3.14t_cpu_windows": "wheel-py3_14t-cpu",
        "wheel_3.14t_cu126_windows": "wheel-py3_14t-cuda12_6",
        "wheel_3.14t_xpu_windows": "wheel-py3_14t-xpu",
        "libtorch_shared-with-deps_cpu_windows": "libtorch-cpu-shared-with-deps-release",
        "libtorch_shared-with-deps_cu130_windows": "libtorch-cuda13_0-shared-with-deps-release",
    }
    assert {b.target_arch for b in c.builds if b.platform == "windows"} == {"x86_64"}
    # A macOS wheel of the same Python and accelerator keeps its 2019 id.
    mac = parse_spec("wheel", "3.12", "cpu", platform="macos")[0]
    assert mac.id == "wheel_3.12_cpu"
    assert mac.label == "wheel-py3_12-cpu"


def test_windows_builds_go_to_windows_machines_only(write_config: WriteConfig) -> None:
    c = _config(write_config, HEAD + LINUX + WINDOWS)
    plan = make_plan(c)
    where = {pb.build.id: pb.machine for pb in plan.builds}
    assert {where[b.id] for b in c.builds if b.platform == "windows"} == {"win"}
    assert {where[b.id] for b in c.builds if b.platform == "linux"} == {"lin"}
    # With no Windows machine, the config says so when it is read.
    with pytest.raises(ConfigError, match=r"the matrix has windows builds but no machine has "
                                          r"platform 'windows'"):
        _config(write_config, HEAD + LINUX)


def test_a_windows_machine_declares_the_accelerators_it_builds(write_config: WriteConfig) -> None:
    cuda_only = WINDOWS.replace('["cpu", "cuda", "xpu"]', '["cpu", "cuda"]')
    with pytest.raises(ConfigError, match=r"no machine can build wheel_3\.12_xpu_windows"):
        make_plan(_config(write_config, HEAD + LINUX + cuda_only))


@pytest.mark.parametrize(("table", "words"), [
    ("[matrix.windows.manywheel]", "manywheel is not a windows package type"),
    ("[matrix.windows.conda]", "conda is not a windows package type"),
])
def test_windows_has_wheels_and_libtorch_only(write_config: WriteConfig, table: str, words: str) -> None:
    text = HEAD + f'\n{table}\npythons = ["3.12"]\ncudas = ["cpu"]\n' + LINUX + WINDOWS
    with pytest.raises(ConfigError, match=words):
        _config(write_config, text)


def test_a_windows_machine_runs_builds_on_the_host(write_config: WriteConfig) -> None:
    with pytest.raises(ConfigError, match="is a Windows machine with executor = \"container\""):
        _config(write_config, HEAD + LINUX + WINDOWS.replace('"local"', '"container"'))


def test_the_windows_recipe_contract_environment(write_config: WriteConfig) -> None:
    c = _config(write_config, HEAD + LINUX + WINDOWS)
    ids = {b.id: b for b in c.builds}
    date = dt.date(2026, 1, 8)
    env = windows.windows_env(c, ids["wheel_3.14t_cu126_windows"], version="1.0.0.dev20260108",
                              date=date, channel="nightly")
    assert {k: env[k] for k in (
        "PACKAGE_TYPE", "DESIRED_PYTHON", "DESIRED_CUDA", "CUDA_VERSION", "ACCELERATOR",
        "TARGET_ARCH", "NIGHTLY_LABEL", "NIGHTLY_PYTHON_ABI", "NIGHTLY_FREE_THREADED",
        "BUILD_VERSION", "PACKAGE_VERSION", "NIGHTLY_PLATFORM", "NIGHTLY_WHEEL_PLATFORM",
        "NIGHTLY_RECIPE", "NIGHTLY_DATE", "CHANNEL")} == {
        "PACKAGE_TYPE": "wheel", "DESIRED_PYTHON": "3.14t", "DESIRED_CUDA": "cu126",
        "CUDA_VERSION": "12.6", "ACCELERATOR": "cuda", "TARGET_ARCH": "x86_64",
        "NIGHTLY_LABEL": "wheel-py3_14t-cuda12_6", "NIGHTLY_PYTHON_ABI": "cp314t",
        "NIGHTLY_FREE_THREADED": "1", "BUILD_VERSION": "1.0.0.dev20260108",
        "PACKAGE_VERSION": "1.0.0.dev20260108+cu126", "NIGHTLY_PLATFORM": "windows",
        "NIGHTLY_WHEEL_PLATFORM": "win_amd64", "NIGHTLY_RECIPE": "wheel/build_windows.py",
        "NIGHTLY_DATE": "2026_01_08", "CHANNEL": "nightly"}
    assert "NIGHTLY_LIBTORCH_ZIP" not in env
    lt = windows.windows_env(c, ids["libtorch_shared-with-deps_cu130_windows"],
                             version="1.0.0.dev20260108", date=date, channel="nightly")
    assert lt["NIGHTLY_LIBTORCH_ZIP"] == "libtorch-win-shared-with-deps-1.0.0.dev20260108+cu130.zip"
    assert lt["NIGHTLY_LIBTORCH_CONFIG"] == "release"
    assert lt["LIBTORCH_VARIANT"] == "shared-with-deps"
    assert lt["NIGHTLY_RECIPE"] == "libtorch/build_windows.py"
    assert "NIGHTLY_WHEEL_PLATFORM" not in lt
    with pytest.raises(ValueError, match="not a Windows build"):
        windows.windows_env(c, ids["manywheel_3.12_cpu"], version="1", date=date,
                            channel="nightly")


def test_a_windows_build_is_refused_on_any_other_host() -> None:
    builds = parse_spec("wheel", "3.12,3.13", "cpu", platform="windows")
    with pytest.raises(UsageError) as e:
        windows.refuse_here(builds, host="linux")
    line = str(e.value)
    assert "\n" not in line
    assert line.startswith("wheel_3.12_cpu_windows (wheel-py3_12-cpu) is a Windows build "
                           "(and 1 more Windows builds): it runs only on a platform = "
                           "\"windows\" machine")
    assert "this host is linux" in line
    windows.refuse_here(builds, host="win32")  # where it can run: no refusal
    windows.refuse_here(parse_spec("wheel", "3.12", "cpu", platform="macos"), host="linux")


def test_nightly_build_of_a_windows_wheel_here_is_one_line_exit_2(
    write_config: WriteConfig, nightly: RunCli, tmp_path: Path
) -> None:
    path = write_config(HEAD + LINUX + WINDOWS)
    r: CliResult = nightly("build", "wheel", "3.12", "cu126", "--platform", "windows",
                           "--config", str(path))
    assert r.code == 2, (r.out, r.err)
    lines = [line for line in r.err.splitlines() if line.strip()]
    assert len(lines) == 1, r.err
    assert "wheel_3.12_cu126_windows (wheel-py3_12-cuda12_6) is a Windows build" in lines[0]
    assert "Traceback" not in r.err
    assert not (tmp_path / "nightlies").exists()  # nothing of the night was created
    # Without --platform a wheel on Linux is still the usual spelling error.
    r = nightly("build", "wheel", "3.12", "cpu", "--config", str(path))
    assert r.code == 2
    assert "wheel builds are macOS and Windows builds" in r.err


# ---------------------------------------------------------------------------- free-threaded


def test_a_free_threaded_build_names_what_the_host_lacks(write_config: WriteConfig, tmp_path: Path) -> None:
    c = _config(write_config, HEAD + LINUX + WINDOWS)
    build = Build(package="manywheel", python="3.14t", cuda="cpu")
    empty = tmp_path / "empty"
    empty.mkdir()
    why = freethreaded.missing_interpreter(c, build, "local", {"PATH": str(empty)})
    if os.access("/opt/python/cp314-cp314t/bin/python", os.X_OK):
        pytest.skip("this host has a manylinux cp314t interpreter")
    assert why.startswith("manywheel_3.14t_cpu needs a free-threaded CPython 3.14 (python3.14t), "
                          "and this host has none")
    assert "[executor.local.pythons]" in why
    assert "\n" not in why
    # A python3.14t on PATH is enough; a regular build never asks.
    (tmp_path / "python3.14t").write_text("#!/bin/sh\n")
    (tmp_path / "python3.14t").chmod(0o755)
    assert freethreaded.missing_interpreter(c, build, "local", {"PATH": str(tmp_path)}) == ""
    plain = Build(package="manywheel", python="3.14", cuda="cpu")
    assert freethreaded.missing_interpreter(c, plain, "local", {"PATH": str(empty)}) == ""
    with pytest.raises(UsageError, match=r"needs a free-threaded CPython 3\.14"):
        freethreaded.refuse_missing(c, [build], {}, {"PATH": str(empty)})
    # Beside a build that can run, it is left to fail alone: the other one still builds.
    freethreaded.refuse_missing(c, [plain, build], {}, {"PATH": str(empty)})


def test_a_declared_builder_has_no_free_threaded_interpreter(write_config: WriteConfig) -> None:
    text = HEAD.replace('pythons = ["3.12"]\ncudas = ["cpu"]',
                        'pythons = ["3.12", "3.14t"]\ncudas = ["cpu"]', 1) + """
[images]
default = "@b"

[builders.b]
repository = "nightly-b"
suite = "bookworm"
cudas = ["cpu"]

[builders.b.pythons]
"3.11" = "distro"
""" + LINUX + WINDOWS
    c = _config(write_config, text)
    build = next(b for b in c.builds if b.id == "manywheel_3.14t_cpu")
    why = freethreaded.missing_interpreter(c, build, "container")
    assert why.startswith("manywheel_3.14t_cpu needs a free-threaded CPython 3.14 (python3.14t),"
                          " and the builder image @b has none")
    assert "/opt/python/cp314-cp314t" in why
    # A site's own image (not one nightly declares) may have one: not refused.
    own = _config(write_config, text.replace('default = "@b"', 'default = "site/img:1"'))
    assert freethreaded.missing_interpreter(own, build, "container") == ""


def test_nightly_build_of_3_14t_here_is_one_line_exit_2(
    write_config: WriteConfig, nightly: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    if os.access("/opt/python/cp314-cp314t/bin/python", os.X_OK):
        pytest.skip("this host has a manylinux cp314t interpreter")
    text = HEAD.replace('pythons = ["3.12"]\ncudas = ["cpu"]',
                        'pythons = ["3.12", "3.14t"]\ncudas = ["cpu"]', 1) + LINUX + WINDOWS
    path = write_config(text)
    monkeypatch.setenv("PATH", "/nonexistent")  # no python3.14t to be found
    r: CliResult = nightly("build", "manywheel", "3.14t", "cpu", "--config", str(path))
    assert r.code == 2, (r.out, r.err)
    lines = [line for line in r.err.splitlines() if line.strip()]
    assert len(lines) == 1, r.err
    assert "manywheel_3.14t_cpu needs a free-threaded CPython 3.14 (python3.14t)" in lines[0]


def test_a_recipe_folder_needs_no_linux_recipe_for_windows_builds(
    write_config: WriteConfig, nightly: RunCli, tmp_path: Path
) -> None:
    recipes = tmp_path / "own-recipes"
    (recipes / "manywheel").mkdir(parents=True)
    (recipes / "manywheel" / "build.sh").write_text("#!/bin/sh\n")
    path = write_config(f'recipes = "{recipes}"\n' + HEAD + LINUX + WINDOWS)
    r: CliResult = nightly("plan", "--config", str(path))
    assert r.code == 0, r.err
    assert "wheel_3.14t_cu126_windows" in r.out
    # A Linux libtorch build still needs its build.sh.
    path = write_config(f'recipes = "{recipes}"\n' + HEAD + LINUX + WINDOWS + """
[matrix.linux.libtorch]
variants = ["shared-with-deps"]
cudas = ["cpu"]
""", name="with-linux-libtorch.toml")
    r = nightly("plan", "--config", str(path))
    assert r.code == 2
    assert "has no recipe for libtorch" in r.err
