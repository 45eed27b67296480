"""A cluster worker's own host settings (nightly.cluster.hostconfig): the build user and
build area come from the file $NIGHTLY_WORKER_CONFIG names, never from the configuration the
orchestrator sends; and each worker slot builds in a stable folder of its own
(builds/session.py, `stable_under`)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
from pathlib import Path

import pytest

from nightly import config as cfg
from nightly.builds.area import slot
from nightly.builds.run.jobs import RunContext
from nightly.builds.session.build_session import SessionSpec, open_session
from nightly.cluster.hostconfig import ENV, HostSettings, host_settings
from nightly.cluster.worker import worker_config
from nightly.core.matrix import Build
from nightly.errors import ConfigError
from nightly.workspace import Day, State


def _config(tmp_path: Path, text: str) -> cfg.Config:
    path = tmp_path / "nightly.toml"
    path.write_text(text)
    return cfg.load(path)


def test_no_file_no_build_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert host_settings() == HostSettings()


def test_the_hosts_file_names_the_user_and_its_build_area(tmp_path: Path) -> None:
    f = tmp_path / "etc" / "worker.toml"
    f.parent.mkdir()
    f.write_text('[executor.local]\nuser = "builder"\nbuild_dir = "area"\n')
    got = host_settings({ENV: str(f)})
    assert got == HostSettings(user="builder", build_dir=str(tmp_path / "etc" / "area"), file=f)


@pytest.mark.parametrize(("text", "named"), [
    ('[executor.local]\nusr = "b"\n', "unknown key 'usr'"),
    ('[executor.local]\nuser = 3\n', "[executor.local.user]: must be a string"),
    ('[executor.container]\nuser = "b"\n', "unknown setting for a worker host: executor.container"),
    ('[cluster]\naddress = "x"\n', "unknown setting for a worker host: cluster"),
    ("[executor\n", "invalid TOML"),
])
def test_anything_else_in_the_file_is_named(tmp_path: Path, text: str, named: str) -> None:
    f = tmp_path / "worker.toml"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        host_settings({ENV: str(f)})
    assert named in str(e.value)
    assert str(f) in str(e.value)


def test_a_missing_file_is_named_with_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"no such file .*{ENV}"):
        host_settings({ENV: str(tmp_path / "nope.toml")})


def test_the_submitting_machines_build_user_never_decides_a_workers(
    tmp_path: Path, minimal_config_text: str
) -> None:
    c = _config(tmp_path, minimal_config_text)
    c = dataclasses.replace(c, local=dataclasses.replace(c.local, user="orchestrators",
                                                         build_dir="/orchestrators/area"))
    bare = worker_config(c, tmp_path / "recipes", tmp_path / "w", gpu=False)
    assert (bare.local.user, bare.local.build_dir) == ("", "")
    host = HostSettings(user="hosts", build_dir="/hosts/area", file=tmp_path / "w.toml")
    mine = worker_config(c, tmp_path / "recipes", tmp_path / "w", gpu=False, host=host)
    assert (mine.local.user, mine.local.build_dir) == ("hosts", "/hosts/area")
    assert mine.path == tmp_path / "w.toml"  # errors about the user name the host's file
    assert mine.local.pythons == c.local.pythons  # the rest is the night's


def test_each_worker_slot_has_its_stable_folder_and_a_held_one_falls_back(
    tmp_path: Path, minimal_config: Path
) -> None:
    config = dataclasses.replace(cfg.load(minimal_config), root=tmp_path / "w")
    day = Day(config.root / "attempts", dt.date(2024, 5, 1), name="tok")
    day.create()
    source = tmp_path / "src"
    source.mkdir()
    (source / "a.c").write_text("int a;\n")
    ctx = RunContext(config=config, day=day, state=State(day.state_path), source_dir=source,
                     version="1.0.0.dev20240501", channel="nightly", machine="w")
    builds = [Build(package="manywheel", python="3.7m", cuda="cpu")]
    notes: list[str] = []

    def spec(n: int) -> SessionSpec:
        return SessionSpec(executor="local", preflight=lambda *_: None,
                           stable_under=f"slots/{n}", log=notes.append)

    with contextlib.ExitStack() as stack:
        s0 = stack.enter_context(open_session(ctx, builds, spec(0)))
        s1 = stack.enter_context(open_session(ctx, builds, spec(1)))
        again = stack.enter_context(open_session(ctx, builds, spec(0)))
        assert s0 is not None
        assert s1 is not None
        assert again is not None
        assert s0.ctx.slot == config.root / "slots" / "0" / slot.NAME
        assert s1.ctx.slot == config.root / "slots" / "1" / slot.NAME
        assert (s1.ctx.slot / "source" / "a.c").read_text() == "int a;\n"
        assert again.ctx.slot is None  # slot 0 is held: the day folder
        assert len(notes) == 1
        assert "in use by another night" in notes[0]
    with open_session(ctx, builds, spec(0)) as later:  # released with its session
        assert later is not None
        assert later.ctx.slot == config.root / "slots" / "0" / slot.NAME


def test_a_refusal_about_who_builds_says_where_a_worker_host_sets_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from nightly.cluster.worker import _on_this_worker
    from nightly.errors import ConfigError
    from nightly.hardening import USER_KEY

    refused = ConfigError("nightly runs as root with credentials", file="/o/nightly.toml",
                          key=USER_KEY)
    monkeypatch.delenv("NIGHTLY_WORKER_CONFIG", raising=False)
    assert "$NIGHTLY_WORKER_CONFIG names" in _on_this_worker(refused)
    other = ConfigError("bad", file="/o/nightly.toml", key="cache.url")
    assert _on_this_worker(other) == str(other)
    monkeypatch.setenv("NIGHTLY_WORKER_CONFIG", "/etc/nightly/worker.toml")
    assert _on_this_worker(refused) == str(refused)
