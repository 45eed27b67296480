"""The build environment kept from night to night (issue 59, nightly/builds/area/buildenv.py,
recipes/common/buildenv.sh and envkey.py): through real `nightly run` nights of a small C
project built by the real manywheel recipe on this machine,

- night 2 reuses night 1's environment (one log line says so, the key file unchanged);
- a change to [build-system] requires rebuilds it, the log line naming what changed;
- a tampered or missing key rebuilds it;
- two builds of one night running at once (two queues) each use an environment of their own,
  and each is kept for its own build id;
- the log says which installer filled it (uv here: nightly's own, beside its Python);
- pypa/build is the wheel's front end there (part of the key), the backend asked for its
  requirements once and never for metadata.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from tests.integration.test_cache_nights import ctiny_config, write_project
from tests.support.projects import local_machine

RunCli = Callable[..., tuple[int, str, str]]
BUILD = "manywheel_3.11_cpu"


def _ctiny(tmp_path: Path, *, queues: int = 1, extra: str = "") -> tuple[Path, Path]:
    """(the ctiny project's source, its config): local queues as root, cache off."""
    src = tmp_path / "ctiny"
    write_project(src)
    return src, ctiny_config(tmp_path, src,
                             machine=local_machine(queues=queues),
                             smoke="assert ctiny.total(2) == 26", cache="enabled = false",
                             extra=extra)


def _night(tmp_path: Path, run_cli: RunCli, config: Path, date: str) -> dict[str, str]:
    """One night; each build's log by build id."""
    code, out, err = run_cli(["run", "--config", str(config), "--date", date, "--no-upload"],
                             cwd=tmp_path, timeout=900)
    day = tmp_path / "nightlies" / date
    assert code == 0, out + err + "".join(
        p.read_text()[-4000:] for p in (day / "logs").rglob("*.log"))
    builds = json.loads((day / "state.json").read_text())["builds"]
    return {bid: (day / e["log"]).read_text() for bid, e in builds.items()}


def _lines(log: str, needle: str) -> list[str]:
    return [line for line in log.splitlines() if needle in line]


def test_a_kept_environment_is_reused_and_rebuilt_when_its_key_changes(
    tmp_path: Path, run_cli: RunCli
) -> None:
    src, config = _ctiny(tmp_path)
    stable = tmp_path / "nightlies" / ".builds"
    kept = stable / "envs" / BUILD / "build-venv"
    venv = stable / "work" / BUILD / "scratch" / "build-venv"

    first = _night(tmp_path, run_cli, config, "2030_01_01")[BUILD]
    assert _lines(first, "build environment: none kept from an earlier night"), first
    assert _lines(first, "installer: uv ("), first  # which installer ran: one line
    assert len(_lines(first, "front end: pypa/build (")) == 1, first  # and which front end
    key = (kept / ".nightly-env-key").read_text()
    assert "build requirements: setuptools>=40.8 wheel build\n" in key
    assert not (stable / "work" / BUILD).exists()  # only the environment was kept aside

    second = _night(tmp_path, run_cli, config, "2030_01_02")[BUILD]
    assert _lines(second, f"build environment: reused {venv}"), second
    assert not _lines(second, "rebuilt")
    assert _lines(second, "front end: pypa/build ("), second
    assert "smoke: passed" in second
    assert (kept / ".nightly-env-key").read_text() == key

    # The project's build requirements change: the environment is made again.
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=40.8", "wheel>=0.30"]\n'
        'build-backend = "setuptools.build_meta"\n')
    third = _night(tmp_path, run_cli, config, "2030_01_03")[BUILD]
    assert _lines(third, f"build environment {venv} rebuilt: its build requirements changed "
                         "(setuptools>=40.8 wheel build -> setuptools>=40.8 wheel>=0.30 build)"), third
    assert "build requirements: setuptools>=40.8 wheel>=0.30 build" in (
        kept / ".nightly-env-key").read_text()

    # A key file someone edited: rebuilt, naming what differs.
    (kept / ".nightly-env-key").write_text(
        (kept / ".nightly-env-key").read_text().replace("isolation: 1", "isolation: 0"))
    fourth = _night(tmp_path, run_cli, config, "2030_01_04")[BUILD]
    assert _lines(fourth, f"build environment {venv} rebuilt: its key changed: isolation"), fourth

    # No key at all (a fill that never finished): rebuilt.
    (kept / ".nightly-env-key").unlink()
    fifth = _night(tmp_path, run_cli, config, "2030_01_05")[BUILD]
    assert _lines(fifth, f"build environment {venv} rebuilt: it has no key file"), fifth
    assert (kept / ".nightly-env-key").is_file()


def test_two_builds_running_at_once_never_share_an_environment(
    tmp_path: Path, run_cli: RunCli
) -> None:
    _, config = _ctiny(tmp_path, queues=2)
    config.write_text(config.read_text().replace('pythons = ["3.11"]', 'pythons = ["3.11", "3.12"]'))
    builds = ("manywheel_3.11_cpu", "manywheel_3.12_cpu")
    stable = tmp_path / "nightlies" / ".builds"
    for date in ("2030_01_01", "2030_01_02"):
        logs = _night(tmp_path, run_cli, config, date)
        state = json.loads((tmp_path / "nightlies" / date / "state.json").read_text())["builds"]
        a, b = (state[bid] for bid in builds)
        # They ran at once (two queues): each started before the other ended.
        assert a["queue"] != b["queue"]
        assert a["started"] < b["ended"], (a, b)
        assert b["started"] < a["ended"], (a, b)
        used = {}
        for bid in builds:
            venv = stable / "work" / bid / "scratch" / "build-venv"
            verb = "none kept from an earlier night" if date == "2030_01_01" else f"reused {venv}"
            assert _lines(logs[bid], f"build environment: {verb}"), logs[bid]
            used[bid] = venv
            # Its own environment, filled for its own interpreter.
            assert f"python version: {bid.split('_')[1]}." in (
                stable / "envs" / bid / "build-venv" / ".nightly-env-key").read_text()
        assert used[builds[0]] != used[builds[1]]
    kept = [os.stat(stable / "envs" / bid / "build-venv").st_ino for bid in builds]
    assert kept[0] != kept[1]


COUNTING_BACKEND = """from setuptools import build_meta as _b
from setuptools.build_meta import *  # noqa: F401,F403


def _note(name):
    with open({log!r}, "a") as f:
        f.write(name + "\\n")


def get_requires_for_build_wheel(config_settings=None):
    _note("get_requires_for_build_wheel")
    return _b.get_requires_for_build_wheel(config_settings)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    _note("prepare_metadata_for_build_wheel")
    return _b.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _note("build_wheel")
    return _b.build_wheel(wheel_directory, config_settings, metadata_directory)
"""


def test_pypa_build_builds_the_wheel_asking_the_backend_once(
    tmp_path: Path, run_cli: RunCli
) -> None:
    """The filled build environment's wheel is built by pypa/build: the backend's hooks as
    the night calls them (an in-tree backend that notes each call) are one
    get_requires_for_build_wheel (nightly's own, whose answer fills the environment) and one
    build_wheel; pip's front end added prepare_metadata_for_build_wheel (its egg_info)."""
    src, config = _ctiny(tmp_path)
    calls = tmp_path / "hooks.log"
    (src / "_backend").mkdir()
    (src / "_backend" / "counting.py").write_text(COUNTING_BACKEND.format(log=str(calls)))
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=40.8", "wheel"]\n'
        'build-backend = "counting"\nbackend-path = ["_backend"]\n')
    for date in ("2030_01_01", "2030_01_02"):  # filled, then kept
        log = _night(tmp_path, run_cli, config, date)[BUILD]
        assert _lines(log, "front end: pypa/build ("), log
        assert not _lines(log, "front end: pip wheel"), log
        assert "smoke: passed" in log
        assert calls.read_text().split() == ["get_requires_for_build_wheel", "build_wheel"], log
        calls.unlink()


def test_pip_builds_the_wheel_where_pypa_build_cannot_be_had(
    tmp_path: Path, run_cli: RunCli
) -> None:
    """The night's wheelhouse holds the build requirements alone (no index): pypa/build
    cannot be installed, so the requirements go in without it and pip's front end builds the
    wheel, one log line saying so and why."""
    _, config = _ctiny(tmp_path, extra="[build]\nwheelhouse = true\n")
    log = _night(tmp_path, run_cli, config, "2030_01_01")[BUILD]
    assert _lines(log, "pypa/build could not be installed with the build requirements"), log
    assert _lines(log, "front end: pip wheel (pypa/build is not in the build environment"), log
    assert not _lines(log, "front end: pypa/build"), log
    assert "smoke: passed" in log
