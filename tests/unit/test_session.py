"""builds.session.open_session: the executor opened, the builds' context prepared (the stable
build folder), the preflight, the smoke test, then a Runner made with the caller's event sink;
a refused preflight runs nothing (or raises)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from pathlib import Path

import pytest

from nightly import config as cfg
from nightly.builds.area import slot
from nightly.builds.run.jobs import RunContext
from nightly.builds.session.build_session import SessionSpec, open_session
from nightly.core.matrix import Build
from nightly.errors import ExecutorError, NightlyError
from nightly.executors import Executor
from nightly.workspace import Day, State


def _ctx(tmp_path: Path, minimal_config: Path) -> tuple[RunContext, list[Build]]:
    config = dataclasses.replace(cfg.load(minimal_config), root=tmp_path / "root")
    day = Day(config.root, dt.date(2024, 5, 1))
    day.create()
    source = tmp_path / "src"
    source.mkdir()
    (source / "a.c").write_text("int a;\n")
    ctx = RunContext(config=config, day=day, state=State(day.state_path), source_dir=source,
                     version="1.0.0.dev20240501", channel="nightly", machine="a")
    return ctx, [Build(package="manywheel", python="3.7m", cuda="cpu")]


def test_the_steps_in_order(tmp_path: Path, minimal_config: Path) -> None:
    ctx, builds = _ctx(tmp_path, minimal_config)
    seen: list[str] = []

    def preflight(c: RunContext, ex: Executor, todo: Sequence[Build]) -> None:
        seen.append(f"preflight {ex.name} {[b.id for b in todo]} slot={c.slot}")

    def smoke(ex: Executor) -> None:
        seen.append("smoke")

    events: list[str] = []
    spec = SessionSpec(executor="local", preflight=preflight, smoke=smoke)
    with open_session(ctx, builds, spec) as session:
        assert session is not None
        runner = session.runner(lambda kind, info: events.append(kind))
        runner.on_event("start", {})
        held = ctx.config.root / slot.NAME
        assert (held / "source" / "a.c").read_text() == "int a;\n"  # the stable folder, filled
        assert session.ctx.slot == held
        assert runner.smoke is None
        assert runner.executor is session.executor
    assert seen == [f"preflight local {[builds[0].id]} slot={held}", "smoke"]
    assert events == ["start"]
    seen.clear()
    with open_session(ctx, [], dataclasses.replace(spec, stable=False)) as session:
        assert session is not None
        assert session.ctx.slot is None
    assert seen == ["smoke"]  # nothing to build: no preflight


def test_a_refused_preflight_runs_nothing_or_raises(tmp_path: Path, minimal_config: Path) -> None:
    ctx, builds = _ctx(tmp_path, minimal_config)

    def preflight(c: RunContext, ex: Executor, todo: Sequence[Build]) -> None:
        raise ExecutorError("no engine here")

    refused: list[NightlyError] = []
    spec = SessionSpec(executor="local", preflight=preflight, stable=False)
    with open_session(ctx, builds, spec, refused=refused.append) as session:
        assert session is None
    assert [str(e) for e in refused] == ["no engine here"]
    with pytest.raises(ExecutorError, match="no engine here"), open_session(ctx, builds, spec):
        pytest.fail("a refused session was opened")
