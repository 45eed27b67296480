"""Limited-API (abi3) projects: what `nightly init` reads from a project (never running it),
the matrix made one build per floor with its wheel tested on each Python (core/limited.py,
pure), `[project] limited_api` in the config, the test of each Python and its typed record in
state.json and summary.json."""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from nightly.builds.test import abi3test
from nightly.cli.init_facts import read_facts
from nightly.cli.scaffold import render
from nightly.config import load
from nightly.config.abi3 import detect_limited_api
from nightly.config.loader import parse
from nightly.core.axes import AxisError
from nightly.core.limited import collapse, describe, normalize_limited_api
from nightly.core.matrix import Build, PackageMatrix, expand
from nightly.errors import ConfigError
from nightly.executors.base import Job
from nightly.workspace.pythontests import PythonTest, read_tests, results_text
from nightly.workspace.records import TestRecord
from nightly.workspace.summary import BuildSummary

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PYTHONS = ("3.9", "3.10", "3.11", "3.12", "3.13", "3.14t")


def _project(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


# ---------------------------------------------------------------------------- the matrix


def test_one_build_per_floor_tested_on_every_python_of_the_range() -> None:
    builds = expand([
        PackageMatrix(package="manywheel", platform="linux", pythons=PYTHONS,
                      cudas=("cpu", "cu126"), archs=("x86_64", "aarch64")),
        PackageMatrix(package="conda", platform="linux", pythons=("3.10", "3.11"), cudas=("cpu",)),
    ])
    out = collapse(builds, "cp310")
    abi3 = [b for b in out if b.limited_api]
    # One per accelerator and architecture, built with the floor's Python.
    assert sorted(b.id for b in abi3) == sorted([
        "manywheel_3.10_cpu", "manywheel_3.10_cu126", "manywheel_3.10_cpu_aarch64",
        "manywheel_3.10_cu126_aarch64"])
    for b in abi3:
        assert b.limited_api == "cp310"
        assert b.tests_on == ("3.10", "3.11", "3.12", "3.13")
    plain = {b.id for b in out if not b.limited_api}
    # Below the floor and free-threaded (abi3t is its own ABI): builds of their own; conda
    # packages pin their Python.
    assert {"manywheel_3.9_cpu", "manywheel_3.14t_cpu", "manywheel_3.14t_cu126_aarch64",
            "conda_3.10_cpu", "conda_3.11_cpu"} <= plain
    assert not any(b.id.startswith("manywheel_3.1") and not b.id.startswith("manywheel_3.14t")
                   for b in out if not b.limited_api)
    assert len(out) == len(builds) - 4 * 3  # 3.11, 3.12, 3.13 folded into 3.10, four times
    assert len({b.id for b in out}) == len(out)


def test_the_floor_picks_the_lowest_python_at_or_above_it_in_any_order() -> None:
    builds = [Build(package="manywheel", python=p, cuda="cpu") for p in ("3.13", "3.8", "3.12")]
    out = collapse(builds, "3.11")
    assert [(b.id, b.tests_on) for b in out] == [
        ("manywheel_3.12_cpu", ("3.12", "3.13")), ("manywheel_3.8_cpu", ())]
    assert describe(out[0]) == "cp311-abi3 wheel built with 3.12, tested on 3.12, 3.13"
    assert describe(out[1]) == ""


def test_no_limited_api_changes_nothing() -> None:
    builds = [Build(package="manywheel", python=p, cuda="cpu") for p in ("3.10", "3.11")]
    assert collapse(builds, "") == builds


@pytest.mark.parametrize(("text", "tag"), [("cp310", "cp310"), ("3.10", "cp310"),
                                           (" CP39 ", "cp39"), ("", "")])
def test_floor_spellings(text: str, tag: str) -> None:
    assert normalize_limited_api(text) == tag


@pytest.mark.parametrize("text", ["abi3", "cp27", "3.1", "cp3", "310", "true"])
def test_bad_floor_spellings_are_refused(text: str) -> None:
    with pytest.raises(AxisError, match="not a limited-API floor"):
        normalize_limited_api(text)


# ---------------------------------------------------------------------------- the config key

CONFIG = """
[project]
name = "demo"
source = "."
base_version = "1.0"
{key}

[matrix.linux.manywheel]
pythons = ["3.9", "3.10", "3.11", "3.12", "3.13t"]
cudas = ["cpu"]

[[machines]]
name = "m"
platform = "linux"
queues = 1
"""


def test_the_config_key_makes_one_build_per_floor(tmp_path: Path) -> None:
    path = tmp_path / "nightly.toml"
    path.write_text(CONFIG.format(key='limited_api = "3.10"'))
    c = load(path)
    assert c.project.limited_api == "cp310"
    assert [(b.id, b.tests_on) for b in c.builds] == [
        ("manywheel_3.9_cpu", ()), ("manywheel_3.10_cpu", ("3.10", "3.11", "3.12")),
        ("manywheel_3.13t_cpu", ())]
    path.write_text(CONFIG.format(key=""))
    assert [b.id for b in load(path).builds] == [
        "manywheel_3.9_cpu", "manywheel_3.10_cpu", "manywheel_3.11_cpu", "manywheel_3.12_cpu",
        "manywheel_3.13t_cpu"]


def test_a_bad_floor_and_a_misspelt_key_are_config_errors(tmp_path: Path) -> None:
    path = tmp_path / "nightly.toml"
    path.write_text(CONFIG.format(key='limited_api = "abi3"'))
    with pytest.raises(ConfigError) as bad:
        load(path)
    assert "project.limited_api" in str(bad.value)
    assert "not a limited-API floor" in str(bad.value)
    assert bad.value.exit_code == 2
    path.write_text(CONFIG.format(key='limited_apis = "cp310"'))
    with pytest.raises(ConfigError, match="limited_api"):
        load(path)


# ---------------------------------------------------------------------------- detection


@pytest.mark.parametrize(("files", "floor", "tagged"), [
    ({"setup.cfg": "[bdist_wheel]\npy_limited_api = cp310\n"}, "cp310", True),
    ({"pyproject.toml": '[tool.distutils.bdist_wheel]\npy_limited_api = "cp311"\n'},
     "cp311", True),
    ({"pyproject.toml": '[tool.scikit-build]\nwheel.py-api = "cp312"\n'}, "cp312", True),
    # argon2-cffi-bindings: abi3 from 3.10, abi3t (PEP 803) from 3.15t.
    ({"pyproject.toml": '[tool.scikit-build]\nwheel.py-api = "cp310.cp315t"\n'}, "cp310", True),
    ({"pyproject.toml": "[tool.meson-python]\nlimited-api = true\n",
      "meson.build": "py.extension_module('m', 'm.c', limited_api: '3.10', install: true)\n"},
     "cp310", True),
    ({"meson.build": "py.extension_module('m', 'm.c', limited_api: '3.9')\n"}, "cp39", False),
    ({"setup.py": "from setuptools import setup, Extension\nsetup(ext_modules=[Extension("
      "'m', ['m.c'], py_limited_api=True)], options={'bdist_wheel': "
      "{'py_limited_api': 'cp310'}})\n"}, "cp310", True),
    ({"setup.py": "from setuptools import setup, Extension\nsetup(ext_modules=[Extension("
      "'m', ['m.c'], py_limited_api=True, define_macros=[('Py_LIMITED_API', '0x030B0000')])])\n"},
     "cp311", False),
    ({"pyproject.toml": '[tool.setuptools]\next-modules = [{name = "m", sources = ["m.c"], '
      'py-limited-api = true}]\n'}, "", False),
    ({"src/m.c": "#define Py_LIMITED_API 0x030A0000\n#include <Python.h>\n"}, "cp310", False),
    ({"CMakeLists.txt": "add_compile_definitions(Py_LIMITED_API=0x030C0000)\n"}, "cp312", False),
    # tree-sitter's grammars: a bdist_wheel subclass says the tag.
    ({"setup.py": "from wheel.bdist_wheel import bdist_wheel\nclass B(bdist_wheel):\n"
      "    def get_tag(self):\n        python, abi, platform = super().get_tag()\n"
      "        if python.startswith('cp'):\n            python, abi = 'cp39', 'abi3'\n"
      "        return python, abi, platform\n"}, "cp39", True),
])
def test_detection_reads_each_way_a_project_says_it(
    tmp_path: Path, files: dict[str, str], floor: str, tagged: bool
) -> None:
    src = _project(tmp_path / "p", files)
    found = detect_limited_api(src, _files(src))
    assert found is not None
    assert (found.floor, found.tagged) == (floor, tagged)
    assert found.evidence


def test_no_limited_api_is_none_and_the_code_is_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    src = _project(tmp_path / "p", {
        "setup.py": f"open({str(marker)!r}, 'w').write('x')\n"
                    "from setuptools import setup\nsetup(name='p', py_limited_api=False)\n",
        "setup.cfg": "[bdist_wheel]\nuniversal = 1\n",
        "pyproject.toml": '[tool.scikit-build]\nwheel.py-api = "py3"\n',
        "src/m.c": "/* Py_LIMITED_API is not used here */\n",
    })
    assert detect_limited_api(src, _files(src)) is None
    assert not marker.exists()


def test_a_linked_build_file_is_not_followed(tmp_path: Path) -> None:
    outside = _project(tmp_path / "outside", {"setup.cfg": "[bdist_wheel]\npy_limited_api = cp310\n"})
    src = tmp_path / "p"
    src.mkdir()
    os.symlink(outside / "setup.cfg", src / "setup.cfg")
    assert detect_limited_api(src, []) is None


def test_a_declared_tag_wins_over_a_define(tmp_path: Path) -> None:
    src = _project(tmp_path / "p", {"setup.cfg": "[bdist_wheel]\npy_limited_api = cp39\n",
                                    "m.c": "#define Py_LIMITED_API 0x030C0000\n"})
    found = detect_limited_api(src, _files(src))
    assert found is not None
    assert found.floor == "cp39"


# ---------------------------------------------------------------------------- init


def _c_project(root: Path, cfg: str) -> Path:
    return _project(root, {
        "setup.py": "from setuptools import setup, Extension\nsetup(name='lim', version='1.0', "
                    "python_requires='>=3.10', ext_modules=[Extension('lim', ['lim.c'], "
                    "py_limited_api=True, define_macros=[('Py_LIMITED_API', '0x030A0000')])])\n",
        "setup.cfg": cfg,
        "lim.c": "#include <Python.h>\n",
    })


def test_init_writes_the_floor_of_a_declared_abi3_wheel(tmp_path: Path) -> None:
    src = _c_project(tmp_path / "p", "[bdist_wheel]\npy_limited_api = cp310\n")
    facts = read_facts(src)
    pythons = {xy: f"/opt/py{xy}/bin/python" for xy in ("3.10", "3.11", "3.12", "3.13")}
    text = render(facts, pythons, source="p")
    assert 'limited_api = "cp310"' in text
    assert "setup.cfg [bdist_wheel] py_limited_api = cp310" in text
    config = parse(tomllib.loads(text), path=tmp_path / "nightly.toml", text=text)
    assert [(b.id, b.tests_on) for b in config.builds] == [
        ("manywheel_3.10_cpu", ("3.10", "3.11", "3.12", "3.13"))]


def test_init_keeps_one_build_per_python_when_the_wheel_is_not_declared_abi3(
    tmp_path: Path
) -> None:
    src = _c_project(tmp_path / "p", "")
    facts = read_facts(src)
    assert facts.limited_api is not None
    assert not facts.limited_api.tagged
    text = render(facts, {"3.10": "/opt/a/bin/python", "3.11": "/opt/b/bin/python"},
                  source="p")
    assert "its wheel is not declared abi3" in text
    data = tomllib.loads(text)
    assert "limited_api" not in data["project"]
    config = parse(data, path=tmp_path / "nightly.toml", text=text)
    assert [b.id for b in config.builds] == ["manywheel_3.10_cpu", "manywheel_3.11_cpu"]


# ---------------------------------------------------------------------------- test on each


@dataclass(frozen=True)
class _Ran:
    ok: bool
    reason: str | None = None


def _job(tmp_path: Path) -> Job:
    return Job(build_id="manywheel_3.10_cpu", package="manywheel", python="3.10", cuda="cpu",
               env={"DESIRED_PYTHON": "3.10", "PYTHON": "/x/python3.10",
                    "BUILD_VERSION": "1.0"},
               recipes_dir=tmp_path, source_dir=tmp_path, output_dir=tmp_path / "o",
               work_dir=tmp_path / "w", timeout_s=60)


def test_each_python_is_tested_even_after_one_fails(tmp_path: Path) -> None:
    from nightly.config import load as load_config

    path = tmp_path / "nightly.toml"
    path.write_text(CONFIG.format(key='limited_api = "cp310"'))
    config = load_config(path)
    build = next(b for b in config.builds if b.limited_api)
    seen: list[tuple[str, str, str, str | None]] = []

    def scripted(kind: str, build: Build, files: list[Path], job: Job, out: object,
                 cancel: threading.Event) -> _Ran:
        seen.append((build.python, job.python, job.env["DESIRED_PYTHON"], job.env.get("PYTHON")))
        return _Ran(ok=build.python != "3.11", reason="smoke test: exit status 1: no module")

    wheel = tmp_path / "lim-1.0-cp310-abi3-manylinux_2_28_x86_64.whl"
    logged: list[bytes] = []
    r = abi3test.run_each(scripted, config, build, [wheel], _job(tmp_path), logged.append,
                           threading.Event())
    assert [s[:3] for s in seen] == [(p, p, p) for p in ("3.10", "3.11", "3.12")]
    assert all(s[3] is None for s in seen)  # the host's interpreter of that Python, not 3.10's
    assert not r.ok
    assert r.reason == "smoke test: on Python 3.11: exit status 1: no module"
    assert [(t.python, t.result) for t in r.tests] == [
        ("3.10", "passed"), ("3.11", "failed"), ("3.12", "passed")]
    assert b"3.10 passed, 3.11 failed, 3.12 passed" in b"".join(logged)


def test_a_wheel_tagged_for_one_python_fails_before_any_test(tmp_path: Path) -> None:
    build = Build(package="manywheel", python="3.10", cuda="cpu", limited_api="cp310",
                  tests_on=("3.10", "3.11"))
    ran: list[str] = []

    def scripted(*args: object) -> _Ran:
        ran.append("x")
        return _Ran(ok=True)

    wheel = tmp_path / "lim-1.0-cp310-cp310-manylinux_2_28_x86_64.whl"
    r = abi3test.run_each(scripted, None, build, [wheel], _job(tmp_path),  # type: ignore[arg-type]
                           lambda b: None, threading.Event())
    assert not r.ok
    assert not ran
    assert r.reason is not None
    assert "is tagged cp310-cp310, not abi3" in r.reason
    assert "py_limited_api = cp310" in r.reason
    assert abi3test.not_abi3(build, [tmp_path / "lim-1.0-cp310-abi3-linux_x86_64.whl",
                                     tmp_path / "lim_data-1.0-py3-none-any.whl"]) is None


# ---------------------------------------------------------------------------- the records


def test_python_tests_round_trip_and_read_leniently() -> None:
    tests = (PythonTest(python="3.10", result="passed", seconds=1.5),
             PythonTest(python="3.11", result="failed", seconds=2.0, reason="exit status 1"))
    tested = {"result": "failed", "cpu": {"result": "failed"},
              "pythons": [t.to_json() for t in tests]}
    record = TestRecord.from_json(tested)
    assert record is not None
    assert record.pythons == tests
    assert TestRecord.from_json(None) is None
    assert read_tests([{"python": "3.12"}, "x", {"python": 3, "result": "passed"},
                       {"python": "3.13", "result": "exploded"}, *tested["pythons"]]) == tests
    assert read_tests({"python": "3.10"}) == ()
    assert results_text(tests) == "tested on 3.10 passed, 3.11 failed"
    line = BuildSummary(outcome="failed", python_tests=tests)
    data = line.to_json()
    assert data["tested_pythons"] == [t.to_json() for t in tests]
    again = BuildSummary.from_json(data)
    assert again.python_tests == tests
    assert "tested_pythons" not in again.extra
    assert "tested_pythons" not in BuildSummary(outcome="succeeded").to_json()
