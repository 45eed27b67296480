"""A cluster night's live view (issue 50): the workers' phase events, as the orchestrator's
Collector receives them on its topic, reach the same Progress a local night uses: the running
build's phase in logs/master/live.json (what `nightly status` reads) and in the plain lines.
The real cluster: tests/integration/test_cluster.py."""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from nightly import config as cfg
from nightly.builds.view.progress import Progress
from nightly.cluster.collector import Collector
from nightly.cluster.options import estimate_source
from nightly.core.matrix import Build
from nightly.workspace import Day, State, live

CPU = Build(package="manywheel", python="3.11", cuda="cpu")
OTHER = Build(package="manywheel", python="3.12", cuda="cpu")


def _event(kind: str, build: Build, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "build": build.id, "token": "t1", "worker": "tcp://10.0.0.2:4000",
            "worker_name": "linux-a", "host": "a", "slot": 0, "attempt": 1, **fields}


def _night(tmp_path: Path) -> tuple[Collector, Progress, Path, io.StringIO]:
    day = Day(tmp_path / "root", dt.date(2024, 5, 1))
    day.create()
    night: Any = SimpleNamespace(day=day, state=State(day.state_path))
    notes: list[str] = []
    collector = Collector(night, staging=None, builds=[CPU, OTHER],  # type: ignore[arg-type]
                          version="1.0.dev20240501", rebuild=lambda _: False,
                          keep_staging=True, note=notes.append)
    out = io.StringIO()
    path = live.path_of(day.master)
    progress = Progress(total=2, master_log=day.master / "run.log", live=False, stream=out,
                        estimates={CPU.id: 600.0}, live_path=path)
    collector.progress = progress
    return collector, progress, path, out


def test_a_workers_phase_events_reach_live_json_and_the_plain_lines(tmp_path: Path) -> None:
    collector, progress, path, out = _night(tmp_path)
    with progress:
        collector.on_event(_event("start", CPU, executor="local"))
        collector.on_event(_event("phase", CPU, phase="building",
                                  log="/srv/worker/attempts/t1/logs/running/x.log"))
        progress._refresh(force=True)
        state = live.read(path)
        assert state is not None
        (running,) = state.builds
        assert (running.build, running.phase, running.estimate_s) == (CPU.id, "building", 600.0)
        collector.on_event(_event("phase", CPU, phase="testing"))
        progress._refresh(force=True)
        state = live.read(path)
        assert state is not None
        assert state.builds[0].phase == "testing"
        # Another host's path is never followed for the last line.
        assert progress.running[0].watch is None
        # A phase the view does not know, or of a build not running, changes nothing.
        collector.on_event(_event("phase", CPU, phase="rm -rf"))
        collector.on_event(_event("phase", OTHER, phase="building"))
        assert [r.phase for r in progress.running.values()] == ["testing"]
    text = out.getvalue()
    assert f"phase  {CPU.id}: building" in text
    assert f"phase  {CPU.id}: testing" in text
    assert "rm -rf" not in text
    assert "\x1b" not in text


def test_a_gpu_test_starting_shows_as_the_gpu_test_phase(tmp_path: Path) -> None:
    collector, progress, path, _ = _night(tmp_path)

    class Tests:
        def __init__(self) -> None:
            self.seen: list[str] = []

        def on_event(self, ev: Any) -> None:
            self.seen.append(ev.build)

    tests = Tests()
    collector.tests = tests  # type: ignore[assignment]
    with progress:
        collector.on_event(_event("start", CPU, executor="local"))
        collector.on_event(_event("test-start", CPU, token="g1", worker_name="gpu-a"))
        progress._refresh(force=True)
        state = live.read(path)
        assert state is not None
        assert state.builds[0].phase == "GPU test"
    assert tests.seen == [CPU.id]


def test_the_estimates_source_is_the_historys_once_it_differs_from_the_config(
        tmp_path: Path, minimal_config_text: str) -> None:
    path = tmp_path / "nightly.toml"
    path.write_text(minimal_config_text)
    config = cfg.load(path)
    b = config.builds[0]
    assert estimate_source(config, {b.id: config.estimate_for(b)}) == "config"
    assert estimate_source(config, {b.id: config.estimate_for(b) + 30}) == "history"
    never = dataclasses.replace(config, history_estimates="never")
    assert estimate_source(never, {b.id: config.estimate_for(b) + 30}) == "fixed"
