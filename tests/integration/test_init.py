"""Any project, from a non-editable install: nightly built as a wheel (recipes inside),
installed into a fresh venv, used from a folder that has nothing of this repository.

- `nightly init SDIST` + `nightly run` on two real PyPI sdists, the written file unchanged:
  setproctitle (its version a literal `__version__` in `__init__.py`, also compiled in as a C
  macro: version_from = rewrite) and ujson (setuptools-scm); every wheel is
  `<version>.devYYYYMMDD`, installs from the mirror's index and passes the project's tests.
- Two real sdists with runtime dependencies, init + run with no hand edits, as the README
  says: mapbox-earcut (C++, scikit-build-core, numpy; zig; its oldest and newest Python) and
  cmarkgfm (C, setuptools + cffi, cffi; the sysroot): smoke-tested with the dependency,
  manylinux_2_28 or better by auditwheel, installed over HTTP with init's line, the
  project's tests passing.
- A build that fails on purpose: the night's table, `nightly status`, summary.json and the
  report give the recipe's own ERROR line.
- A recipe folder that does not exist: exit 2 at plan time, nothing created.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.runcache import once
from tests.support.selfwheel import nightly_wheel

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

# Its tests share only `installed`, made once per run: they may run on both xdist workers
# (tests/support/schedule.py's SPREAD).
# pyproject's 900 s is for a hang; a cold builder image, zig's libc++ or a C++ night on a
# loaded 2-core machine took longer (two mapbox-earcut tests stopped at 900 s on one):
# the nights' own subprocess timeouts (1800-3600 s) bound them.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

DATE, DEV = corpus.DATE, corpus.DEV


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`nightly` from its wheel (tests/support/selfwheel.py: pypa/build, sdist then wheel)
    installed into a fresh venv, once per run for the tests of this module on every xdist
    worker."""
    return once(tmp_path_factory, "nightly-from-its-wheel",
                lambda folder: _install_nightly(nightly_wheel(tmp_path_factory), folder)
                ) / "venv" / "bin" / "nightly"


def _install_nightly(wheel: Path, folder: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        assert "nightly/recipes/manywheel/build.sh" in z.namelist()
        assert "nightly/recipes/common/rewrite_wheel.py" in z.namelist()
    venv = folder / "venv"
    _ok([sys.executable, "-m", "venv", str(venv)])
    # As the README installs it: the policy init declares needs auditwheel.
    _ok([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"{wheel}[manylinux]"])


def _ok(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{' '.join(cmd)}:\n{proc.stdout}\n{proc.stderr}"
    return proc  # type: ignore[no-any-return]


def _env() -> dict[str, str]:
    # A wide terminal: the table's cells are not wrapped mid-word.
    return {**{k: v for k, v in os.environ.items() if k != "NIGHTLY_CONFIG"}, "COLUMNS": "400"}


def _run(nightly: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(nightly), *args], cwd=cwd, capture_output=True, text=True,
                          env=_env(), timeout=1800)


@pytest.mark.parametrize(
    ("key", "strategy"), [("setproctitle", "rewrite"), ("ujson", "setuptools-scm")],
)
def test_init_then_run_gives_nightly_wheels_that_pass_the_projects_tests(
    installed: Path, tmp_path: Path, key: str, strategy: str
) -> None:
    project = corpus.BY_KEY[key]
    corpus.unpack(project)  # the tests the sdist ships, for run_own_tests
    sdist = corpus.fetch(project)
    work = tmp_path / "night"
    work.mkdir()
    init = _run(installed, "init", str(sdist), cwd=work)
    assert init.returncode == 0, init.stderr
    config = work / "nightly.toml"
    written = config.read_text()
    data = tomllib.loads(written)
    assert data["project"]["version_from"] == strategy
    assert data["project"]["base_version"] == project.version
    assert data["smoke"]["import_name"] == project.import_name
    assert data["matrix"]["linux"]["manywheel"]["manylinux"] == "2_28"
    for command in ("nightly plan", "nightly images build", "nightly run"):
        assert command in init.stdout
    # Never overwritten.
    again = _run(installed, "init", str(sdist), cwd=work)
    assert again.returncode == 2
    assert "never overwrites" in again.stderr
    assert config.read_text() == written

    plan = _run(installed, "plan", "--date", DATE, cwd=work)
    assert plan.returncode == 0, plan.stderr
    assert f"version strategy: {strategy}" in plan.stdout
    pythons = data["matrix"]["linux"]["manywheel"]["pythons"]
    built = _pythons_built(key, pythons)
    selects = [arg for xy in built for arg in ("--select", f"manywheel_{xy}_*")]
    night = _run(installed, "run", "--date", DATE, *selects, cwd=work)
    assert night.returncode == 0, night.stdout + night.stderr
    assert config.read_text() == written
    # The installed recipes ran: no recipes folder appeared beside the config.
    assert not (work / "recipes").exists()

    folder = work / "mirror" / "whl" / "nightly" / "cpu"
    wheels = sorted(folder.glob("*.whl"))
    assert sorted(w.name.split("-")[2] for w in wheels) == sorted(
        f"cp{xy.replace('.', '')}" for xy in built), wheels
    nightly_version = project.version + DEV
    assert all(w.name.split("-")[1] == nightly_version for w in wheels), wheels
    python = renv.pyenv_python(pythons[-1])
    assert python is not None
    result = corpus.run_own_tests(
        dataclasses.replace(project, wheel_version=nightly_version), python,
        folder.as_uri() + "/", tmp_path / "tests",
    )
    assert result.failed == 0, result.output
    assert result.errors == 0, result.output
    assert result.passed > 0, result.output
    assert "/venv/" in result.module_file  # the installed wheel, not a source tree


def test_a_failing_build_shows_the_recipes_error_line(installed: Path, tmp_path: Path) -> None:
    """A project with its own static version, configured as if it read BUILD_VERSION: the
    recipe's version check fails, and every view of the night says so in its words."""
    src = tmp_path / "proj"
    (src / "tinyfail").mkdir(parents=True)
    (src / "tinyfail" / "__init__.py").write_text("")
    (src / "setup.py").write_text(
        "from setuptools import setup\nsetup(name='tinyfail', version='2.0', packages=['tinyfail'])\n"
    )
    (tmp_path / "nightly.toml").write_text(
        '[project]\nname = "tinyfail"\nsource = "proj"\nbase_version = "2.0"\n'
        'version_from = "env"\n\n[matrix.linux.manywheel]\npythons = ["3.11"]\ncudas = ["cpu"]\n\n'
        '[[machines]]\nname = "m"\nplatform = "linux"\nqueues = 1\n'
    )
    night = _run(installed, "run", "--date", DATE, cwd=tmp_path)
    assert night.returncode == 1, night.stdout + night.stderr
    said = f"ERROR: the wheel has version 2.0 but 2.0{DEV} was expected"
    assert said in night.stdout
    status = _run(installed, "status", "--date", DATE, cwd=tmp_path)
    assert said in status.stdout
    day = tmp_path / "nightlies" / DATE
    summary = json.loads((day / "summary.json").read_text())
    failed = summary["builds"]["manywheel_3.11_cpu"]
    assert failed["reason"].startswith("recipe failed with exit status 1: [manywheel] ")
    assert said in failed["reason"]
    report = _run(installed, "report", "--date", DATE, "--out", str(tmp_path / "r.html"),
                  cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert said in (tmp_path / "r.html").read_text()


def test_a_missing_recipe_folder_stops_at_plan_time_creating_nothing(
    installed: Path, tmp_path: Path
) -> None:
    (tmp_path / "nightly.toml").write_text(
        'recipes = "gone"\n[project]\nname = "x"\nsource = "."\nbase_version = "1.0"\n\n'
        '[matrix.linux.manywheel]\npythons = ["3.11"]\ncudas = ["cpu"]\n\n'
        '[[machines]]\nname = "m"\nplatform = "linux"\nqueues = 1\n'
    )
    for args in (("plan",), ("run", "--dry-run"), ("build", "manywheel", "3.11", "cpu")):
        proc = _run(installed, *args, "--date", DATE, cwd=tmp_path)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert f"{tmp_path / 'gone'} does not exist" in proc.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == ["nightly.toml"]


# mapbox-earcut's night with zig (C++ and pybind11 compiled by `zig c++`, libc++ linked in)
# was the suite's second-slowest test with all four of init's Pythons: it builds the oldest
# and the newest (`nightly run --select`, the file still as init wrote it). What zig does
# with a C++ build does not change with the Python between them; zig's C++ builds for 3.12
# are test_zig_builds.py's, and cmarkgfm here builds every Python init chose. ujson and
# setproctitle (init then run) build the oldest and the newest too: the same sdists are built
# on the host for every Python, and pass their own tests on each, in test_corpus_project; what
# init and `nightly run` from an installed wheel do with them does not change between.
EDGES_ONLY = ("mapbox-earcut", "ujson", "setproctitle")


def _pythons_built(key: str, pythons: list[str]) -> list[str]:
    return [pythons[0], pythons[-1]] if key in EDGES_ONLY and len(pythons) > 2 else pythons


@pytest.mark.parametrize(
    ("key", "toolchain", "dependency"),
    [
        # C++ with scikit-build-core (CMake), needs numpy: the README's C++ example.
        ("mapbox-earcut", "zig", "numpy"),
        # C with setuptools and cffi (the cmark-gfm library in API mode), needs cffi; no
        # libm call of glibc 2.29, so the glibc 2.31 sysroot meets the policy: the README's
        # five minutes.
        ("cmarkgfm", "sysroot", "cffi"),
    ],
)
def test_a_project_with_dependencies_from_init_to_tested_manylinux_wheels_over_http(
    installed: Path, tmp_path: Path, key: str, toolchain: str, dependency: str
) -> None:
    """A real sdist with a runtime dependency, as the README's five minutes take it:
    `nightly init` + `nightly run` with no hand edits give wheels that succeeded and were
    smoke-tested with the dependency from the index, `<version>.devYYYYMMDD`, manylinux_2_28
    or better by their tags and by auditwheel; the install line init printed, pointed at the
    mirror served over HTTP, installs one with its dependency from PyPI, and the project's
    tests pass."""
    import shlex

    from nightly.core.manylinux import tag_glibc, wheel_platforms
    from tests.support.servers import http_servers

    project = corpus.BY_KEY[key]
    corpus.unpack(project)  # its tests
    work = tmp_path / "night"
    work.mkdir()
    init = _run(installed, "init", str(corpus.fetch(project)), cwd=work)
    assert init.returncode == 0, init.stderr
    data = tomllib.loads((work / "nightly.toml").read_text())
    matrix = data["matrix"]["linux"]["manywheel"]
    assert (matrix["manylinux"], matrix["toolchain"]) == ("2_28", toolchain)
    assert data["smoke"]["dependencies"] == "index"
    assert "auditwheel is not installed" not in init.stdout  # the README's extra brings it
    built = _pythons_built(key, matrix["pythons"])
    selects = [arg for xy in built for arg in ("--select", f"manywheel_{xy}_*")]
    night = _run(installed, "run", "--date", DATE, *selects, cwd=work)
    assert night.returncode == 0, night.stdout + night.stderr
    summary = json.loads((work / "nightlies" / DATE / "summary.json").read_text())
    assert summary["counts"]["untested"] == 0
    assert sorted(summary["builds"]) == sorted(f"manywheel_{xy}_cpu" for xy in built)
    for bid, b in summary["builds"].items():
        assert (b["outcome"], b["tested"]) == ("succeeded", "passed"), (bid, b)

    folder = work / "mirror" / "whl" / "nightly" / "cpu"
    wheels = sorted(folder.glob("*.whl"))
    assert len(wheels) == len(built)
    version = project.version + DEV
    auditwheel = installed.parent / "auditwheel"
    for w in wheels:
        assert w.name.split("-")[1] == version, w.name
        glibc = [tag_glibc(p) for p in wheel_platforms(w.name)]
        assert glibc, w.name
        assert all(g is not None and g <= (2, 28) for g in glibc), w.name
        shown = subprocess.run([str(auditwheel), "show", str(w)], capture_output=True, text=True)
        assert shown.returncode == 0, shown.stderr
        m = re.search(r'platform tag:\s*"manylinux_(\d+)_(\d+)', shown.stdout.replace("\n", " "))
        assert m, shown.stdout
        assert (int(m[1]), int(m[2])) <= (2, 28), shown.stdout

    (line,) = [ln.split(": ", 1)[1] for ln in init.stdout.splitlines()
               if ln.strip().startswith("install a night's wheel:")]
    python = renv.pyenv_python(matrix["pythons"][-1])
    assert python is not None
    venv = tmp_path / "user"
    _ok([str(python), "-m", "venv", str(venv)])
    with http_servers() as serve:
        url = serve(work / "mirror") + "whl/nightly/cpu/"
        # init's line names the mirror by its absolute URL and tonight's version: served
        # over HTTP instead, for the night this test ran (DATE).
        mirror = f"{(work / 'mirror').resolve().as_uri()}/whl/nightly/cpu/"
        assert mirror in line, line
        assert "YYYYMMDD" not in line, line
        command = re.sub(r"\.dev\d{8}", DEV, line.replace(mirror, url))
        args = shlex.split(command)
        assert args[:2] == ["pip", "install"]
        _ok([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *args[2:]])
    name = project.import_name
    where = _ok([str(venv / "bin" / "python"), "-c",
                 f"import {name}, {dependency}, importlib.metadata as md; "
                 f"print({name}.__file__, md.version({project.dist!r}))"], cwd=tmp_path)
    assert str(venv) in where.stdout
    assert where.stdout.split()[1] == version
    _ok([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "pytest"])
    tests = tmp_path / "tests"
    tests.mkdir()
    for rel in project.test_paths:  # a copy: only the installed package can be imported
        shutil.copytree(project.source / rel, tests / Path(rel).name)
    own = subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p",
                          "no:cacheprovider", str(tests)], cwd=tmp_path, capture_output=True,
                         text=True)
    assert own.returncode == 0, own.stdout + own.stderr
    assert re.search(r"\d+ passed", own.stdout), own.stdout
