"""zig as the C/C++ toolchain (`toolchain = "zig"`), for real: the ziglang wheel from PyPI in
nightly's cache for a host build of the demo's C extension, and a builder image with zig in
which mapbox-earcut (C++, pybind11, scikit-build-core / CMake) is built by a night; each
wheel manylinux_2_17 or older by its tag and by auditwheel, installed on the host and working
(earcut: its own tests).

Cold, zig is downloaded once (~100 MB) and builds its glibc stubs, compiler-rt and libc++ once
per cache (a few minutes on a loaded 2-core machine); the image is built once per spec.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from nightly.core.spec import ZIG_VERSION
from tests.integration import corpus
from tests.integration import recipe_env as renv
from tests.integration.test_corpus import policy_tags, run_night
from tests.support.cli import nightly_cmd
from tests.support.engine import Engine

# Two independent nights (zig's cache and images are nightly's, locked): they may run on both
# xdist workers (tests/support/schedule.py's SPREAD).
# pyproject's 900 s is for a hang; a cold builder image, zig's libc++ or a C++ night on a
# loaded 2-core machine took longer (two mapbox-earcut tests stopped at 900 s on one):
# the nights' own subprocess timeouts (1800-3600 s) bound them.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]


def _python(xy: str) -> Path:
    python = renv.pyenv_python(xy)
    assert python is not None, f"no Python {xy} on this machine (pyenv provides 3.10-3.13 here)"
    return python


def test_a_host_build_with_zig_reaches_manylinux_2_5(tmp_path: Path) -> None:
    text = (REPO / "nightly.toml").read_text()
    assert '\nmanylinux = "2_28"\n' in text
    # The manywheel's policy (the first); the libtorch matrix has one too, and no toolchain key.
    text = text.replace('\nmanylinux = "2_28"\n', '\nmanylinux = "2_28"\ntoolchain = "zig"\n', 1)
    text = text.replace('root = "nightlies"', f'root = "{tmp_path}/nightlies"')
    text = text.replace('source = "examples/demo"', f'source = "{REPO}/examples/demo"')
    config = tmp_path / "nightly.toml"
    config.write_text(f'recipes = "{REPO}/recipes"\n' + text)
    proc = subprocess.run([*nightly_cmd(), "build", "manywheel", "3.12", "cpu", "--config",
                           str(config), "--no-upload", "--date", "2026_03_01"],
                          capture_output=True, text=True, timeout=1800)
    day = tmp_path / "nightlies" / "2026_03_01"
    assert proc.returncode == 0, (proc.stdout[-2000:], "\n".join(
        p.read_text()[-4000:] for p in day.glob("logs/failed/*.log")))
    log = (day / "logs" / "succeeded" / "manywheel_3.12_cpu.log").read_text()
    assert f"[nightly] toolchain zig {ZIG_VERSION} (x86_64-linux-gnu.2.17)" in log
    assert "--plat manylinux_2_28_x86_64" in log
    (wheel,) = (day / "packages" / "manywheel" / "cpu").glob("*.whl")
    tag, verdict = policy_tags([wheel])[wheel.name]
    # A C extension links only GLIBC_2.2.5 symbols: the oldest tag there is.
    assert verdict == "manylinux_2_5_x86_64", verdict
    assert "manylinux_2_5_x86_64" in tag.split(".")
    entry = json.loads((day / "state.json").read_text())["builds"]["manywheel_3.12_cpu"]
    assert entry["manylinux"]["glibc"] == "2.5"
    venv = tmp_path / "venv"
    subprocess.run([str(_python("3.12")), "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-index", "--no-deps",
                    str(wheel)], check=True)
    out = subprocess.run([str(venv / "bin" / "python"), "-c",
                          "import nightlydemo; print(nightlydemo.add(2, 40))"],
                         cwd="/", capture_output=True, text=True, check=True).stdout
    assert out.strip() == "42"


@pytest.mark.engine
def test_a_zig_builder_image_builds_a_cmake_cpp_project_for_manylinux_2_17(
    engine: Engine, tmp_path: Path
) -> None:
    project = corpus.BY_KEY["mapbox-earcut"]
    corpus.unpack(project)
    text = corpus.container_config(project)
    old = 'manylinux = "2_28"\n'
    assert old in text
    text = text.replace(old, old + 'toolchain = "zig"\n')
    text = text.replace('pythons = ["3.10", "3.11", "3.12", "3.13"]', 'pythons = ["3.12"]')
    config = tmp_path / "zig.toml"
    config.write_text(text)
    env = engine.env()
    listed = subprocess.run([*nightly_cmd(), "images", "list", "--config", str(config), "--json"],
                            env=env, capture_output=True, text=True, check=True)
    # The builder's image, and the runtime image its wheels are tested in (no toolchain).
    rows = {r["role"]: r for r in json.loads(listed.stdout)}
    assert sorted(rows) == ["builder", "runtime"]
    row = rows["builder"]
    assert row["manylinux"] == "manylinux_2_17_x86_64"
    assert f"zig {ZIG_VERSION} cc -target x86_64-linux-gnu.2.17" in row["toolchain"]
    built = subprocess.run([*nightly_cmd(), "images", "build", "--config", str(config)],
                           env=env, capture_output=True, text=True, timeout=3600)
    assert built.returncode == 0, built.stderr[-4000:]
    run_night(project, tmp_path / "night", config, env=env)
    here = tmp_path / "night" / "configs" / "corpus"
    (wheel,) = (here / "mirror").glob("whl/nightly/cpu/**/*.whl")
    _, verdict = policy_tags([wheel])[wheel.name]
    assert verdict == "manylinux_2_17_x86_64", verdict  # libc++ linked in, nothing newer
    index = (here / "mirror" / "whl" / "nightly" / "cpu").as_uri() + "/"
    run = corpus.run_own_tests(project, _python("3.12"), index, tmp_path / "test")
    assert run.failed == run.errors == 0, run.output[-6000:]
    assert run.passed > 0, run.output[-3000:]
