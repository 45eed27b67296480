"""builds.execute.run_builds: the executor opened, the preflight, the smoke test, the Runner,
in that order, with the executor's name back; a refused preflight runs nothing."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from nightly import config as cfg
from nightly.builds.execute import run_builds
from nightly.builds.jobs import RunContext
from nightly.builds.runner import Runner
from nightly.core.matrix import Build
from nightly.errors import ExecutorError, NightlyError
from nightly.executors import Executor
from nightly.workspace import Day, State


def _ctx(tmp_path: Path, minimal_config: Path) -> tuple[RunContext, list[Build]]:
    import datetime as dt

    config = cfg.load(minimal_config)
    day = Day(tmp_path / "root", dt.date(2024, 5, 1))
    day.create()
    ctx = RunContext(config=config, day=day, state=State(day.state_path), source_dir=tmp_path,
                     version="1.0.0.dev20240501", channel="nightly", machine="a")
    return ctx, [Build(package="manywheel", python="3.7m", cuda="cpu")]


def test_the_steps_in_order(tmp_path: Path, minimal_config: Path) -> None:
    ctx, builds = _ctx(tmp_path, minimal_config)
    seen: list[str] = []

    def preflight(c: RunContext, ex: Executor, todo: Sequence[Build]) -> None:
        seen.append(f"preflight {ex.name} {[b.id for b in todo]}")

    def run(runner: Runner) -> None:
        seen.append(f"run smoke={runner.smoke is not None}")

    def smoke(ex: Executor) -> None:
        seen.append("smoke")

    name = run_builds(ctx, "local", builds, run, preflight=preflight, smoke=smoke)
    assert name == "local"
    assert seen == [f"preflight local {[builds[0].id]}", "smoke", "run smoke=False"]
    seen.clear()
    run_builds(ctx, "local", [], run, preflight=preflight)  # nothing to build: no preflight
    assert seen == ["run smoke=False"]


def test_a_refused_preflight_runs_nothing_or_raises(tmp_path: Path, minimal_config: Path) -> None:
    ctx, builds = _ctx(tmp_path, minimal_config)
    ran: list[Runner] = []

    def preflight(c: RunContext, ex: Executor, todo: Sequence[Build]) -> None:
        raise ExecutorError("no engine here")

    refused: list[NightlyError] = []
    assert run_builds(ctx, "local", builds, ran.append, preflight=preflight,
                      refused=refused.append) == "local"
    assert [str(e) for e in refused] == ["no engine here"]
    assert ran == []
    with pytest.raises(ExecutorError, match="no engine here"):
        run_builds(ctx, "local", builds, ran.append, preflight=preflight)
    assert ran == []
