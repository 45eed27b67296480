"""Limited-API (abi3) projects from `nightly init` alone to a night that exits 0: one
`cp3X-abi3` wheel built, in the mirror with the sha256 its index line says, tested by the
night on each Python of the range and installed from the mirror's index (pip checks the
sha256) and imported on each of them here.

- a setuptools C project made by the test (`py_limited_api=True`, `Py_LIMITED_API
  0x030A0000`, `[bdist_wheel] py_limited_api = cp310`);
- tree-sitter-json's sdist from PyPI (pure C, setuptools; its wheel declared abi3 by a
  bdist_wheel subclass's get_tag(), floor cp39).

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

import pytest

from tests.support.cli import run_nightly
from tests.support.day import find_day

try:  # run from the repository root (python -m pytest): a namespace package
    from tests.integration import corpus
    from tests.integration import recipe_env as renv
except ImportError:  # run from elsewhere: pytest put this folder on sys.path
    import corpus  # type: ignore[no-redef]
    import recipe_env as renv  # type: ignore[no-redef]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

pytestmark = pytest.mark.slow

DATE, DEV = corpus.DATE, corpus.DEV
TREE_SITTER_JSON = corpus.Project(
    key="tree-sitter-json", dist="tree_sitter_json", version="0.24.8",
    sha256="ca8486e52e2d261819311d35cf98656123d59008c3b7dcf91e61d2c0c6f3120e",
    backend="setuptools (C, limited API: cp39-abi3)", import_name="tree_sitter_json",
    wheel_version="0.24.8" + DEV,
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


def _night_of(target: Path, work: Path, floor: str) -> tuple[dict[str, object], list[str]]:
    """`nightly init TARGET` then `nightly run` in `work`: the config written and the
    Pythons of its matrix; the night exits 0."""
    code, out, err = run_nightly(["init", str(target)], cwd=work, timeout=300)
    assert code == 0, out + err
    assert f"one {floor}-abi3 wheel, tested on each Python" in out
    data = tomllib.loads((work / "nightly.toml").read_text())
    assert data["project"]["limited_api"] == floor
    pythons = list(data["matrix"]["linux"]["manywheel"]["pythons"])
    floor_xy = f"3.{floor[3:]}"
    assert pythons[0] == floor_xy, pythons
    assert len(pythons) >= 2, pythons
    code, out, err = run_nightly(["plan", "--date", DATE], cwd=work, timeout=300)
    assert code == 0, out + err
    assert f"{floor}-abi3 wheel built with {floor_xy}, tested on {', '.join(pythons)}" in out
    code, out, err = run_nightly(["run", "--date", DATE], cwd=work, timeout=1800)
    assert code == 0, out + err
    # The run table: the one build, and each Python's result.
    tested = ", ".join(f"{p} passed" for p in pythons)
    assert f"tested on {tested}" in " ".join(out.split()), out
    return data, pythons


def _check_night(work: Path, name: str, version: str, floor: str, pythons: list[str]) -> Path:
    """One build, tested on every Python, in summary.json and status; one abi3 wheel in the
    mirror whose sha256 is the one its index line gives. Returns the wheel."""
    day = find_day(work / "nightlies", DATE)
    summary = json.loads(day.summary_path.read_text())
    assert list(summary["builds"]) == [f"manywheel_3.{floor[3:]}_cpu"]
    (line,) = summary["builds"].values()
    assert (line["outcome"], line["tested"]) == ("succeeded", "passed"), line
    assert [(t["python"], t["result"]) for t in line["tested_pythons"]] == [
        (p, "passed") for p in pythons]
    assert summary["counts"]["total"] == 1
    code, out, err = run_nightly(["status", "--date", DATE], cwd=work,
                                 env={"COLUMNS": "300"})
    assert code == 0, out + err
    assert "tested on " + ", ".join(f"{p} passed" for p in pythons) in " ".join(out.split())
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
    (state_pkg,) = [p for p in json.loads(day.state_path.read_text())["builds"][
        f"manywheel_3.{floor[3:]}_cpu"]["packages"]]
    assert state_pkg["sha256"] == _sha256(wheel)
    return wheel


def _installs_on_each(work: Path, tmp: Path, dist: str, version: str, code: str,
                      pythons: list[str]) -> None:
    """pip installs the night's wheel from the mirror's index (checking its sha256) into a
    fresh venv of each Python, and `code` runs there."""
    index = (work / "mirror" / "whl" / "nightly" / "cpu").as_uri() + "/"
    for xy in pythons:
        python = renv.pyenv_python(xy)
        assert python is not None, xy
        venv = tmp / f"venv-{xy}"
        subprocess.run([str(python), "-m", "venv", str(venv)], check=True)
        py = venv / "bin" / "python"
        pip = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps",
                              "--index-url", index, f"{dist}=={version}"],
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


def test_tree_sitter_json_from_pypi_from_init_alone(tmp_path: Path) -> None:
    sdist = corpus.fetch(TREE_SITTER_JSON)
    work = tmp_path / "night"
    work.mkdir()
    data, pythons = _night_of(sdist, work, "cp39")
    assert data["smoke"]["import_name"] == "tree_sitter_json"
    _check_night(work, "tree_sitter_json", TREE_SITTER_JSON.wheel_version, "cp39", pythons)
    _installs_on_each(
        work, tmp_path, "tree-sitter-json", TREE_SITTER_JSON.wheel_version,
        "import tree_sitter_json as t; assert isinstance(t.language(), int) and t.language(); "
        "assert '.abi3.so' in t._binding.__file__; print('ok')", pythons)
