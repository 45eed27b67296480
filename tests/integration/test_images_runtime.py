"""Wheels are tested in the builder's runtime image, for real on the Podman engine.

A declared builder whose `packages` have libyaml-dev (so its image has libyaml-0.so.2; a
minbase with python3 has not) builds a small C extension that links libyaml:

  bundled    the manywheel recipe as shipped: auditwheel copies libyaml into the wheel, the
             wheel passes its test in the runtime image and is published;
  unbundled  the recipe's repair told to exclude libyaml (a project's mistake): the test in the
             runtime image fails with the loader's message, the build fails, nothing is
             published;
  override   the same unbundled wheel with `[smoke] image` = the builder image: it passes
             there (the builder has the library, which is why tests no longer run there by
             default), and the log names the image it ran in.

The builder and runtime images are tagged by their spec's hash and nightly caches what they
are made of, so on a machine that built them before this is three small nights (5.5 min on
the 2-core machine at load average 12); cold it adds `nightly images build` (7.5 min there:
two debootstraps, the builder's base and the suite's runtime base, which every bookworm
builder shares, so after test_images.py only the first).
"""

from __future__ import annotations

import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest

from nightly.config import load
from nightly.images import runtime
from tests.support.cli import run_nightly
from tests.support.engine import Engine

pytestmark = [pytest.mark.engine, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
DATE = "2026_01_07"
BUILD = "manywheel_3.11_cpu"
LIBYAML = "libyaml-0.so.2"

SETUP = """
import os
from setuptools import Extension, setup

setup(name="yamlwheel", version=os.environ["BUILD_VERSION"],
      ext_modules=[Extension("yamlwheel", ["yamlwheel.c"], libraries=["yaml"])])
"""

SOURCE = r"""
#include <Python.h>
#include <yaml.h>
static PyObject *libyaml_version(PyObject *self, PyObject *args) {
    return PyUnicode_FromString(yaml_get_version_string());
}
static PyMethodDef methods[] = {
    {"libyaml_version", libyaml_version, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "yamlwheel", NULL, -1, methods};
PyMODINIT_FUNC PyInit_yamlwheel(void) { return PyModule_Create(&mod); }
"""

# The shipped recipe's repair, and the same told not to bundle libyaml.
REPAIR = 'repair=(auditwheel repair -w "$WORK_DIR/wheelhouse")'
UNBUNDLED = f'repair=(auditwheel repair -w "$WORK_DIR/wheelhouse" --exclude {LIBYAML})'


def _project(tmp: Path) -> Path:
    src = tmp / "src"
    src.mkdir()
    (src / "setup.py").write_text(SETUP)
    (src / "yamlwheel.c").write_text(SOURCE)
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n')
    return src


def _recipes(tmp: Path, *, bundle: bool) -> Path:
    if bundle:
        return REPO / "recipes"
    recipes = tmp / "recipes"
    shutil.copytree(REPO / "recipes", recipes)
    script = recipes / "manywheel" / "build.sh"
    text = script.read_text()
    assert REPAIR in text  # the line this test changes is still the recipe's
    script.write_text(text.replace(REPAIR, UNBUNDLED))
    return recipes


def _config(tmp: Path, *, bundle: bool, smoke_image: str = "") -> Path:
    tmp.mkdir()
    src, recipes = _project(tmp), _recipes(tmp, bundle=bundle)
    config = tmp / "nightly.toml"
    config.write_text(f"""
root = "{tmp}/nightlies"
recipes = "{recipes}"

[project]
name = "yamlwheel"
source = "{src}"
base_version = "1.0.0"

[matrix.linux.manywheel]
pythons = ["3.11"]
cudas = ["cpu"]

[images]
default = "@yaml"

[builders.yaml]
repository = "nightly-runtime-test"
packages = ["libyaml-dev", "python3-dev"]
manylinux = "2_28"
pythons = {{ "3.11" = "distro" }}

[smoke]
import_name = "yamlwheel"
command = "$PYTHON -c 'import yamlwheel; print(\\"libyaml\\", yamlwheel.libyaml_version())'"
image = "{smoke_image}"

[publish]
url = "{tmp}/mirror"

[[machines]]
name = "local"
platform = "linux"
queues = 1
executor = "container"
""")
    return config


def _night(config: Path, env: dict[str, str]) -> tuple[int, dict[str, object], str]:
    """Run the night; (exit code, the build's state entry, its log)."""
    code, _, _ = run_nightly(["run", "--config", str(config), "--date", DATE], env=env,
                             timeout=1800)
    day = config.parent / "nightlies" / DATE
    entry = json.loads((day / "state.json").read_text())["builds"][BUILD]
    (log,) = day.glob(f"logs/*/{BUILD}.log")
    return code, entry, log.read_text()


def test_a_wheel_that_does_not_bundle_its_library_fails_its_test_in_the_runtime_image(
    engine: Engine, tmp_path: Path
) -> None:
    env = engine.env()
    bundled = _config(tmp_path / "bundled", bundle=True)
    spec = load(bundled).builders["yaml"]
    builder, tested_in = spec.tag_for("cpu"), runtime.tag(spec)
    code, out, err = run_nightly(["images", "build", "--config", str(bundled)], env=env,
                                 timeout=3600)
    assert code == 0, err[-4000:]
    assert out.split() == [builder, tested_in]
    listed = run_nightly(["images", "list", "--config", str(bundled), "--json"], env=env)[1]
    rows = {r["tag"]: r for r in json.loads(listed)}
    assert rows[tested_in]["role"] == "runtime"
    assert rows[tested_in]["present"]
    assert rows[tested_in]["size"] < rows[builder]["size"]

    # What the runtime image is: the builder's interpreter, none of its libraries or compilers.
    def run_in(image: str, script: str) -> str:
        return bytes(engine.client.containers.run(image, ["bash", "-c", script], remove=True)
                     ).decode()
    probe = ("/opt/python/cp311-cp311/bin/python -c 'import sys; print(sys.version_info[:2])'; "
             f"ldconfig -p | grep -c {LIBYAML} || true; command -v gcc || echo no-gcc")
    assert run_in(tested_in, probe).split() == ["(3,", "11)", "0", "no-gcc"]
    in_builder = run_in(builder, probe).split()
    assert in_builder[2] == "1", in_builder
    assert in_builder[3] != "no-gcc", in_builder

    # Bundled by auditwheel (the recipe as shipped): passes in the runtime image, published.
    code, entry, log = _night(bundled, env)
    assert code == 0, log[-4000:]
    smoke = log.split("-" * 30 + " smoke test ")[1]
    assert f"smoke: in image {tested_in}, the runtime image of builder yaml" in smoke
    assert re.search(r"^libyaml \d+\.\d+", smoke, re.M), smoke
    (wheel,) = (tmp_path / "bundled" / "mirror").rglob("*.whl")
    assert any(n.startswith("yamlwheel.libs/libyaml-") for n in zipfile.ZipFile(wheel).namelist())

    # Not bundled: the loader cannot find libyaml in the runtime image; the build fails.
    unbundled = _config(tmp_path / "unbundled", bundle=False)
    code, entry, log = _night(unbundled, env)
    assert code == 1, log[-4000:]
    assert entry["status"] == "failed"
    assert f"--exclude {LIBYAML}" in log  # the build itself succeeded ...
    assert f"smoke: in image {tested_in}" in log  # ... its test ran in the runtime image
    assert f"{LIBYAML}: cannot open shared object file" in log
    assert str(entry["reason"]).startswith("smoke test:")
    assert LIBYAML in str(entry["reason"])
    assert (tmp_path / "unbundled" / "nightlies" / DATE / "logs" / "failed" / f"{BUILD}.log"
            ).is_file()
    assert not list((tmp_path / "unbundled").glob("mirror/**/*.whl"))

    # [smoke] image overrides: in the builder image the same wheel imports (the library is
    # there), which is what a test there cannot tell apart from a wheel that bundles it.
    override = _config(tmp_path / "override", bundle=False, smoke_image=builder)
    code, entry, log = _night(override, env)
    assert code == 0, log[-4000:]
    assert f"smoke: in image {builder} ([smoke] image)" in log
    assert re.search(r"^libyaml \d+\.\d+", log, re.M), log[-3000:]
