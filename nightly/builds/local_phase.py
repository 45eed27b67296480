"""The build phase on this machine: its queues in parallel, each serially, work-conserving
(Runner.run_queues), with live progress and every attempt recorded in the history."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from nightly.builds import cache as compiler_cache
from nightly.builds import repro_check, slot, userarea
from nightly.builds.execute import preflight_images, run_builds
from nightly.builds.jobs import RunContext, make_job
from nightly.builds.phase import NightContext
from nightly.builds.progress import Progress
from nightly.builds.runner import Runner, SmokeHook
from nightly.builds.smoke import night_smoke
from nightly.config import Config, Machine
from nightly.errors import ExecutorError, UsageError
from nightly.executors import Executor, make_executor
from nightly.executors.local import LocalExecutor
from nightly.history.feeds import recorder
from nightly.plan.matrix import Build
from nightly.workspace import Day, State
from nightly.workspace import live as live_state


class LocalPhase:
    """The build phase on this machine (nightly.builds.phase.BuildPhase): its queues, in parallel,
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
        if isinstance(ex, LocalExecutor) and ex.user is not None:  # where it would run (nothing made)
            area = userarea.area_for(config.local.build_dir, ex.user, day.name,
                                     project=config.project.name, nightlies=config.root)
            ctx = replace(ctx, area=area, slot=area.days / slot.NAME)
        elif isinstance(ex, LocalExecutor):  # the stable build folder, unless a night holds it
            ctx = replace(ctx, slot=config.root / slot.NAME)
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
        n_q = len(self.queues) if self.queues is not None else self.machine.queues
        with ExitStack() as stack:
            # The machine's per-architecture executors ([[machines]] executors), beside its own.
            others = {name: stack.enter_context(make_executor(
                name, night.config, keep_container=self.keep_container))
                for name in sorted({self.arch_executors[b.target_arch] for b in todo
                                    if b.target_arch in self.arch_executors})}

            def smoke(ex: Executor) -> SmokeHook | None:
                return night_smoke(night.config, ex, night.source_dir, where=self.machine.name,
                                   gpu_host=self.machine.gpu)

            def prepare(ctx: RunContext, ex: Executor, builds: Sequence[Build]) -> RunContext:
                self._one_area(ex, others)
                mine = [b for b in builds if b.target_arch not in self.arch_executors]
                if mine and isinstance(ex, LocalExecutor) and ex.user is not None:
                    # exit 2 here: a path out of its reach
                    return user_area(night, ctx, ex, mine, stack)
                if isinstance(ex, LocalExecutor):
                    return stable_slot(night, ctx, night.config.root, ctx.source_dir, stack)
                return ctx

            def preflight(ctx: RunContext, ex: Executor, builds: Sequence[Build]) -> None:
                for name, e in ((ex.name, ex), *others.items()):
                    group = [b for b in builds if (self.arch_executors.get(b.target_arch)
                                                   or ex.name) == name]
                    if group:
                        preflight_images(ctx, e, group)  # a missing image names its build command

            def run(runner: Runner) -> None:
                self._run_queues(night, todo, runner, others, n_q, smoke)

            run_builds(ctx, self.executor, todo, run, keep_container=self.keep_container,
                       smoke=smoke, prepare=prepare, preflight=preflight)
        return self.estimate_s

    def _one_area(self, ex: Executor, others: Mapping[str, Executor]) -> None:
        for e in (ex, *others.values()) if others else ():
            if isinstance(e, LocalExecutor) and e.user is not None:  # one area for all
                raise UsageError(
                    f"machine {self.machine.name}: a build user ([executor.local] user) "
                    "cannot be combined with per-architecture executors (its build area "
                    "holds every build's inputs): remove the machine's executors, or the "
                    "build user")

    def _run_queues(self, night: NightContext, todo: Sequence[Build], runner: Runner,
                    others: Mapping[str, Executor], n_q: int,
                    smoke: Callable[[Executor], SmokeHook | None]) -> None:
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
                f"executor {runner.executor.name}"
                + "".join(f", {a} builds executor {e}"
                          for a, e in sorted(self.arch_executors.items()) if e in others)
                + f", source {night.source_describe}"
            )
            record = recorder(night.history, night.day.name, night.state,
                              commit=night.commit, channel=night.channel, log=night.log)

            def on_event(kind: str, info: Mapping[str, object]) -> None:
                progress(kind, info)
                record(kind, info)

            runner.on_event = on_event
            runner.by_arch = {a: (others[e], smoke(others[e]))
                              for a, e in self.arch_executors.items() if e in others}
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


def stable_slot(night: NightContext, ctx: RunContext, base: Path, source: Path,
                stack: ExitStack) -> RunContext:
    """The night's host builds in `base`'s slot (builds/slot.py: the same paths every night,
    so the compiler cache serves one night's objects to the next), held until `stack` closes;
    in the day folder when another night holds it."""
    held = slot.claim(base, stack)
    if held is None:
        night.log(f"the stable build folder {base / slot.NAME} is in use by another night (or "
                  "not nightly's): this night builds in its day folder, and its compiles are "
                  "not served from other nights' objects")
        return ctx
    try:
        slot.fill(held, source)
    except OSError as e:
        raise ExecutorError(f"cannot prepare the stable build folder {held}: {e} (free space "
                            "there)") from e
    return replace(ctx, slot=held)


def user_area(night: NightContext, ctx: RunContext, ex: LocalExecutor,
              todo: Sequence[Build], stack: ExitStack) -> RunContext:
    """The night's build area for the build user (builds/userarea.py): made, filled with the
    night's copies, and every path a build needs checked against the user's reach."""
    assert ex.user is not None
    config = night.config
    file = str(config.path)
    area = userarea.area_for(config.local.build_dir, ex.user, night.day.name,
                             project=config.project.name, nightlies=config.root)
    userarea.make_root(area, file)
    ctx = replace(ctx, area=area)
    jobs = [make_job(ctx, b, executor=ex.name) for b in todo]
    settings = area.cache_settings(compiler_cache.settings_of(config))
    try:
        userarea.forget_old_days(area, config.root)
        userarea.stage(
            area, source=night.source_dir, stamp=night.commit or night.source_describe,
            recipes=config.recipes,
            wheelhouse=night.day.path / "wheelhouse" if config.build.wheelhouse else None,
            sccache=compiler_cache.find_sccache() if settings.enabled else None,
            cache=settings, jobs=jobs)
    except OSError as e:
        raise ExecutorError(f"cannot prepare the build area {area.root} for {ex.user.name}: "
                            f"{e} (free space there, or set [executor.local] build_dir)") from e
    ctx = stable_slot(night, ctx, area.days, area.source, stack)
    jobs = [make_job(ctx, b, executor=ex.name) for b in todo]
    userarea.preflight(jobs, user=ex.user, pythons=ex.pythons, cuda=ex.cuda,
                       cache=area.cache_settings(settings), config_file=file,
                       usable=ex.usable)
    return ctx
