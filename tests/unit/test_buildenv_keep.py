"""nightly/builds/area/buildenv.py: a build's environment kept in the slot between nights,
locked while its build runs, one per build id."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from nightly.builds.area import buildenv
from nightly.config import load
from nightly.errors import ConfigError
from nightly.executors.base import Job


def _slot(tmp_path: Path) -> Path:
    slot = tmp_path / ".builds"
    (slot / "locks").mkdir(parents=True, mode=0o700)
    return slot


def _job(slot: Path, build_id: str) -> Job:
    work = slot / "work" / build_id / "scratch"
    work.mkdir(parents=True)
    return Job(build_id=build_id, package="manywheel", python="3.12", cuda="cpu", env={},
               recipes_dir=slot, source_dir=slot / "source", output_dir=work.parent / "out",
               work_dir=work, timeout_s=60)


def _fill(venv: Path, key: str = "k") -> None:
    (venv / "bin").mkdir(parents=True)
    (venv / ".nightly-env-key").write_text(key)


def test_a_succeeded_builds_environment_comes_back_the_next_night(tmp_path: Path) -> None:
    slot = _slot(tmp_path)
    keeper = buildenv.Keeper()
    job = keeper.attach(_job(slot, "b"), enabled=True)
    assert job.env == {buildenv.REUSE_ENV: "1"}
    _fill(job.work_dir / "build-venv")
    keeper.release(job, succeeded=True)
    assert (slot / "envs" / "b" / "build-venv" / ".nightly-env-key").read_text() == "k"
    # The next night: its folder is new; the environment is moved back into it.
    shutil.rmtree(slot / "work")
    again = keeper.attach(_job(slot, "b"), enabled=True)
    assert (again.work_dir / "build-venv" / ".nightly-env-key").read_text() == "k"
    assert not (slot / "envs" / "b" / "build-venv").exists()


def test_one_build_id_is_never_used_by_two_builds_at_once(tmp_path: Path) -> None:
    slot = _slot(tmp_path)
    _fill(slot / "envs" / "b" / "build-venv")
    first = buildenv.take(slot, "b", _job(slot, "b").work_dir)
    assert first is not None
    other = tmp_path / "other"
    other.mkdir()
    # A second taker of the same build's environment while the first holds it: refused.
    assert buildenv.take(slot, "b", other) is None
    assert not (other / "build-venv").exists()
    buildenv.put_back(first, slot / "work" / "b" / "scratch", succeeded=False)
    assert buildenv.take(slot, "b", other) is not None


def test_a_failed_or_unkeyed_environment_is_not_kept(tmp_path: Path) -> None:
    slot = _slot(tmp_path)
    keeper = buildenv.Keeper()
    job = keeper.attach(_job(slot, "b"), enabled=True)
    _fill(job.work_dir / "build-venv")
    keeper.release(job, succeeded=False)
    assert not (slot / "envs" / "b" / "build-venv").exists()
    job2 = keeper.attach(_job(slot, "c"), enabled=True)
    (job2.work_dir / "build-venv" / "bin").mkdir(parents=True)  # filled, its key never written
    keeper.release(job2, succeeded=True)
    assert not (slot / "envs" / "c" / "build-venv").exists()


def test_outside_a_slot_or_switched_off_nothing_is_kept(tmp_path: Path) -> None:
    slot = _slot(tmp_path)
    assert buildenv.Keeper().attach(_job(slot, "b"), enabled=False).env == {}
    day = tmp_path / "day" / "work" / "b" / "scratch"
    day.mkdir(parents=True)
    job = Job(build_id="b", package="manywheel", python="3.12", cuda="cpu", env={},
              recipes_dir=slot, source_dir=slot, output_dir=day.parent / "out", work_dir=day,
              timeout_s=60)
    assert buildenv.Keeper().attach(job, enabled=True).env == {}


def test_the_config_keys_parse_and_refuse_what_they_do_not_know(
    write_config: Callable[[str], Path], minimal_config_text: str
) -> None:
    assert load(write_config(minimal_config_text)).build.reuse_env is True
    cfg = load(write_config(minimal_config_text + '\n[build]\nreuse_env = false\ninstaller = "pip"\n'))
    assert (cfg.build.reuse_env, cfg.build.installer) == (False, "pip")
    with pytest.raises(ConfigError) as exc:
        load(write_config(minimal_config_text + '\n[build]\ninstaller = "uvv"\n'))
    assert exc.value.key == "build.installer"
    with pytest.raises(ConfigError, match="unknown key") as exc:
        load(write_config(minimal_config_text + '\n[build]\nreuse_envs = false\n'))
    assert exc.value.hint == "did you mean 'reuse_env'?"
