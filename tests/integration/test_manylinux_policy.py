"""The manylinux policy enforced for real: a night of the real manywheel recipe on the host
(the local executor with nightly's glibc 2.31 sysroot toolchain), `manylinux = "2_28"`.

One small setuptools project, three Pythons, three outcomes:
  3.10  a threaded C extension: meets the policy (unversioned pthread symbols through the
        sysroot), repaired, smoke-tested and published;
  3.11  the extension calls gettid(), GLIBC_2.30: newer than the policy;
  3.12  the extension links a library of the project that auditwheel cannot locate (outside
        every policy's allowed libraries, nothing to bundle).
The last two fail their builds with auditwheel's own words in the log, and nothing of them is
filed or published.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

import pytest

from tests.support.fixture_types import RunCli

try:
    from tests.integration import recipe_env as renv
except ImportError:
    import recipe_env as renv  # type: ignore[no-redef,import-not-found]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(platform.system() != "Linux", reason="manywheels are Linux builds"),
]

SETUP = r'''
import os, subprocess, sys
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

MODE = {(3, 10): "ok", (3, 11): "symbol", (3, 12): "library"}[sys.version_info[:2]]
HERE = os.path.dirname(os.path.abspath(__file__))


class BuildExt(build_ext):
    def build_extensions(self):
        if MODE == "library":
            # A library of the project, linked without an RPATH and installed nowhere.
            lib = os.path.join(self.build_temp, "hidden")
            os.makedirs(lib, exist_ok=True)
            with open(os.path.join(lib, "hidden.c"), "w") as f:
                f.write("int hidden_answer(void) { return 42; }\n")
            cc = os.environ.get("CC", "cc").split()
            subprocess.check_call(cc + ["-shared", "-fPIC", "-o", os.path.join(lib, "libhidden.so"),
                                        os.path.join(lib, "hidden.c")])
            for ext in self.extensions:
                ext.library_dirs.append(lib)
                ext.libraries.append("hidden")
                ext.define_macros.append(("USE_HIDDEN", "1"))
        if MODE == "symbol":
            for ext in self.extensions:
                ext.define_macros.append(("USE_GETTID", "1"))
        super().build_extensions()


setup(
    name="policydemo",
    version=os.environ["BUILD_VERSION"],
    ext_modules=[Extension("policydemo", ["policydemo.c"])],
    cmdclass={"build_ext": BuildExt},
)
'''

SOURCE = r'''
#define _GNU_SOURCE
#include <Python.h>
#include <pthread.h>
#include <unistd.h>
#ifdef USE_HIDDEN
int hidden_answer(void);
#endif
static void *work(void *arg) { *(long *)arg += 1; return arg; }
static PyObject *answer(PyObject *self, PyObject *args) {
    long n = 41;
    pthread_t t;
    if (pthread_create(&t, NULL, work, &n) != 0 || pthread_join(t, NULL) != 0) return NULL;
#ifdef USE_GETTID
    n += gettid() > 0 ? 0 : 1;
#endif
#ifdef USE_HIDDEN
    n = hidden_answer();
#endif
    return PyLong_FromLong(n);
}
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "policydemo", NULL, -1, methods};
PyMODINIT_FUNC PyInit_policydemo(void) { return PyModule_Create(&mod); }
'''


def _config(root: Path, pythons: dict[str, Path]) -> Path:
    src = root / "src"
    src.mkdir()
    (src / "setup.py").write_text(SETUP)
    (src / "policydemo.c").write_text(SOURCE)
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n')
    repo = Path(__file__).resolve().parents[2]
    table = "\n".join(f'"{v}" = "{p}"' for v, p in pythons.items())
    config = root / "nightly.toml"
    config.write_text(f"""
root = "nightlies"
recipes = "{repo / 'recipes'}"

[project]
name = "policydemo"
source = "src"
base_version = "1.0.0"

[matrix.linux.manywheel]
pythons = {json.dumps(sorted(pythons))}
cudas = ["cpu"]
manylinux = "2_28"

[executor.local.pythons]
{table}

[cache]
enabled = false

[smoke]
import_name = "policydemo"
command = "$PYTHON -c 'import policydemo, sys; sys.exit(policydemo.answer() != 42)'"

[publish]
url = "mirror"

[[machines]]
name = "local"
platform = "linux"
queues = 1
executor = "local"
""")
    return config


def test_a_wheel_that_cannot_meet_the_policy_fails_its_build_and_is_never_published(
    tmp_path: Path, run_cli: RunCli
) -> None:
    pythons = {}
    for xy in ("3.10", "3.11", "3.12"):
        python = renv.pyenv_python(xy)
        if python is None:
            pytest.fail(f"no Python {xy} on this machine (pyenv provides 3.10-3.12 here)")
        pythons[xy] = python
    config = _config(tmp_path, pythons)
    code, out, err = run_cli(["run", "--config", str(config), "--date", "2026_01_05"],
                             timeout=600)
    assert code == 1, (out, err)
    day = tmp_path / "nightlies" / "2026_01_05"
    state = json.loads((day / "state.json").read_text())["builds"]

    ok = state["manywheel_3.10_cpu"]
    assert ok["status"] == "succeeded", ok
    assert ok["manylinux"]["policy"] == "2_28"
    (tag,) = ok["manylinux"]["tags"]
    # The sysroot: a threaded extension needs nothing newer than the policy (on the host's
    # glibc 2.36 it would need 2.34, where pthread_create moved into libc).
    glibc = tuple(int(x) for x in ok["manylinux"]["glibc"].split("."))
    assert glibc < (2, 34)
    published = sorted(p.name for p in (tmp_path / "mirror").rglob("*.whl"))
    assert published == [ok["packages"][0]["name"]]
    assert f"-{tag}.whl" in published[0]
    log = (day / "logs" / "succeeded" / "manywheel_3.10_cpu.log").read_text()
    assert f"note:        manylinux: policy 2_28; reached {tag}" in log

    symbol = (day / "logs" / "failed" / "manywheel_3.11_cpu.log").read_text()
    assert "cannot meet the manylinux policy manylinux_2_28_x86_64" in symbol
    assert "too-recent versioned symbols" in symbol  # auditwheel's words
    assert "GLIBC_2.30" in symbol  # auditwheel show names the symbol version
    # The reason (recipes/common/policymiss.py, through the recipe): the file, the symbol
    # version, the library and the function, and the fix that applies: gettid is glibc 2.30's
    # own, no toolchain gives it to 2.28 (zig, which the recipe used to suggest, cannot).
    reason = state["manywheel_3.11_cpu"]["reason"]
    assert ("policydemo.cpython-311-x86_64-linux-gnu.so needs GLIBC_2.30 from libc.so.6 for "
            "gettid (policy: glibc 2.28)") in reason, reason
    assert 'Fix: manylinux = "2_30" or newer, or code without gettid' in reason, reason
    assert "zig" not in reason

    library = (day / "logs" / "failed" / "manywheel_3.12_cpu.log").read_text()
    assert "cannot meet the manylinux policy manylinux_2_28_x86_64" in library
    assert 'required library "libhidden.so" could not be located' in library

    for bid in ("manywheel_3.11_cpu", "manywheel_3.12_cpu"):
        assert state[bid]["status"] == "failed"
        assert not state[bid].get("packages")
        assert not state[bid].get("published")
    assert sorted(p.name for p in (day / "packages").rglob("*.whl")) == published
