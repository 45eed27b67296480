"""Reproducible packages for real: the demo's manywheel (cpu and CUDA, with the host's nvcc),
conda and libtorch packages built twice from one source, in two root folders (so every work
path differs), under two umasks, one after the other (so every clock differs), with the
local executor and in containers (Podman): the same sha256 each. And `--check-reproducible`
catching a project that writes the time into its wheel, with diffoscope naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.engine import Engine

REPO = Path(__file__).resolve().parents[2]
NIGHTLY = REPO / ".venv" / "bin" / "nightly"
HOST_CUDA = Path("/usr/local/cuda-13.0")
RunCli = Callable[..., tuple[int, str, str]]

MATRIX = """
[matrix.linux.manywheel]
pythons = ["3.11"]
cudas = ["cpu", "13.0"]

[matrix.linux.conda]
pythons = ["3.11"]
cudas = ["cpu"]

[matrix.linux.libtorch]
variants = ["shared-with-deps", "static-without-deps"]
python = "3.11"
cudas = ["cpu"]
"""


def config_text(src: Path, *, executor: str, extra: str = "", matrix: str = MATRIX) -> str:
    return f"""
root = "nightlies"
recipes = "{REPO / 'recipes'}"

[project]
name = "nightlydemo"
source = "{src}"
base_version = "0.1.0"

{matrix}

[smoke]
import_name = "nightlydemo"
cuda_check = "import nightlydemo, sys; sys.exit(0 if nightlydemo.built_with_cuda() else 'no CUDA')"
libtorch_program = "smoke/main.cpp"
libtorch_libs = ["demo"]

[timeouts]
default = "20m"

[[machines]]
name = "m"
platform = "linux"
queues = 2
executor = "{executor}"

{extra}
"""


def night(config: Path, root: Path, umask: int, env: dict[str, str] | None = None) -> Path:
    """`nightly run` into `root` under `umask`; the day folder (asserting success)."""
    proc = subprocess.run(
        [str(NIGHTLY), "run", "--config", str(config), "--root", str(root), "--date", "2024_05_01",
         "--no-upload"],
        cwd=config.parent, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=1800, check=False,
        preexec_fn=lambda: os.umask(umask),
    )
    day = root / "2024_05_01"
    logs = "".join(p.read_text()[-3000:] for p in (day / "logs" / "failed").glob("*.log")) \
        if day.exists() else ""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + logs
    return day


def package_hashes(day: Path) -> dict[str, str]:
    """Every package of the day: its path under packages/ -> sha256."""
    builds = json.loads((day / "summary.json").read_text())["builds"]
    out = {}
    for b in builds.values():
        for pkg in b["packages"]:
            data = (day / pkg["path"]).read_bytes()
            out[pkg["path"]] = hashlib.sha256(data).hexdigest()
    return out


def check_twice(tmp_path: Path, config: Path, kinds: set[str],
                env: dict[str, str] | None = None) -> None:
    first = package_hashes(night(config, tmp_path / "one", 0o022, env))
    second = package_hashes(night(config, tmp_path / "second-root-elsewhere", 0o077, env))
    assert {p.split("/")[1] + "/" + p.split("/")[2] for p in first} == kinds, first
    assert len(first) == len(kinds) + 1, first  # two libtorch variants
    assert first == second


@pytest.mark.slow
def test_demo_packages_built_twice_are_identical_local(tmp_path: Path) -> None:
    src = tmp_path / "demo"
    shutil.copytree(REPO / "examples" / "demo", src)
    config = tmp_path / "nightly.toml"
    config.write_text(config_text(src, executor="local", extra=f"""
[executor.local.cuda]
"cu130" = "{HOST_CUDA}"
"""))
    check_twice(tmp_path, config, {"manywheel/cpu", "manywheel/cu130", "conda/cpu", "libtorch/cpu"})


@pytest.mark.slow
def test_demo_packages_built_twice_are_identical_in_containers(
    tmp_path: Path, engine: Engine
) -> None:
    src = tmp_path / "demo"
    shutil.copytree(REPO / "examples" / "demo", src)
    config = tmp_path / "nightly.toml"
    # The builder image has no rattler-build: no conda package in containers.
    matrix = MATRIX.replace('[matrix.linux.conda]\npythons = ["3.11"]\ncudas = ["cpu"]\n', "")
    assert "conda" not in matrix
    config.write_text(config_text(src, executor="container", matrix=matrix, extra=f"""
[images]
default = "{engine.image}"

[executor.container]
base_url = "{engine.base_url}"
cuda_mounts = {{ "cu130" = "{HOST_CUDA}" }}
"""))
    check_twice(tmp_path, config, {"manywheel/cpu", "manywheel/cu130", "libtorch/cpu"},
                {"DOCKER_HOST": engine.base_url})


@pytest.mark.slow
def test_check_reproducible_names_the_file_that_carries_the_time(
    tmp_path: Path, run_cli: RunCli
) -> None:
    src = tmp_path / "demo"
    shutil.copytree(REPO / "examples" / "demo", src)
    setup = src / "setup.py"
    text = setup.read_text()
    hook = "        build_py.run(self)\n"
    assert hook in text
    setup.write_text(text.replace(hook, hook + (
        '        with open(os.path.join(self.build_lib, "nightlydemo", "build_stamp.txt"), "w") as f:\n'
        '            f.write(repr(__import__("time").time()))\n'), 1))
    config = tmp_path / "nightly.toml"
    config.write_text(config_text(src, executor="local", matrix="""
[matrix.linux.manywheel]
pythons = ["3.11"]
cudas = ["cpu"]
"""))
    args = ["build", "manywheel", "3.11", "cpu", "--config", str(config), "--date", "2024_05_01",
            "--no-upload"]
    code, out, err = run_cli(args, cwd=tmp_path, timeout=900)
    assert code == 0, out + err  # without the check the build succeeds
    code, out, err = run_cli([*args, "--check-reproducible"], cwd=tmp_path, timeout=900)
    assert code == 1, out + err
    day = tmp_path / "nightlies" / "2024_05_01"
    log = (day / "logs" / "failed" / "manywheel_3.11_cpu.log").read_text()
    assert "reason:      not reproducible: nightlydemo-0.1.0.dev20240501-cp311-cp311-" in log
    assert "reproducibility check: second build in" in log
    assert "umask 0077" in log
    (report,) = (day / "logs").glob("manywheel_3.11_cpu.*.diffoscope.txt")
    full = report.read_text()
    assert "├── nightlydemo/build_stamp.txt" in full
    # The log holds the report truncated, naming the file that differs.
    after = log.split("reproducibility check: nightlydemo-", 1)[1]
    assert "nightlydemo/build_stamp.txt" in after
    assert len(after.splitlines()) < len(full.splitlines()) + 20
    # The untouched demo passes the same check (another day: a day keeps its source).
    shutil.rmtree(src)
    shutil.copytree(REPO / "examples" / "demo", src)
    args[args.index("2024_05_01")] = "2024_05_02"
    code, out, err = run_cli([*args, "--check-reproducible"], cwd=tmp_path, timeout=900)
    assert code == 0, out + err
    day = tmp_path / "nightlies" / "2024_05_02"
    log = (day / "logs" / "succeeded" / "manywheel_3.11_cpu.log").read_text()
    assert ": identical (sha256 " in log
