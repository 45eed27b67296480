"""Limited-API (abi3) projects from `nightly init` alone to a night that exits 0: one
`cp3X-abi3` wheel built, in the mirror with the sha256 its index line says, tested by the
night on each Python of the range and installed from the mirror's index (pip checks the
sha256) and imported on each of them here.

- a setuptools C project made by the test (`py_limited_api=True`, `Py_LIMITED_API
  0x030A0000`, `[bdist_wheel] py_limited_api = cp310`);
- argon2-cffi-bindings' sdist from PyPI (C through cffi, scikit-build-core: `wheel.py-api =
  "cp310.cp315t"`, abi3 from 3.10; cffi a runtime dependency from the index).

The interpreters are pyenv's (tests/integration/recipe_env.pyenv_python), as `nightly init`
finds them.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_nightly
from tests.support.day import find_day
from tests.support.tables import unfold_tables

try:  # run from the repository root (python -m pytest): a namespace package
    from tests.integration import corpus
    from tests.integration import recipe_env as renv
except ImportError:  # run from elsewhere: pytest put this folder on sys.path
    import corpus  # type: ignore[no-redef,import-not-found]
    import recipe_env as renv  # type: ignore[no-redef,import-not-found]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

pytestmark = pytest.mark.slow

DATE, DEV = corpus.DATE, corpus.DEV
ARGON2 = corpus.Project(
    key="argon2-cffi-bindings", dist="argon2_cffi_bindings", version="26.2.0",
    sha256="f21ab89bb9850f32b9ca038d9961424bb0d3669d579cbbbfed068cffa6fc0643",
    backend="scikit-build-core + cffi (C, limited API: cp310-abi3)",
    import_name="_argon2_cffi_bindings", wheel_version="26.2.0" + DEV,
)

LIM_C = r"""
#include <Python.h>

static PyObject *floor_(PyObject *self, PyObject *args) {
    return PyLong_FromUnsignedLong((unsigned long)Py_LIMITED_API);
}

static PyObject *add(PyObject *self, PyObject *args) {
    long a, b;
    if (!PyArg_ParseTuple(args, "ll", &a, &b)) return NULL;
    return PyLong_FromLong(a + b);
}

static PyMethodDef methods[] = {
    {"floor", floor_, METH_NOARGS, "the Py_LIMITED_API it was built with"},
    {"add", add, METH_VARARGS, "a + b"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_lim", NULL, -1, methods};

PyMODINIT_FUNC PyInit__lim(void) { return PyModule_Create(&module); }
"""


def _limited_project(root: Path) -> Path:
    files = {
        "pyproject.toml": '[build-system]\nrequires = ["setuptools>=70.1"]\n'
                          'build-backend = "setuptools.build_meta"\n',
        "setup.py": (
            "from setuptools import Extension, setup\n"
            "setup(name='limcheck', version='1.0', packages=['limcheck'],\n"
            "      python_requires='>=3.10',\n"
            "      ext_modules=[Extension('limcheck._lim', ['src/lim.c'], py_limited_api=True,\n"
            "                             define_macros=[('Py_LIMITED_API', '0x030A0000')])])\n"
        ),
        "setup.cfg": "[bdist_wheel]\npy_limited_api = cp310\n",
        "limcheck/__init__.py": "from limcheck._lim import add, floor\n",
        "src/lim.c": LIM_C,
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _night_of(target: Path, work: Path, floor: str) -> tuple[dict[str, Any], list[str]]:
    """`nightly init TARGET` then `nightly run` in `work`: the config written and the
    Pythons of its matrix; the night exits 0."""
    code, out, err = run_nightly(["init", str(target)], cwd=work, timeout=300)
    assert code == 0, out + err
    assert f"one {floor}-abi3 wheel, tested on each Python" in out
    data = tomllib.loads((work / "nightly.toml").read_text())
    assert data["project"]["limited_api"] == floor
    pythons = list(data["matrix"]["linux"]["manywheel"]["pythons"])
    # The lowest Python at or above the floor builds (init writes them oldest first).
    assert int(pythons[0].split(".")[1]) >= int(floor[3:]), pythons
    assert len(pythons) >= 2, pythons
    code, out, err = run_nightly(["plan", "--date", DATE], cwd=work, timeout=300)
    assert code == 0, out + err
    assert f"{floor}-abi3 wheel built with {pythons[0]}, tested on {', '.join(pythons)}" in out
    code, out, err = run_nightly(["run", "--date", DATE], cwd=work, timeout=1800)
    assert code == 0, out + err
    # The run table: the one build, and each Python's result.
    tested = ", ".join(f"{p} passed" for p in pythons)
    assert f"tested on {tested}" in " ".join(unfold_tables(out).split()), out
    return data, pythons


def _check_night(work: Path, name: str, version: str, floor: str, pythons: list[str]) -> Path:
    """One build, tested on every Python, in summary.json and status; one abi3 wheel in the
    mirror whose sha256 is the one its index line gives. Returns the wheel."""
    day = find_day(work / "nightlies", DATE)
    summary = json.loads(day.summary_path.read_text())
    build_id = f"manywheel_{pythons[0]}_cpu"
    assert list(summary["builds"]) == [build_id]
    (line,) = summary["builds"].values()
    assert (line["outcome"], line["tested"]) == ("succeeded", "passed"), line
    assert [(t["python"], t["result"]) for t in line["tested_pythons"]] == [
        (p, "passed") for p in pythons]
    assert summary["counts"]["total"] == 1
    code, out, err = run_nightly(["status", "--date", DATE], cwd=work,
                                 env={"COLUMNS": "300"})
    assert code == 0, out + err
    assert "tested on " + ", ".join(f"{p} passed" for p in pythons) in " ".join(unfold_tables(out).split())
    report = work / "r.html"
    code, out, err = run_nightly(["report", "--date", DATE, "--out", str(report)], cwd=work)
    assert code == 0, out + err
    assert "tested on " + ", ".join(f"{p} passed" for p in pythons) in report.read_text()

    folder = work / "mirror" / "whl" / "nightly" / "cpu"
    (wheel,) = folder.glob("*.whl")
    assert wheel.name.startswith(f"{name}-{version}-{floor}-abi3-"), wheel.name
    page = (folder / name.replace("_", "-") / "index.html").read_text()
    links = re.findall(r'href="([^"]+)"', page)
    (link,) = [h for h in links if urllib.parse.unquote(h.split("#")[0]).endswith(wheel.name)]
    assert link.split("#sha256=")[1] == _sha256(wheel)
    (state_pkg,) = json.loads(day.state_path.read_text())["builds"][build_id]["packages"]
    assert state_pkg["sha256"] == _sha256(wheel)
    return wheel


def _installs_on_each(work: Path, tmp: Path, dist: str, version: str, code: str,
                      pythons: list[str], *, deps: bool = False) -> None:
    """pip installs the night's wheel from the mirror's index (checking its sha256) into a
    fresh venv of each Python, and `code` runs there. `deps`: its dependencies from the
    host's index (the mirror an extra index; the exact nightly version pinned)."""
    index = (work / "mirror" / "whl" / "nightly" / "cpu").as_uri() + "/"
    where = ["--extra-index-url", index] if deps else ["--no-deps", "--index-url", index]
    for xy in pythons:
        python = renv.pyenv_python(xy)
        assert python is not None, xy
        venv = tmp / f"venv-{xy}"
        subprocess.run([str(python), "-m", "venv", str(venv)], check=True)
        py = venv / "bin" / "python"
        pip = subprocess.run([str(py), "-m", "pip", "install", "-q", *where,
                              f"{dist}=={version}"],
                             capture_output=True, text=True)
        assert pip.returncode == 0, pip.stdout + pip.stderr
        ran = subprocess.run([str(py), "-c", code], capture_output=True, text=True, cwd=tmp)
        assert ran.returncode == 0, (xy, ran.stdout + ran.stderr)
        assert ran.stdout.strip() == "ok", (xy, ran.stdout)


def test_a_limited_api_c_project_from_init_alone(tmp_path: Path) -> None:
    src = _limited_project(tmp_path / "limcheck")
    work = tmp_path / "night"
    work.mkdir()
    _, pythons = _night_of(src, work, "cp310")
    assert pythons[:4] == ["3.10", "3.11", "3.12", "3.13"]
    version = "1.0" + DEV
    _check_night(work, "limcheck", version, "cp310", pythons)
    _installs_on_each(
        work, tmp_path, "limcheck", version,
        "import limcheck, sys; assert limcheck.floor() == 0x030A0000; "
        "assert limcheck.add(2, 3) == 5; assert '.abi3.so' in limcheck._lim.__file__; "
        "print('ok')", pythons)


def test_argon2_cffi_bindings_from_pypi_from_init_alone(tmp_path: Path) -> None:
    sdist = corpus.fetch(ARGON2)
    work = tmp_path / "night"
    work.mkdir()
    data, pythons = _night_of(sdist, work, "cp310")
    assert data["smoke"]["import_name"] == "_argon2_cffi_bindings"
    assert data["smoke"]["dependencies"] == "index"
    _check_night(work, "argon2_cffi_bindings", ARGON2.wheel_version, "cp310", pythons)
    _installs_on_each(
        work, tmp_path, "argon2-cffi-bindings", ARGON2.wheel_version,
        "from _argon2_cffi_bindings import ffi, lib, _ffi; "
        "assert _ffi.__file__.endswith('.abi3.so'), _ffi.__file__; "
        "out = ffi.new('uint8_t[32]'); "
        "rc = lib.argon2_hash(1, 64, 1, b'password', 8, b'somesalt', 8, out, 32, ffi.NULL, 0, "
        "lib.Argon2_id, lib.ARGON2_VERSION_NUMBER); "
        "assert rc == lib.ARGON2_OK, rc; print('ok')", pythons, deps=True)
