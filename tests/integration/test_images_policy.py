"""A builder declared with `base_image` and `manylinux = "2_28"`, for real on the Podman
engine: the base is a locally made image standing in for a registry's (no registry is
reachable here), nightly adds its layers (an interpreter, auditwheel, the glibc 2.31 sysroot
toolchain) on top, `nightly images list` states the policy and what the toolchain guarantees,
and the demo's manywheel built in the image meets the policy and imports on the host.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.integration import recipe_env as renv
from tests.support.engine import Engine

pytestmark = [pytest.mark.engine, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
NIGHTLY = REPO / ".venv" / "bin" / "nightly"
# The stand-in for e.g. quay.io/pypa/manylinux_2_28_x86_64: the test suite's bookworm image
# under another name (an image this test makes; nightly must never build or pull it).
STAND_IN = "localhost/stand-in/manylinux-like:bookworm-1"


def nightly(*args: str, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    cmd = [str(NIGHTLY)] if NIGHTLY.exists() else [sys.executable, "-m", "nightly"]
    return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def _stand_in(engine: Engine) -> None:
    from docker.errors import ImageNotFound

    try:
        engine.client.images.get(STAND_IN)
        return
    except ImageNotFound:
        pass
    dockerfile = f"FROM {engine.image}\nLABEL org.example.stand-in=manylinux\n".encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
    buf.seek(0)
    for _ in engine.client.api.build(fileobj=buf, custom_context=True, tag=STAND_IN,
                                     pull=False, rm=True, decode=True):
        pass
    engine.client.images.get(STAND_IN)


def _config(tmp: Path) -> Path:
    config = tmp / "nightly.toml"
    config.write_text(f"""
root = "{tmp}/nightlies"
recipes = "{REPO}/recipes"

[project]
name = "nightlydemo"
source = "{REPO}/examples/demo"
base_version = "0.1.0"

[matrix.linux.manywheel]
pythons = ["3.11"]
cudas = ["cpu"]

[images]
default = "@standin"

[builders.standin]
repository = "nightly-standin-policy"
base_image = "{STAND_IN}"
manylinux = "2_28"
pythons = {{ "3.11" = "distro" }}

[smoke]
import_name = "nightlydemo"

[publish]
url = "{tmp}/mirror"

[[machines]]
name = "local"
platform = "linux"
queues = 1
executor = "container"
""")
    return config


def test_a_policy_builder_on_an_existing_base_image_makes_manylinux_2_28_wheels(
    engine: Engine, tmp_path: Path
) -> None:
    _stand_in(engine)
    config = _config(tmp_path)
    env = engine.env()
    built = nightly("images", "build", "--config", str(config), env=env)
    assert built.returncode == 0, built.stderr[-3000:]
    assert "debootstrap" not in built.stderr  # the base is the given image
    listed = nightly("images", "list", "--config", str(config), "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert row["present"] is True
    assert row["policy"] == "2_28"
    assert row["manylinux"] == "manylinux_2_31_x86_64"  # the sysroot's glibc: the ceiling
    assert "glibc 2.31 sysroot" in row["toolchain"]
    image = engine.client.images.get(row["tag"])
    assert image.labels["org.nightly.manylinux-policy"] == "2_28"

    run = nightly("run", "--config", str(config), "--date", "2026_01_06", env=env)
    day = tmp_path / "nightlies" / "2026_01_06"
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-2000:], "\n".join(
        p.read_text()[-4000:] for p in day.glob("logs/failed/*.log")))
    entry = json.loads((day / "state.json").read_text())["builds"]["manywheel_3.11_cpu"]
    assert entry["manylinux"]["policy"] == "2_28"
    glibc = tuple(int(x) for x in entry["manylinux"]["glibc"].split("."))
    assert glibc <= (2, 28)
    (wheel,) = (tmp_path / "mirror").rglob("*.whl")
    assert "manylinux_2_28_x86_64" in wheel.name
    log = (day / "logs" / "succeeded" / "manywheel_3.11_cpu.log").read_text()
    assert "--plat manylinux_2_28_x86_64" in log
    # No clean minbase under an existing image: tested in the builder image, said once.
    assert log.count("smoke: WARNING: builder standin builds on base_image") == 1
    assert "[builders.standin] runtime_image" in log
    # auditwheel's own verdict, and the wheel works where a user installs it.
    shown = subprocess.run([str(REPO / ".venv" / "bin" / "auditwheel"), "show", str(wheel)],
                           capture_output=True, text=True, check=True).stdout
    assert "manylinux_2_" in shown
    with zipfile.ZipFile(wheel) as zf:
        assert any(n.startswith("nightlydemo/_native") for n in zf.namelist())
    venv = tmp_path / "venv"
    python = renv.pyenv_python("3.11")
    assert python is not None, "no Python 3.11 on this machine"
    subprocess.run([str(python), "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", str(wheel)],
                   check=True)
    out = subprocess.run([str(venv / "bin" / "python"), "-c",
                          "import nightlydemo; print(nightlydemo.add(2, 40))"],
                         cwd="/", capture_output=True, text=True, check=True).stdout
    assert out.strip() == "42"
