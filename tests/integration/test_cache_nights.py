"""The compiler cache across nights for host builds (issue 41, point 7): a small real C
project built by the real manywheel recipe (setuptools through pip, with the recipes'
reproducibility flags) with the local executor on two dates. The second night compiles nothing
again: its builds run at the same paths as the first's (the stable build folder, builds/slot.py),
so the `-ffile-prefix-map` flags sccache hashes are the same. Headers of a build requirement
(numpy's, pybind11's) too: the requirements are installed into the build's own venv, at a path
the same every night, not into pip's randomly named build environment.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.engine import Engine
from tests.support.projects import local_machine
from tests.support.wheels import make_wheel

REPO = Path(__file__).resolve().parents[2]
RunCli = Callable[..., tuple[int, str, str]]
UNITS = ("alpha", "beta", "gamma", "delta")
HEADER_VERSION = "1.0+test"


def write_project(src: Path) -> None:
    """setuptools, one extension of four C files sharing a header."""
    (src / "ctiny").mkdir(parents=True)
    (src / "ctiny" / "__init__.py").write_text("from ctiny._ext import total\n")
    (src / "inc").mkdir()
    (src / "inc" / "units.h").write_text(
        "".join(f"int ct_{u}(int x);\n" for u in UNITS) + "#define SCALE 3\n")
    (src / "csrc").mkdir()
    for i, unit in enumerate(UNITS[1:], start=1):
        (src / "csrc" / f"{unit}.c").write_text(
            f'#include "units.h"\nint ct_{unit}(int x) {{ return x * SCALE + {i}; }}\n')
    (src / "csrc" / "alpha.c").write_text("""#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "units.h"
int ct_alpha(int x) { return x; }
static PyObject *total(PyObject *self, PyObject *args) {
    int x;
    if (!PyArg_ParseTuple(args, "i", &x)) return NULL;
    return PyLong_FromLong(ct_alpha(x) + ct_beta(x) + ct_gamma(x) + ct_delta(x));
}
static PyMethodDef methods[] = {{"total", total, METH_VARARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_ext", NULL, -1, methods};
PyMODINIT_FUNC PyInit__ext(void) { return PyModule_Create(&mod); }
""")
    sources = ", ".join(f'"csrc/{u}.c"' for u in UNITS)
    (src / "setup.py").write_text(f"""import os
from setuptools import Extension, setup
setup(name="ctiny", version=os.environ.get("BUILD_VERSION", "0.1.0"), packages=["ctiny"],
      ext_modules=[Extension("ctiny._ext", [{sources}], include_dirs=["inc"])])
""")
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=40.8", "wheel"]\n'
        'build-backend = "setuptools.build_meta"\n')


def header_wheel(folder: Path) -> Path:
    """A wheel of `ctinyhdr`, a build requirement that ships units.h and says where
    (get_include), as numpy and pybind11 ship theirs."""
    folder.mkdir(parents=True)
    # A local version (+test): no index may carry one, so pip takes this wheel whatever the
    # public index holds under the name.
    return make_wheel(
        folder, "ctinyhdr", HEADER_VERSION,
        body="import os\n\ndef get_include():\n"
             "    return os.path.join(os.path.dirname(__file__), 'include')\n",
        data={"ctinyhdr/include/units.h":
              "".join(f"int ct_{u}(int x);\n" for u in UNITS) + "#define SCALE 3\n"})


def header_from_requirement(src: Path) -> None:
    """ctiny with its units.h from the build requirement ctinyhdr instead of its own inc/."""
    (src / "inc" / "units.h").unlink()
    (src / "inc").rmdir()
    setup = (src / "setup.py").read_text()
    (src / "setup.py").write_text(
        setup.replace("import os\n", "import os\nimport ctinyhdr\n")
        .replace('include_dirs=["inc"]', "include_dirs=[ctinyhdr.get_include()]"))
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=40.8", "wheel", "ctinyhdr==' + HEADER_VERSION + '"]\n'
        'build-backend = "setuptools.build_meta"\n')


def entry(day: Path, build: str) -> dict[str, Any]:
    state = json.loads((day / "state.json").read_text())
    return dict(state["builds"][build])


def ctiny_config(tmp_path: Path, src: Path, *, machine: str, smoke: str, cache: str,
                 extra: str = "") -> Path:
    """nightly.toml for ctiny at `src`: one manywheel 3.11 cpu build on `machine` (its
    [[machines]] and executor blocks), `smoke` the smoke test's Python assertion, `cache` the
    [cache] table's lines."""
    config = tmp_path / "nightly.toml"
    config.write_text(f"""
root = "nightlies"
recipes = "{REPO / 'recipes'}"

[project]
name = "ctiny"
source = "{src}"
base_version = "0.1.0"

[matrix.linux.manywheel]
pythons = ["3.11"]
cudas = ["cpu"]

{machine}
{extra}
[smoke]
command = '"$PYTHON" -c "import ctiny; {smoke}"'

[cache]
{cache}
""")
    return config


LOCAL = local_machine()


def two_nights(tmp_path: Path, run_cli: RunCli, executor: str,
               extra: str = "") -> tuple[dict[str, Any], str]:
    """Night 1 and night 2 of ctiny (at tmp_path/ctiny, written when missing) with `executor`
    (its config block): the second night's state entry of the build and its log, once both
    nights succeeded and night 1 missed for every compile unit."""
    src = tmp_path / "ctiny"
    if not src.exists():
        write_project(src)
    config = ctiny_config(tmp_path, src, machine=executor, extra=extra,
                          smoke="r = ctiny.total(2); assert r == 26, r",
                          cache=f'dir = "{tmp_path / "sccache"}"')
    days = {}
    for date in ("2024_05_01", "2024_05_02"):
        code, out, err = run_cli(["run", "--config", str(config), "--date", date,
                                  "--no-upload"], cwd=tmp_path, timeout=900)
        day = tmp_path / "nightlies" / date
        assert code == 0, out + err + "".join(
            p.read_text()[-4000:] for p in (day / "logs").rglob("*.log"))
        days[date] = entry(day, "manywheel_3.11_cpu")
    first, second = days["2024_05_01"], days["2024_05_02"]
    assert first["status"] == second["status"] == "succeeded"
    assert (first["cache"]["hits"], first["cache"]["misses"]) == (0, len(UNITS)), first["cache"]
    log = (tmp_path / "nightlies" / "2024_05_02" / second["log"]).read_text()
    assert "smoke: passed" in log
    return second, log


def test_a_second_night_of_identical_sources_hits_the_cache_for_every_compile(
    tmp_path: Path, run_cli: RunCli
) -> None:
    second, log = two_nights(tmp_path, run_cli, LOCAL)
    n = len(UNITS)
    # The whole point: the second night's compiles all come from the first night's objects.
    assert (second["cache"]["hits"], second["cache"]["misses"]) == (n, 0), second["cache"]
    assert f"compiler cache: {n} hits, 0 misses" in log
    # Built in the root's stable folder (outside both day folders), which is empty between nights.
    stable = tmp_path / "nightlies" / ".builds"
    assert f"WORK_DIR={stable / 'work' / 'manywheel_3.11_cpu' / 'scratch'}" in log
    assert f"SOURCE_DIR={stable / 'source'}" in log
    assert "2024_05_02" not in log.split("-ffile-prefix-map=", 1)[1].split()[0]
    assert list((stable / "work").iterdir()) == []


def test_headers_of_a_build_requirement_hit_the_cache_on_the_second_night(
    tmp_path: Path, run_cli: RunCli
) -> None:
    """An isolated build whose compiles include a build requirement's header (-I into where
    pip installed it): pip's own build environment is a new random folder each build
    (pip-build-env-XXXX), so no compile could hit; nightly installs the requirements into the
    build's venv in the stable folder instead, and every compile hits."""
    wheels = header_wheel(tmp_path / "wheels")
    write_project(tmp_path / "ctiny")
    header_from_requirement(tmp_path / "ctiny")
    second, log = two_nights(tmp_path, run_cli, LOCAL,
                             extra=f'[build]\nfind_links = ["{wheels.parent}"]\n')
    n = len(UNITS)
    assert (second["cache"]["hits"], second["cache"]["misses"]) == (n, 0), second["cache"]
    venv = tmp_path / "nightlies" / ".builds" / "work" / "manywheel_3.11_cpu" / "scratch" / "build-venv"
    assert f"build requirements from the index of the pip configuration into {venv}" in log
    assert f"-I{venv}/lib/python3.11/site-packages/ctinyhdr/include" in log
    assert "pip-build-env-" not in log


def test_a_second_night_in_containers_hits_the_cache_for_every_compile(
    tmp_path: Path, run_cli: RunCli, engine: Engine
) -> None:
    """Container builds compile at the container's fixed paths (the source mounted at
    /nightly/source): the same figure with the real recipe in the builder image."""
    second, log = two_nights(tmp_path, run_cli, f"""
[[machines]]
name = "m"
platform = "linux"
queues = 1
executor = "container"

[images]
default = "{engine.image}"

[executor.container]
base_url = "{engine.base_url}"
""")
    n = len(UNITS)
    assert (second["cache"]["hits"], second["cache"]["misses"]) == (n, 0), second["cache"]
    assert "SCCACHE_DIR=/nightly/sccache-dir" in log


def test_a_failed_build_keeps_its_folder_in_the_day_and_a_changed_source_is_compiled(
    tmp_path: Path, run_cli: RunCli
) -> None:
    """The same paths every night never serve a stale object: an edited C file is compiled
    again the next night (the others hit), and a failed build's folder is in its day, as
    before, not left where the next night builds."""
    src = tmp_path / "ctiny"
    write_project(src)
    config = tmp_path / "nightly.toml"
    build = "manywheel_3.11_cpu"

    def run(date: str, expect: int) -> tuple[int, Path, str]:
        ctiny_config(tmp_path, src, machine=LOCAL, extra="[retries]\nrecipe = 0\n",
                     smoke=f"r = ctiny.total(2); assert r == {expect}, r",
                     cache=f'dir = "{tmp_path / "sccache"}"')
        code, out, err = run_cli(["run", "--config", str(config), "--date", date, "--no-upload"],
                                 cwd=tmp_path, timeout=900)
        return code, tmp_path / "nightlies" / date, out + err

    code, day1, said = run("2024_05_01", 25)  # the smoke test fails: 26 != 25
    assert code == 1, said
    assert entry(day1, build)["status"] == "failed"
    kept = day1 / "work" / build
    assert (kept / "scratch" / "src" / "setup.py").is_file()
    assert list((tmp_path / "nightlies" / ".builds" / "work").iterdir()) == []

    beta = src / "csrc" / "beta.c"
    beta.write_text(beta.read_text().replace("+ 1;", "+ 2;"))
    code, day2, said = run("2024_05_02", 27)
    e = entry(day2, build)
    assert code == 0, said + (day2 / e["log"]).read_text()[-4000:]
    assert (e["cache"]["hits"], e["cache"]["misses"]) == (len(UNITS) - 1, 1), e["cache"]


def test_a_night_that_finds_the_stable_folder_held_builds_in_its_day_folder(
    tmp_path: Path, run_cli: RunCli
) -> None:
    """Two nights of one root at once never share a folder: the one that finds the stable
    folder held (here by this test, as another night would) builds in its day folder, says so,
    and succeeds."""
    src = tmp_path / "ctiny"
    write_project(src)
    config = ctiny_config(tmp_path, src, machine=LOCAL,
                          smoke="assert ctiny.total(2) == 26", cache="enabled = false")
    stable = tmp_path / "nightlies" / ".builds"
    (stable / "locks").mkdir(parents=True, mode=0o700)
    with contextlib.ExitStack() as held:
        fd = os.open(stable / "locks" / "night", os.O_RDWR | os.O_CREAT, 0o600)
        held.callback(os.close, fd)
        fcntl.flock(fd, fcntl.LOCK_EX)
        code, out, err = run_cli(["run", "--config", str(config), "--date", "2024_05_01",
                                  "--no-upload"], cwd=tmp_path, timeout=900)
    day = tmp_path / "nightlies" / "2024_05_01"
    e = entry(day, "manywheel_3.11_cpu")
    log = (day / e["log"]).read_text()
    assert code == 0, out + err + log[-4000:]
    assert f"WORK_DIR={day / 'work' / 'manywheel_3.11_cpu' / 'scratch'}" in log
    assert f"SOURCE_DIR={day / 'source'}" in log
    assert not (stable / "work").exists()
    assert f"the stable build folder {stable} is in use by another night" in (
        day / "logs" / "master" / "run.log").read_text()
