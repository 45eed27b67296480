"""THE night, written once: lock -> source -> plan -> build phase -> publish -> history ->
report -> prune -> summary -> notify.

`nightly run`, `nightly build`, `nightly release` and `nightly run --cluster` all go through
`run_night`; they differ only in which builds (the plan's share of this machine, the command
line, the whole matrix) and in the build phase (nightly.builds.run.phase.BuildPhase): this machine's
queues (nightly.builds.session.local_phase.LocalPhase) or a Dask cluster (nightly.cluster.orchestrator).
docs/architecture.md draws the whole picture.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import shutil
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nightly import procs
from nightly.builds.rules.policy import stale_builds
from nightly.builds.run.phase import BuildPhase, NightContext
from nightly.builds.session.local_phase import LocalPhase
from nightly.cluster.options import ClusterOptions
from nightly.config import Config
from nightly.core.matrix import Build, nightly_version
from nightly.errors import BuildsFailed, NightlyError, NothingSelected, UsageError, require
from nightly.executors import groups, require_extras
from nightly.files import append_line
from nightly.format import say_err
from nightly.history.db import History, history_path
from nightly.history.triage import summary_for_day
from nightly.night import notify, publishing, wheelhouse
from nightly.night import source as src
from nightly.night.retain import prune_step
from nightly.night.selection import Share, builds_from_cli, pick_machine, plan_share
from nightly.provenance import attest, signed
from nightly.publish.upload import open_destination, publish_day, record_publication
from nightly.publish.validate import validate_day
from nightly.redact import mask, scrub_pem, secret_values
from nightly.report import install
from nightly.report import terminal as display
from nightly.report.html import write_report
from nightly.report.view import lost_json, tested_on_by_name
from nightly.workspace import (
    SUCCEEDED,
    Day,
    DayLock,
    State,
    publication,
    write_json,
)
from nightly.workspace import summary as day_record
from nightly.workspace.cost import GpuHosts, build_cost, gpu_host_seconds, verdict_of
from nightly.workspace.summary import BuildSummary, Summary


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
    prune: bool = False  # local retention at the end (a nightly `run` does)
    # A one-off `nightly build` (summary.manual_mark: who, when, the command): its builds are
    # marked manual and it writes its own summary, leaving the night's summary.json the night's.
    manual: dict[str, str] | None = None


def check_free_space(config: Config) -> None:
    if config.min_free_gb <= 0:
        return
    try:
        config.root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot write the day folder {config.root}: {e.strerror or e} (pass "
                         "--root DIR, or set root, to a folder nightly can write)") from e
    free_gb = shutil.disk_usage(config.root).free / 1e9
    if free_gb < config.min_free_gb:
        raise NightlyError(
            f"only {free_gb:.1f} GB free under {config.root}, below run.min_free_gb = "
            f"{config.min_free_gb:g}: free space (nightly prune) before starting the night"
        )


# ---------------------------------------------------------------------------- the pipeline


HELPERS = ".helpers"  # in the day's work/: the record of each running helper (procs)


def run_night(
    config: Config,
    date: dt.date,
    phase: BuildPhase,
    builds: Sequence[Build],
    opts: NightOptions,
    *,
    plan_json: dict[str, object] | None = None,
    estimates: Mapping[str, float] | None = None,
) -> Summary | None:
    """Lock the day, prepare it, run the build phase on what is not done yet, publish,
    record, report, prune, summarize, notify. Returns the summary (None for a dry run);
    raises BuildsFailed when a build or an upload failed."""
    version = opts.version or nightly_version(
        config.project.base_version, date, config.project.version_from
    )
    day = Day(config.root, date, name=opts.day_name)
    if opts.dry_run:
        phase.dry_run(day, builds, version, opts.channel)
        return None
    check_free_space(config)
    lock = DayLock(day.lock_path).acquire("run")
    try:
        day.create()
        started = time.time()
        night = _prepare(config, date, day, phase, builds, opts, version, lock.taken_over)
        if opts.manual is None:  # the report's wall time is this run's, not summary.json's
            night.state.set_meta(run_started=round(started, 3))
        if plan_json is not None:
            write_json(day.master / "plan.json", plan_json)
        state = night.state
        # Never keep wheels built under another policy or toolchain: rebuilt, and said so.
        stale = stale_builds(config, state, builds, getattr(phase, "executor_for", None)
                             or str(getattr(phase, "executor", "")), night.log)
        todo = [b for b in builds if state.status(b.id) != SUCCEEDED
                or _matches(b.id, opts.rebuild) or b.id in stale]
        day_record.mark_manual(state, [b.id for b in todo], opts.manual)
        if config.build.wheelhouse and todo:
            wheelhouse.prepare(config, night.source_dir, day.path / "wheelhouse",
                               [b.python for b in todo if b.package != "libtorch"], night.log)
        estimate_s = phase.run(night, todo)
        _after_builds(night, phase, opts, date)
        if opts.notify and config.notify.bisect:  # before the summary: it carries the results
            from nightly.bisect.auto import bisect_new_failures

            bisect_new_failures(config, day, night.machine.name, night.log)
        summary, summary_path = write_summary(night, started=started, estimate_s=estimate_s,
                                              estimates=dict(estimates or {}), manual=opts.manual)
        if opts.notify:
            for line in notify.send(config.notify, summary, timeouts=config.external_timeouts):
                night.log(line)
        display.print_summary(summary, path=summary_path)
        if opts.manual is not None:
            why = day_record.why_not_published(config, no_upload=opts.no_upload, day=day)
            display.print_destinations(summary, day.path, not_published=why)
        install.print_install(config, day, night.state, version)  # the night's last lines
        if summary.exit_code:
            c = summary.counts
            raise BuildsFailed(
                f"{c['total'] - c['succeeded']} of {c['total']} build(s) did not succeed, "
                f"{len(summary.failed_uploads)} upload(s) failed", reported=True)
        return summary
    except KeyboardInterrupt:
        append_line(day.master / "run.log", "interrupted by the user (Ctrl-C)")
        raise
    finally:
        procs.box_helpers(None)
        lock.release()


def _after_builds(night: NightContext, phase: BuildPhase, opts: NightOptions,
                  date: dt.date) -> None:
    """Sign, publish, record, report, prune, let the phase clean up: each step never fatal."""
    signatures = sign_step(night)
    if not opts.no_upload:  # each build's publishing shown (nightly.night.publishing)
        with publishing.shown(night) as shown:
            publish_step(night, replace=opts.rebuild, on_package=shown, signatures=signatures)
    try:
        night.history.record_state(night.day.name, night.state, commit=night.commit,
                                   channel=opts.channel)
    except (sqlite3.Error, OSError) as e:
        night.log(f"history: could not record the night in {night.history.path}: {e}")
    report_step(night, night.history, publish=not opts.no_upload)
    if opts.prune:
        prune_step(night.config, date, night.log, night.history)
    phase.finish(night)


def _prepare(
    config: Config,
    date: dt.date,
    day: Day,
    phase: BuildPhase,
    builds: Sequence[Build],
    opts: NightOptions,
    version: str,
    taken_over: Mapping[str, object] | None,
) -> NightContext:
    """The locked day made ready: the source checked out, state.json loaded (builds a dead
    run left running marked interrupted), its meta written."""

    secrets = secret_values(config)

    def note(line: str) -> None:  # what a step says can hold what a recipe printed
        append_line(day.master / "run.log", mask(scrub_pem(line), *secrets))

    if taken_over:
        h = taken_over
        msg = (f"warning: took over a stale lock of host {h.get('host')}, pid {h.get('pid')}, "
               f"started {h.get('started')} (that run is gone)")
        say_err(msg)  # what the lock file says: another run's, maybe another host's
        note(msg)
    # What a dead run left running of its own helpers is killed first; this run's are recorded.
    for line in groups.reap_helpers(day.work / HELPERS):
        note(line)
    procs.box_helpers(day.work / HELPERS)
    checkout = src.prepare(config.project, day.source, date, config_dir=config.path.parent,
                          timeouts=config.external_timeouts)
    state = State(day.state_path)

    def warn(line: str) -> None:  # a corrupt history, set aside: said, never fatal
        say_err(line)
        note(line)

    history = History(history_path(config.root), warn=warn)
    stale = state.mark_stale_running()
    if stale:
        note(f"resuming: {len(stale)} build(s) left running by a dead run: {', '.join(stale)}")
    state.set_meta(commit=checkout.commit, source=checkout.describe, version=version,
                   channel=opts.channel, date=day.name, **phase.meta())
    return NightContext(
        config=config, day=day, state=state, history=history, machine=phase.machine,
        version=version, channel=opts.channel, commit=checkout.commit,
        source_describe=checkout.describe, source_dir=checkout.path, log=note,
        builds=list(builds), live=opts.live,
    )


def _matches(build_id: str, globs: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(build_id, g) for g in globs)


def run_local(
    config: Config,
    date: dt.date,
    builds: Sequence[Build],
    opts: NightOptions,
    *,
    queues: Sequence[Sequence[Build]] | None = None,
    plan_json: dict[str, object] | None = None,
    estimate_s: float = 0.0,
    estimates: dict[str, float] | None = None,
) -> Summary | None:
    """The night on this machine: `builds` in `queues` (the plan's), else in the machine's
    number of queues (`nightly build`). The summary, as run_night."""
    machine = pick_machine(config, opts.machine, strict=queues is not None)
    if not builds:
        raise NothingSelected("nothing to build")
    require_extras(config, opts.executor or machine.executor, not (opts.no_upload or opts.dry_run))
    phase = LocalPhase(
        config, machine, opts.executor or machine.executor, queues=queues,
        estimate_s=estimate_s, keep_container=opts.keep_container,
        # --executor runs every build with it; else the machine's, per architecture.
        arch_executors={} if opts.executor else dict(machine.arch_executors),
    )
    return run_night(config, date, phase, builds, opts, plan_json=plan_json,
                     estimates=estimates)


def run_cluster(config: Config, date: dt.date, copts: ClusterOptions) -> Summary | None:
    """`nightly run --cluster`: every machine's builds of the night on a Dask cluster."""
    require("distributed", what="a night on a cluster")
    # Here only: the cluster's modules (Dask's client, TLS, staging) cost a local night's
    # start a few tens of milliseconds.
    from nightly.cluster.orchestrator import ClusterPhase

    phase = ClusterPhase(config, date, copts)
    opts = NightOptions(
        dry_run=copts.dry_run, no_upload=copts.no_upload, rebuild=copts.rebuild,
        keep_container=copts.keep_container, live=copts.live, notify=copts.notify, prune=True,
    )
    return run_night(config, date, phase, phase.builds, opts, plan_json=phase.plan_json,
                     estimates=phase.estimates)


# ---------------------------------------------------------------------------- after the builds


def sign_step(night: NightContext) -> signed.Signatures:
    """The night's signing step, called once with the packages it signs (each succeeded
    build's, with the sha256 it carries from take-back); what it signed goes to publishing."""
    return attest.sign_packages(
        night.config, night.day, night.state, signed.to_sign(night.config, night.state),
        commit=night.commit, source_dir=night.source_dir, channel=night.channel,
        builds=night.builds, log=night.log)


def publish_step(night: NightContext, *, replace: Sequence[str] = (),
                 on_package: Callable[[str, str, str], None] | None = None,
                 signatures: signed.Signatures | None = None) -> None:
    """Upload the day's good packages (with `signatures`, the signing step's, beside them)
    and refresh the index; failures are recorded per build (upload_error) and reported in
    the summary, never fatal to the night."""
    pub = night.config.publish
    if not pub.has_destination:
        night.log("publish: no destination configured ([publish] url), nothing uploaded")
        return
    try:
        report = publish_day(night.config, night.day, night.state, channel=night.channel,
                             log=night.log, replace=replace, on_package=on_package,
                             signatures=signatures)
    except NightlyError as e:
        night.log(f"publish failed: {e}")
        night.state.set_meta(publish_error=str(e))
        return
    record_publication(night.state, report)
    night.log(
        f"publish: {len(report.uploaded)} uploaded, {len(report.skipped)} already there, "
        f"{len(report.failed)} failed"
        + (f", {len(report.held_back)} build(s) held back ([publish] atomic = "
           f"\"{pub.atomic}\"; `nightly upload --force-partial` publishes them)"
           if report.held_back else "")
    )
    if pub.validate:
        validate_step(night)


def validate_step(night: NightContext) -> None:
    """[publish] validate: what users get, checked from the published side; a failed check
    is the night's publish error (exit 1), named in the summary and the report."""
    try:
        checks = validate_day(night.config, night.day, night.state, log=night.log)
    except NightlyError as e:
        night.log(f"validate failed: {e}")
        night.state.set_meta(publish_error=f"validate: {e}")
        return
    bad = [f"{c.package}: {c.reason}" for c in checks if not c.ok]
    if bad:
        previous = night.state.meta.publish_error
        night.state.set_meta(publish_error="; ".join(
            [*([str(previous)] if previous else []), f"validate: {'; '.join(bad)}"])[:2000])


def report_step(night: NightContext, history: History, *, publish: bool) -> None:
    """Write ROOT/DAY/report.html; publish it and the night's binary sizes beside the index
    pages (`<channel folder>/reports/` and `/sizes/`). Never fatal."""
    try:
        path = write_report(night.day, history)
        night.log(f"report: {path}")
    except (OSError, ValueError, sqlite3.Error) as e:
        night.log(f"report failed: {e}")
        return
    pub = night.config.publish
    if not publish or not pub.url:
        return
    try:
        from nightly.publish.reports import publish_report
        from nightly.report.html import render_html

        def render(link_base: str, notes: list[str]) -> str:
            return render_html(night.day, history, link_base=link_base, notes=notes)

        publish_report(open_destination(night.config), night.day, history, render,
                       channel=night.channel, machine=night.machine.name, log=night.log,
                       secrets=secret_values(night.config))
    except (NightlyError, OSError, ValueError, sqlite3.Error) as e:
        night.log(f"publishing the report failed: {e}")


def write_summary(
    night: NightContext, *, started: float, estimate_s: float, estimates: dict[str, float],
    manual: dict[str, str] | None = None,
) -> tuple[Summary, Path]:
    """summary.json for a night; a one-off build's (`manual`) own summary (then summary.json,
    if the day has a night, is only refreshed: see nightly/workspace/summary.py). (summary, its path)"""
    state = night.state
    builds: dict[str, BuildSummary] = {}
    gpu = GpuHosts(  # machines with gpu = true; a cluster's GPU workers (the test stage's)
        names=frozenset(m.name for m in night.config.machines if m.gpu)
        | (frozenset({night.machine.name}) if night.config.smoke.gpu else frozenset())
        | frozenset(state.meta.gpu_workers),
    )
    costs = []
    for b in night.builds:
        e = state.get(b.id)
        cost = build_cost(e, gpu)
        costs.append(cost)
        builds[b.id] = BuildSummary(
            outcome=e.status or "", reason=e.reason, duration_s=e.duration_s,
            estimate_s=estimates.get(b.id), attempts=e.attempts or 0, queue=e.queue,
            packages=e.packages, published=dict(e.published),
            log=e.log, test_s=cost.test_s, built_on=e.worker_name or cost.built_on,  # --name
            tested_on=tested_on_by_name(e) or cost.tested_on,
            tested=verdict_of(e) if e.status == SUCCEEDED else "", python_tests=e.python_tests,
            extra={**lost_json(e), "publication": publication.of_entry(b.id, e, state.meta.held_back)},
        )
    failed_uploads = [bid for bid, e in state.builds.items() if e.upload_error and bid in builds]
    publish_error = state.meta.publish_error
    ended = time.time()
    summary = Summary(
        date=night.day.name, machine=night.machine.name, version=night.version,
        channel=night.channel, commit=night.commit, source=night.source_describe,
        started=dt.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
        ended=dt.datetime.fromtimestamp(ended).isoformat(timespec="seconds"),
        duration_s=round(ended - started, 3), estimated_makespan_s=estimate_s,
        counts=publication.counts((v.outcome, v.tested, str(v.extra.get("publication") or ""))
                                  for v in builds.values()),  # published / not published too
        failed_uploads=failed_uploads, publish_error=publish_error, builds=builds,
        exit_code=day_record.exit_code(builds, failed_uploads, publish_error),
        manual=manual if manual is not None else day_record.manual_builds(state),
        held_back=dict(state.meta.held_back or {}),
        gpu_host_s=gpu_host_seconds(costs),
        extra={"failures": summary_for_day(night.day, night.history,
                                          timeouts=night.config.external_timeouts)},  # new / still failing
    )
    path = night.day.summary_path if manual is None else day_record.manual_summary_path(night.day, started)
    write_json(path, summary.to_json())
    if manual is not None:
        day_record.refresh(night.day, state, by=manual["command"])
    return summary, path


__all__ = [
    "ClusterOptions",
    "NightOptions",
    "Share",
    "builds_from_cli",
    "pick_machine",
    "plan_share",
    "run_cluster",
    "run_local",
    "run_night",
]
