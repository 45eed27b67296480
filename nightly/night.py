"""The night and the one-off build: lock, day folder, source, plan, queues, summary.

`nightly run` and `nightly build` share everything here; they differ in where the builds
come from (the plan's share of this machine, or the command line).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import shutil
import socket
import sqlite3
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nightly.config import Config, Machine
from nightly.errors import ConfigError, NightlyError, NothingSelected, UsageError
from nightly.executors.base import Executor
from nightly.matrix import Build, nightly_version
from nightly.workspace import (
    INTERRUPTED,
    SUCCEEDED,
    Day,
    DayLock,
    State,
    write_json,
)


@dataclass(kw_only=True)
class NightOptions:
    machine: str | None = None
    executor: str | None = None
    dry_run: bool = False
    no_upload: bool = False
    rebuild: tuple[str, ...] = ()
    keep_container: bool = False
    channel: str = "nightly"
    version: str | None = None  # default: the nightly version of the date
    day_name: str | None = None  # default: YYYY_MM_DD (release folders differ)
    live: bool | None = None  # None: live view when stdout is a terminal
    notify: bool = False  # send the configured notifications (the night does; a build doesn't)
    extra_steps: list[Callable[[NightContext], None]] = field(default_factory=list)


@dataclass(kw_only=True)
class NightContext:
    config: Config
    day: Day
    state: State
    machine: Machine
    version: str
    channel: str
    commit: str
    source_describe: str
    log: Callable[[str], None]
    builds: list[Build]


def this_platform() -> str:
    return "macos" if sys.platform == "darwin" else "linux"


def pick_machine(config: Config, key: str | None, *, strict: bool = True) -> Machine:
    """--machine, else the only machine, else the one whose hostname is this host; when not
    strict (a one-off build), else the first machine of this platform."""
    if key is not None:
        return config.machine(key)
    if len(config.machines) == 1:
        return config.machines[0]
    host = socket.gethostname()
    for m in config.machines:
        if m.hostname and m.hostname == host:
            return m
    if not strict:
        for m in config.machines:
            if m.platform == this_platform():
                return m
    names = ", ".join(m.name for m in config.machines)
    raise UsageError(
        f"this config has several machines ({names}) and none has hostname = \"{host}\": "
        "pass --machine NAME or set hostname in the machine's entry"
    )


def make_executor(name: str, config: Config, *, keep_container: bool = False) -> Executor:
    if name == "local":
        from nightly.executors.local import LocalExecutor

        return LocalExecutor(pythons=config.local.pythons, cuda=config.local.cuda)
    if name == "container":
        from nightly.executors.container import ContainerExecutor, ContainerSettings

        c = config.container
        try:
            settings = ContainerSettings(
                base_url=c.base_url or None,
                memory_limit=c.memory_limit or None,
                user=c.user or None,
                cuda_mounts=dict(c.cuda_mounts),
                gpu=c.gpu,
                keep_container=keep_container,
                pull=c.pull,
            )
        except ValueError as e:
            raise ConfigError(str(e), file=str(config.path), key="executor.container") from e
        executor: Executor = ContainerExecutor(settings)
        return executor
    raise UsageError(f"unknown executor '{name}': choose local or container")


def check_free_space(config: Config) -> None:
    if config.min_free_gb <= 0:
        return
    config.root.mkdir(parents=True, exist_ok=True)
    free_gb = shutil.disk_usage(config.root).free / 1e9
    if free_gb < config.min_free_gb:
        raise NightlyError(
            f"only {free_gb:.1f} GB free under {config.root}, below run.min_free_gb = "
            f"{config.min_free_gb:g}: free space (nightly prune) before starting the night"
        )


# ---------------------------------------------------------------------------- the night


def run_builds(
    config: Config,
    date: dt.date,
    builds: Sequence[Build],
    opts: NightOptions,
    *,
    queues: Sequence[Sequence[Build]] | None = None,
    plan_json: dict[str, Any] | None = None,
    estimate_s: float = 0.0,
    estimates: dict[str, float] | None = None,
    on_ready: Callable[[NightContext], None] | None = None,
) -> int:
    """Lock the day, prepare it, run `builds` (in `queues` if given), summarize. Exit code."""
    from nightly import source as src
    from nightly.history import History, history_path, recorder
    from nightly.progress import Progress
    from nightly.runner import RunContext, Runner

    machine = pick_machine(config, opts.machine, strict=queues is not None)
    executor_name = opts.executor or machine.executor
    version = opts.version or nightly_version(
        config.project.base_version, date, config.project.version_from
    )
    day = Day(config.root, date, name=opts.day_name)
    if not builds:
        raise NothingSelected("nothing to build")

    if opts.dry_run:
        return _dry_run(config, day, builds, executor_name, version, opts, machine)

    check_free_space(config)
    lock = DayLock(day.lock_path).acquire("run")
    try:
        day.create()
        progress_log = day.master / "run.log"
        started = time.time()

        def note(line: str) -> None:
            _append(progress_log, line)

        if lock.taken_over:
            h = lock.taken_over
            msg = (
                f"warning: took over a stale lock of host {h.get('host')}, pid {h.get('pid')}, "
                f"started {h.get('started')} (that run is gone)"
            )
            print(msg, file=sys.stderr)
            note(msg)
        checkout = src.prepare(config.project, day.source, date, config_dir=config.path.parent)
        state = State(day.state_path)
        history = History(history_path(config.root))
        stale = state.mark_stale_running()
        if stale:
            note(f"resuming: {len(stale)} build(s) left running by a dead run: {', '.join(stale)}")
        state.set_meta(commit=checkout.commit, source=checkout.describe, version=version,
                       channel=opts.channel, date=day.name)
        if plan_json is not None:
            write_json(day.master / "plan.json", plan_json)

        todo = [
            b for b in builds
            if state.status(b.id) != SUCCEEDED or any(fnmatch.fnmatchcase(b.id, g) for g in opts.rebuild)
        ]
        skipped = [b for b in builds if b not in todo]
        if config.build.wheelhouse and todo:
            from nightly import wheelhouse

            wheelhouse.prepare(config, checkout.path, day.path / "wheelhouse",
                               [b.python for b in todo if b.package != "libtorch"], note)
        ctx = RunContext(
            config=config, day=day, state=state, source_dir=checkout.path, version=version,
            channel=opts.channel, machine=machine.name,
        )
        night = NightContext(
            config=config, day=day, state=state, machine=machine, version=version,
            channel=opts.channel, commit=checkout.commit, source_describe=checkout.describe,
            log=note, builds=list(builds),
        )
        if on_ready:
            on_ready(night)
        with make_executor(executor_name, config, keep_container=opts.keep_container) as ex:
            if todo:
                from nightly.runner import make_job

                ex.preflight([make_job(ctx, b, executor=ex.name) for b in todo])
            n_q = len(queues) if queues is not None else machine.queues
            progress = Progress(
                total=len(todo), master_log=progress_log, estimate_s=estimate_s,
                live=opts.live, queue_logs=day.master,
            )
            with progress:
                progress.log(
                    f"night {day.name} on machine {machine.name}: {len(todo)} to build, "
                    f"{len(skipped)} already succeeded, {n_q} queues, executor {ex.name}, "
                    f"source {checkout.describe}"
                )
                from nightly.smoke import SmokeTester

                smoke = SmokeTester(config, ex, checkout.path) if config.smoke.enabled else None
                record = recorder(history, day.name, state, commit=checkout.commit,
                                  channel=opts.channel, log=note)

                def on_event(kind: str, info: Mapping[str, Any]) -> None:
                    progress(kind, info)
                    record(kind, info)

                runner = Runner(ctx, ex, on_event=on_event, smoke=smoke)
                todo_ids = {b.id for b in todo}
                if queues is not None:
                    qs = [[b for b in q if b.id in todo_ids] for q in queues]
                    runner.run_queues(qs, order=[b for b in builds if b.id in todo_ids])
                else:
                    qs = [todo[i::n_q] for i in range(n_q)]
                    runner.run_queues(qs, order=todo)
        if not opts.no_upload:
            publish_step(night)
        for step in opts.extra_steps:
            step(night)
        try:
            history.record_state(day.name, state, commit=checkout.commit, channel=opts.channel)
        except (sqlite3.Error, OSError) as e:
            note(f"history: could not record the night in {history.path}: {e}")
        report_step(night, history, publish=not opts.no_upload)
        if queues is not None and opts.channel == "nightly":
            prune_step(config, date, note)
        summary = write_summary(night, started=started, estimate_s=estimate_s,
                                estimates=estimates or {})
        from nightly import display, notify

        if opts.notify:
            for line in notify.send(config.notify, summary):
                note(line)

        display.print_summary(summary)
        return int(summary["exit_code"])
    except KeyboardInterrupt:
        _append(day.master / "run.log", "interrupted by the user (Ctrl-C)")
        raise
    finally:
        lock.release()


def publish_step(night: NightContext) -> None:
    """Upload the day's good packages and refresh the index; failures are recorded per build
    (upload_error) and reported in the summary, never fatal to the night."""
    from nightly.publish.upload import publish_day

    pub = night.config.publish
    if not (pub.url or pub.conda_channel or pub.anaconda_user):
        night.log("publish: no destination configured ([publish] url), nothing uploaded")
        return
    try:
        report = publish_day(night.config, night.day, night.state, channel=night.channel,
                             log=night.log)
    except NightlyError as e:
        night.log(f"publish failed: {e}")
        night.state.set_meta(publish_error=str(e))
        return
    night.state.set_meta(publish_error=None if report.ok else "; ".join(
        [*report.failed.values(), *report.index_errors])[:2000])
    night.log(
        f"publish: {len(report.uploaded)} uploaded, {len(report.skipped)} already there, "
        f"{len(report.failed)} failed"
    )


def report_step(night: NightContext, history: Any, *, publish: bool) -> None:
    """Write ROOT/DAY/report.html; publish it and the night's binary sizes beside the index
    pages (`<channel folder>/reports/` and `/sizes/`). Never fatal."""
    import json

    from nightly import report

    try:
        path = report.write_report(night.day, history)
        night.log(f"report: {path}")
    except (OSError, ValueError, sqlite3.Error) as e:
        night.log(f"report failed: {e}")
        return
    pub = night.config.publish
    if not publish or not pub.url:
        return
    try:
        from nightly.publish.upload import open_destination

        store = open_destination(night.config)
        base = "whl" if night.channel == "release" else f"whl/{night.channel}"
        stem = f"{night.day.name.replace('/', '_')}_{night.machine.name}"
        store.put_bytes(f"{base}/reports/{stem}.html", path.read_bytes(), "text/html; charset=utf-8")
        sizes = json.dumps(history.sizes_json(night.day.name), indent=1, sort_keys=True)
        store.put_bytes(f"{base}/sizes/{stem}.json", sizes.encode(), "application/json")
        night.log(f"report and sizes published under {store.url}/{base}/")
    except (NightlyError, OSError, sqlite3.Error) as e:
        night.log(f"publishing the report failed: {e}")


def prune_step(config: Config, today: dt.date, log: Callable[[str], None]) -> None:
    """Local retention at the end of a night. Never fatal."""
    from nightly.publish import retention
    from nightly.workspace import is_locked

    try:
        doomed = retention.plan_local_prune(
            config.root, today, config.retention.local_days, is_locked
        )
        if doomed:
            result = retention.apply_local_prune(config.root, doomed, is_locked)
            log(f"prune: {result}")
    except (NightlyError, OSError) as e:
        log(f"prune failed: {e}")


def write_summary(
    night: NightContext, *, started: float, estimate_s: float, estimates: dict[str, float]
) -> dict[str, Any]:
    state = night.state
    builds: dict[str, Any] = {}
    for b in night.builds:
        e = state.get(b.id)
        builds[b.id] = {
            "outcome": e.get("status", "pending"),
            "reason": e.get("reason"),
            "duration_s": e.get("duration_s"),
            "estimate_s": estimates.get(b.id),
            "attempts": e.get("attempts", 0),
            "queue": e.get("queue"),
            "packages": e.get("packages", []),
            "published": e.get("published", {}),
            "log": e.get("log"),
        }
    ok = all(v["outcome"] == SUCCEEDED for v in builds.values())
    failed_uploads = [
        bid for bid, e in state.builds.items() if e.get("upload_error") and bid in builds
    ]
    publish_error = state.meta.get("publish_error")
    ended = time.time()
    summary = {
        "date": night.day.name,
        "machine": night.machine.name,
        "version": night.version,
        "channel": night.channel,
        "commit": night.commit,
        "source": night.source_describe,
        "started": dt.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
        "ended": dt.datetime.fromtimestamp(ended).isoformat(timespec="seconds"),
        "duration_s": round(ended - started, 3),
        "estimated_makespan_s": estimate_s,
        "counts": {
            "total": len(builds),
            "succeeded": sum(v["outcome"] == SUCCEEDED for v in builds.values()),
            "failed": sum(v["outcome"] not in (SUCCEEDED,) for v in builds.values()),
            "interrupted": sum(v["outcome"] == INTERRUPTED for v in builds.values()),
        },
        "failed_uploads": failed_uploads,
        "publish_error": publish_error,
        "builds": builds,
        "exit_code": 0 if ok and not failed_uploads and not publish_error else 1,
    }
    write_json(night.day.summary_path, summary)
    return summary


def _dry_run(
    config: Config,
    day: Day,
    builds: Sequence[Build],
    executor_name: str,
    version: str,
    opts: NightOptions,
    machine: Machine,
) -> int:
    """Print where and how each build would run; touch nothing."""
    import json

    from nightly.runner import RunContext, make_job

    state = State(day.path / "nonexistent-state.json")
    ctx = RunContext(config=config, day=day, state=state, source_dir=day.source,
                     version=version, channel=opts.channel, machine=machine.name)
    ex = make_executor(executor_name, config, keep_container=opts.keep_container)
    for b in builds:
        job = make_job(ctx, b, executor=ex.name)
        desc = ex.describe(job)
        print(json.dumps({"build": b.id, "machine": machine.name, **desc}, indent=2, default=str))
    return 0


def _append(path: Path, line: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().isoformat(timespec="seconds")
    with path.open("a", encoding="utf-8") as f:
        f.write(f"{stamp} {line}\n")


def plan_share(config: Config, machine: Machine, selects: Sequence[str] = ()) -> tuple[
    list[Build], list[list[Build]], dict[str, Any], float, dict[str, float]
]:
    """This machine's builds, its queues in plan order, the plan JSON, its estimated makespan
    and per-build estimates."""
    from nightly.history import planning_estimator
    from nightly.schedule import make_plan, select_cli

    full = make_plan(config, estimate=planning_estimator(config))
    chosen = {b.id for b in select_cli(config, selects)} if selects else None
    mp = full.machine(machine.name)
    queues = [[pb.build for pb in q.builds if chosen is None or pb.build.id in chosen]
              for q in mp.queues]
    order = [pb.build for pb in mp.in_order() if chosen is None or pb.build.id in chosen]
    if not order:
        raise NothingSelected(f"nothing selected for machine '{machine.name}'")
    estimates = {pb.build.id: pb.estimate_s for pb in mp.builds}
    return order, queues, full.to_json(), mp.makespan_s, estimates


def builds_from_cli(config: Config, package: str, pythons: str, cudas: str) -> list[Build]:
    from nightly.matrix import SpellingError, parse_spec

    platform = this_platform()
    lt = config.libtorch_matrix(platform)
    try:
        builds = parse_spec(
            package, pythons, cudas, platform=platform,
            libtorch_python=lt.python if lt else "3",
            libtorch_variants=lt.variants if lt else ("shared-with-deps",),
        )
    except SpellingError as e:
        raise UsageError(str(e)) from e
    # Keep the matrix's own Build (it carries devtoolset etc.) when the build is in it.
    known = {b.id: b for b in config.builds}
    return [known.get(b.id, b) for b in builds]


__all__ = [
    "ConfigError",
    "NightOptions",
    "builds_from_cli",
    "make_executor",
    "pick_machine",
    "plan_share",
    "run_builds",
]
