"""The build phase on this machine: its queues in parallel, each serially, work-conserving
(Runner.run_queues), with live progress and every attempt recorded in the history."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence

from nightly.builds.repro import check as repro_check
from nightly.builds.run.jobs import RunContext, make_job
from nightly.builds.run.phase import NightContext
from nightly.builds.run.runner import SmokeHook
from nightly.builds.session import build_session as session
from nightly.builds.test.smoke import night_smoke
from nightly.builds.view.progress import Progress
from nightly.config import Config, Machine
from nightly.core.matrix import Build
from nightly.executors import Executor, make_executor
from nightly.history.feeds import recorder
from nightly.workspace import Day, State
from nightly.workspace import live as live_state


class LocalPhase:
    """The build phase on this machine (nightly.builds.run.phase.BuildPhase): its queues, in parallel,
    each serially, work-conserving (Runner.run_queues)."""

    def __init__(
        self,
        config: Config,
        machine: Machine,
        executor: str,
        *,
        queues: Sequence[Sequence[Build]] | None = None,
        estimate_s: float = 0.0,
        keep_container: bool = False,
        arch_executors: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        self._machine = machine
        self.executor = executor
        # Target architecture -> its executor, where not `executor` (Machine.executor_for).
        self.arch_executors = {a: e for a, e in (arch_executors or {}).items() if e != executor}
        self.queues = queues
        self.estimate_s = estimate_s
        self.keep_container = keep_container

    @property
    def machine(self) -> Machine:
        return self._machine

    def meta(self) -> dict[str, object]:
        return {}

    def dry_run(self, day: Day, builds: Sequence[Build], version: str, channel: str) -> None:
        config = self.config
        state = State(day.path / "nonexistent-state.json")
        ctx = RunContext(config=config, day=day, state=state, source_dir=day.source,
                         version=version, channel=channel, machine=self.machine.name)
        ex = make_executor(self.executor, config, keep_container=self.keep_container)
        ctx = session.where(ctx, ex)  # where it would run (nothing made)
        others = {name: make_executor(name, config, keep_container=self.keep_container)
                  for name in set(self.arch_executors.values())}
        for b in builds:
            bex = others.get(self.arch_executors.get(b.target_arch, ""), ex)
            desc = bex.describe(make_job(ctx, b, executor=bex.name))
            print(json.dumps({"build": b.id, "machine": self.machine.name, **desc}, indent=2,
                             default=str))

    def run(self, night: NightContext, todo: Sequence[Build]) -> float:
        ctx = RunContext(
            config=night.config, day=night.day, state=night.state, source_dir=night.source_dir,
            version=night.version, channel=night.channel, machine=self.machine.name,
            repro_builds=repro_check.selected(night.config.build.check_reproducible, todo),
        )

        def smoke(ex: Executor) -> SmokeHook | None:
            return night_smoke(night.config, ex, night.source_dir, where=self.machine.name,
                               gpu_host=self.machine.gpu)

        spec = session.SessionSpec(
            executor=self.executor, arch_executors=self.arch_executors,
            keep_container=self.keep_container, stamp=night.commit or night.source_describe,
            smoke=smoke, log=night.log)
        with session.open_session(ctx, todo, spec) as builds:
            assert builds is not None  # no `refused`: a refusal raises
            self._run_queues(night, todo, builds)
        return self.estimate_s

    def _run_queues(self, night: NightContext, todo: Sequence[Build],
                    builds: session.BuildSession) -> None:
        n_q = len(self.queues) if self.queues is not None else self.machine.queues
        estimates, source = build_estimates(night, todo)
        progress = Progress(  # once the executor is ready: its clock starts with the builds
            total=len(todo), master_log=night.day.master / "run.log",
            estimate_s=self.estimate_s or sum(estimates.values()) / max(1, n_q),
            live=night.live, queue_logs=night.day.master, estimates=estimates,
            estimate_source=source, live_path=live_state.path_of(night.day.master),
        )
        with progress:
            progress.log(
                f"night {night.day.name} on machine {self.machine.name}: {len(todo)} to "
                f"build, {len(night.builds) - len(todo)} already succeeded, {n_q} queues, "
                f"executor {builds.executor.name}"
                + "".join(f", {a} builds executor {e}"
                          for a, e in sorted(self.arch_executors.items()) if a in builds.by_arch)
                + f", source {night.source_describe}"
            )
            record = recorder(night.history, night.day.name, night.state,
                              commit=night.commit, channel=night.channel, log=night.log)

            def on_event(kind: str, info: Mapping[str, object]) -> None:
                progress(kind, info)
                record(kind, info)

            runner = builds.runner(on_event)
            todo_ids = {b.id for b in todo}
            if self.queues is not None:
                qs = [[b for b in q if b.id in todo_ids] for q in self.queues]
                runner.run_queues(qs, order=[b for b in night.builds if b.id in todo_ids])
            else:
                qs = [list(todo[i::n_q]) for i in range(n_q)]
                runner.run_queues(qs, order=todo)

    def finish(self, night: NightContext) -> None:
        pass


def build_estimates(night: NightContext, todo: Sequence[Build]) -> tuple[dict[str, float], str]:
    """Each build's estimate (history's where it has one and the config allows it, else the
    configured guess) and where they came from: "history", "config" (a guess: no history
    yet) or "fixed" (the config's, the history not used)."""
    known: dict[str, float] = {}
    used = night.config.uses_history_estimates()
    if used:
        try:
            known = night.history.estimates(b.id for b in todo)
        except (sqlite3.Error, OSError):
            known = {}
    return ({b.id: known.get(b.id) or night.config.estimate_for(b) for b in todo},
            "history" if known else "config" if used else "fixed")
