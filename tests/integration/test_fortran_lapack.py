"""A Fortran + LAPACK extension from `nightly init` alone to a published, portable wheel
(issue 57), for real on the Podman engine.

tests/data/flsolve is a scikit-build-core + CMake project (`project(... C Fortran)`,
`find_package(LAPACK)`): a C module whose `solve(a, b)` calls a Fortran subroutine that
calls LAPACK's dgesv. The test copies it, runs `nightly init` (nothing edited after), builds
the images init declared (a Debian bullseye builder with gfortran and LAPACK, and its runtime
image), runs the night, and checks:

  - the night exits 0 and the wheel is tagged manylinux_2_31 (the declared policy),
    bundling libgfortran, libquadmath, LAPACK and BLAS (auditwheel); its state records the
    toolchain "image" (the builder's own compilers), which `nightly status` shows;
  - in the runtime image, which has no gfortran, no libgfortran and no LAPACK, the wheel
    installs into a fresh venv and `solve` returns dgesv's answer.

Cost: one Python (bullseye's 3.9). The images are tagged by their spec's hash, the same for
every run of this test, so a machine that built them before only runs the night (about
1 min on the 2-core machine); cold, `nightly images build` adds about 6 min (two bullseye
debootstraps: the builder's base and the runtime base).
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from nightly.config import load
from nightly.images import runtime
from tests.support.cli import run_nightly
from tests.support.engine import Engine

# A cold `nightly images build` takes longer than the suite's 15 min on a loaded machine.
pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(2400)]

REPO = Path(__file__).resolve().parents[2]
PROJECT = REPO / "tests" / "data" / "flsolve"
DATE = "2026_01_09"
BUILD = "manywheel_3.9_cpu"

# In the runtime image: no Fortran compiler or runtime, no LAPACK; then the wheel in a venv.
CHECK = r"""
set -e
command -v gfortran && { echo "gfortran is here"; exit 3; }
if ldconfig -p | grep -E 'libgfortran|liblapack|libblas'; then echo "system libraries"; exit 3; fi
python3 -m venv /tmp/v
/tmp/v/bin/python -m pip install -q --no-index /wheels/*.whl
cd /tmp
/tmp/v/bin/python -c '
import flsolve
x = flsolve.solve([[2.0, 1.0], [1.0, 3.0]], [3.0, 5.0])
assert abs(x[0] - 0.8) < 1e-12 and abs(x[1] - 1.4) < 1e-12, x
print("dgesv", x)
'
"""


def test_a_fortran_lapack_project_goes_from_init_to_a_portable_wheel(
    engine: Engine, tmp_path: Path
) -> None:
    env = engine.env()
    src = tmp_path / "flsolve"
    shutil.copytree(PROJECT, src)
    config = tmp_path / "nightly.toml"
    code, out, err = run_nightly(["init", str(src), "--config", str(config)], env=env)
    assert code == 0, err
    assert "manylinux policy 2_31" in out
    spec = load(config).builders["flsolve"]

    code, out, err = run_nightly(["images", "build", "--config", str(config)], env=env,
                                 timeout=3600)
    assert code == 0, err[-4000:]

    code, out, err = run_nightly(["run", "--config", str(config), "--date", DATE], env=env,
                                 cwd=tmp_path, timeout=1800)
    day = tmp_path / "nightlies" / DATE
    log = next(day.glob(f"logs/*/{BUILD}.log"))
    assert code == 0, log.read_text()[-4000:]
    text = log.read_text()
    assert "Building Fortran object" in text  # gfortran compiled it, in the builder
    assert "compiles not cached (Fortran: sccache caches no Fortran compiles)" in text
    (wheel,) = (tmp_path / "mirror").rglob("*.whl")
    assert wheel.name.endswith("-cp39-cp39-manylinux_2_31_x86_64.whl"), wheel.name
    # What compiled it is recorded: the builder image's own gcc and gfortran (no sysroot).
    record = json.loads((day / "state.json").read_text())["builds"][BUILD]["manylinux"]
    assert (record["policy"], record["toolchain"]) == ("2_31", "image"), record
    code, out, err = run_nightly(["status", "--config", str(config), "--date", DATE],
                                 env={**env, "COLUMNS": "250"}, cwd=tmp_path)  # no cell folded
    assert "policy 2_31: manylinux_2_31, toolchain image" in out, out
    libs = {n.split("/")[1].split("-")[0] for n in zipfile.ZipFile(wheel).namelist()
            if n.startswith("flsolve.libs/")}
    assert {"libgfortran", "libquadmath", "liblapack", "libblas"} <= libs, libs

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    shutil.copy(wheel, wheels)
    said = engine.client.containers.run(
        runtime.tag(spec), ["bash", "-c", CHECK], remove=True,
        volumes={str(wheels): {"bind": "/wheels", "mode": "ro"}})
    assert bytes(said).decode().strip().startswith("dgesv [0.8"), said  # within 1e-12: above
