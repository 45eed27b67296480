"""Runs builds: one build's lifecycle, and parallel, work-conserving queues of builds (the
local build phase that drives them on this machine is nightly.builds.session.local_phase).

A build's lifecycle: state -> running; log opened (appended to earlier attempts' text) with a
header; the executor streams output into it; the files in the build's own output folder are
hashed and renamed into packages/<package>/<cuda>/; the footer is written; the log is renamed
into succeeded/ or failed/; state -> succeeded/failed. Each step is atomic, so kill -9 between
any two leaves something a rerun completes (a build left 'running' is run again).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from nightly.builds.area import buildenv, slot, userarea
from nightly.builds.area.ownership import NotOurs, check_owned, outputs, owned_names
from nightly.builds.cache import wiring as compiler_cache
from nightly.builds.repro import check as repro_check
from nightly.builds.run import takeback
from nightly.builds.run.buildlog import ErrorLine, footer, header, last_footer
from nightly.builds.run.collect import PackageFile, check_policy, collect_build
from nightly.builds.run.dispatch import Dispatcher
from nightly.builds.run.jobs import RunContext, day_work, make_job, prepare_toolchain
from nightly.builds.run.sweep import Sweeper
from nightly.config.pyproject import pyproject_problem
from nightly.core.matrix import Build
from nightly.executors.base import ExecResult, Executor, Job
from nightly.files import sha256_file
from nightly.redact import Masker, mask, safe_url, secret_values
from nightly.workspace import FAILED, INTERRUPTED, RUNNING, SUCCEEDED, remove_tree
from nightly.workspace.records import TestRecord

EventSink = Callable[[str, Mapping[str, object]], None]


class SmokeOutcome(Protocol):
    @property
    def ok(self) -> bool: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def notes(self) -> tuple[str, ...]: ...
    @property
    def tested(self) -> TestRecord | None: ...


# (build, produced files, job, log sink, cancel) -> outcome; see nightly.builds.test.smoke.SmokeTester.
SmokeHook = Callable[[Build, list[Path], Job, Callable[[bytes], None], threading.Event], SmokeOutcome]


@dataclass(frozen=True, kw_only=True)
class _SmokeError:
    """The outcome of a smoke hook that raised: this build fails, the night goes on."""

    reason: str
    ok: bool = False
    notes: tuple[str, ...] = ()
    tested: TestRecord | None = None


@dataclass(kw_only=True)
class Outcome:
    build_id: str
    status: str
    reason: str | None = None
    exit_status: int | None = None
    duration_s: float = 0.0
    attempts: int = 0
    queue: int = 0
    packages: list[PackageFile] = field(default_factory=list)
    log: str = ""
    infra: bool = False  # an infrastructure failure (retried up to retries.infra)

    @property
    def ok(self) -> bool:
        return self.status == SUCCEEDED


class Runner:
    def __init__(
        self,
        ctx: RunContext,
        executor: Executor,
        *,
        on_event: EventSink | None = None,
        cancel: threading.Event | None = None,
        smoke: SmokeHook | None = None,
        by_arch: Mapping[str, tuple[Executor, SmokeHook | None]] | None = None,
    ) -> None:
        self.ctx = ctx
        self.executor = executor
        self.smoke = smoke
        # Builds for these target architectures run with another executor, and its smoke
        # test (a machine's `executors`: aarch64 cross-built on the host beside containers).
        self.by_arch = dict(by_arch or {})
        self.on_event = on_event or (lambda kind, info: None)
        self.cancel = cancel or threading.Event()
        self._sweeper: Sweeper | None = None  # while run_queues runs
        self._envs = buildenv.Keeper()

    def executor_of(self, build: Build) -> Executor:
        return self.by_arch[build.target_arch][0] if build.target_arch in self.by_arch else self.executor

    def _smoke_of(self, build: Build) -> SmokeHook | None:
        return self.by_arch[build.target_arch][1] if build.target_arch in self.by_arch else self.smoke

    # ------------------------------------------------------------------ one build

    def run_build(self, build: Build, *, queue: int = 0) -> Outcome:
        """Run one build with its retries. Never raises for the build's own failure."""
        cfg = self.ctx.config
        recovered = self._recover(build, queue)
        if recovered is not None:
            return recovered
        infra_left, recipe_left = cfg.retries_infra, cfg.retries_recipe
        while True:
            outcome = self._attempt(build, queue)
            if outcome.ok or outcome.status == INTERRUPTED or self.cancel.is_set():
                return outcome
            if outcome.infra and infra_left > 0:
                infra_left -= 1
            elif not outcome.infra and recipe_left > 0:
                recipe_left -= 1
            else:
                return outcome
            self.on_event("retry", {"build": build.id, "reason": outcome.reason})

    def _attempt(self, build: Build, queue: int) -> Outcome:
        ctx, day, state = self.ctx, self.ctx.day, self.ctx.state
        job, attempt, cache_note = self._start(build, queue)
        executor = self.executor_of(build)
        started = time.time()
        log_path = day.reopen_log(build.id)
        with log_path.open("ab", buffering=0) as log:
            write_lock = threading.Lock()
            # Every configured credential is masked wherever the build prints it.
            secrets = (*secret_values(ctx.config), *compiler_cache.credential_values(job))
            masker = Masker(secrets)
            errors = ErrorLine()

            def sink(chunk: bytes) -> None:
                with write_lock:
                    log.write(masker.feed(chunk))

            def recipe_sink(chunk: bytes) -> None:
                sink(chunk)
                errors.feed(chunk)

            head = header(job, executor.describe(job), attempt=attempt, queue=queue,
                          started=started, machine=ctx.machine, executor=executor.name)
            log.write(safe_url(mask(head, *secrets)).encode())
            log.write(f"[nightly] {cache_note}\n".encode() if cache_note else b"")
            try:
                # The project's pyproject.toml of another shape than PEP 517/621 say: this
                # build fails with that line (the night goes on, reports and notifies).
                bad = pyproject_problem(job.source_dir)
                if bad:
                    sink(f"[nightly] {bad}\n".encode())
                    result = ExecResult(exit_status=None, reason=bad)
                else:
                    problem = prepare_toolchain(job, sink)  # a host build's manylinux toolchain
                    if ctx.area is not None:
                        userarea.open_toolchains(ctx.area)
                    self.on_event("phase", {"build": build.id, "phase": "building", "log": str(log_path)})
                    result = (ExecResult(exit_status=None, reason=problem, infra=True) if problem
                              else executor.run(job, recipe_sink, self.cancel))
            except Exception as e:  # an executor bug must not stop the other builds
                result = ExecResult(exit_status=None, reason=f"executor error: {e!r}", infra=True)
            duration = time.time() - started
            # Only this type's package kinds, directly in OUTPUT_DIR: the rest is never filed.
            produced, other = outputs(job.output_dir, build.package)
            if other:
                sink(f"[nightly] left out of OUTPUT_DIR (not a {build.package} package): "
                     f"{', '.join(other)}\n".encode())
            produced, taken, result = takeback.take_result(produced, job, result, sink)
            # The recipe's error line becomes the build's reason (state, summary, report).
            error_line = errors.line()
            if error_line:
                error_line = safe_url(mask(error_line, *secrets))
            ok, reason, notes = self._verdict(build, job, result, produced, sink, error_line)
            failed_status = INTERRUPTED if result.interrupted else FAILED

            def file_log(ok: bool, reason: str | None, packages: list[PackageFile]) -> Path:
                status = SUCCEEDED if ok else failed_status
                with write_lock:
                    log.write(masker.flush())
                log.write(footer(result, status, reason, duration, packages, produced,
                                 notes).encode())
                return day.file_log(build.id, ok)

            entry = collect_build(
                day, state, build, ok=ok, reason=reason, files=taken or produced,
                file_log=file_log,
                failed_status=failed_status, infra=result.infra,
                exit_status=result.exit_status, duration_s=round(duration, 3),
            )
        self._envs.release(job, succeeded=entry.status == SUCCEEDED)  # before its folder goes
        self._tidy(job, executor, keep=entry.status != SUCCEEDED and not result.interrupted)
        self.on_event("end", {"build": build.id, "status": entry.status, "reason": entry.reason,
                              "duration_s": duration, "queue": queue})
        return Outcome(
            build_id=build.id, status=entry.status, reason=entry.reason,
            exit_status=result.exit_status, duration_s=duration, attempts=attempt, queue=queue,
            packages=list(entry.packages), log=str(day.path / (entry.log or "")),
            infra=result.infra,
        )

    def _tidy(self, job: Job, executor: Executor, *, keep: bool) -> None:
        """The build's folder (in the day, the build area or the stable build folder) removed,
        or, `keep` (a failed build's, for a post-mortem), left in its day."""
        folder = job.work_dir.parent
        if not keep:  # while queues run: renamed now, removed beside them (builds/run/sweep)
            (self._sweeper or Sweeper(now=True)).remove(
                folder, self._not_removed, before_retry=lambda: self._reap(job, executor))
        elif slot.in_slot(folder):  # where it always was, out of the next night's way
            slot.park(folder, day_work(self.ctx) / job.build_id,
                      lambda note: self.on_event("cleanup", {"build": job.build_id, "note": note}))

    def _start(self, build: Build, queue: int) -> tuple[Job, int, str | None]:
        """A new attempt: what a dead run left of it stopped, fresh output and scratch
        folders, the compiler cache attached, state 'running'. (job, attempt, cache note)"""
        ctx, state = self.ctx, self.ctx.state
        executor = self.executor_of(build)
        job = make_job(ctx, build, executor=executor.name)
        attempt = state.get(build.id).attempts + 1
        self._reap(job, executor)
        # What a dead run left still writing in the folder is killed again, then it is emptied again.
        def reap() -> None:
            self._reap(job, executor)
        if slot.in_slot(job.work_dir.parent):
            remove_tree(job.work_dir.parent, before_retry=reap)  # another night's, same path
        for d in (job.output_dir, job.work_dir):
            remove_tree(d, before_retry=reap)
        job.output_dir.mkdir(parents=True)
        job.work_dir.mkdir(parents=True)
        job = self._envs.attach(job, enabled=ctx.config.build.reuse_env)  # an earlier night's env
        settings = compiler_cache.settings_of(ctx.config)
        if ctx.area is not None:
            settings = ctx.area.cache_settings(settings)
        if getattr(executor, "user", None) is not None:  # never an inode of the store its own
            settings = replace(settings, copy_view=True)
        job, cache_note = compiler_cache.attach(settings, job)
        state.start(
            build.id, status=RUNNING, attempts=attempt, started=time.time(), ended=None,
            machine=ctx.machine, queue=queue, executor=executor.name, reason=None, tested=None,
            package=build.package, python=build.python, cuda=build.cuda, variant=build.variant,
            cache=None, manylinux=None,
        )
        self.on_event("start", {"build": build.id, "queue": queue, "attempt": attempt})
        return job, attempt, cache_note

    def _verdict(
        self, build: Build, job: Job, result: ExecResult, produced: list[Path],
        sink: Callable[[bytes], None], error_line: str = "",
    ) -> tuple[bool, str | None, list[str]]:
        """Did the attempt succeed: the recipe's verdict, a package produced, the smoke test
        (before the build counts as succeeded, so before any upload). (ok, reason, notes)"""
        state = self.ctx.state
        # Recorded with the build's end (collect_build): one write of state.json a build.
        cache_notes = compiler_cache.finish(job, lambda **f: state.note(build.id, **f))
        reason = result.reason
        if reason is None and result.exit_status != 0:
            # The recipe's own words first: the table, status and report show the reason.
            reason = f"recipe failed with exit status {result.exit_status}" + (
                f": {error_line}" if error_line else "")
        if reason is None and not produced:
            reason = f"the recipe exited 0 but produced no package in OUTPUT_DIR ({job.output_dir})"
        notes = [*result.notes, *cache_notes]
        if reason is None:  # a package that is not the project's is never tested nor filed
            proj = self.ctx.config.project
            try:
                check_owned(produced, build.package, owned_names(proj.name, proj.extra_names))
            except NotOurs as e:
                reason = str(e)
        if reason is None:  # a wheel that misses its policy is never smoke-tested nor filed
            policy = check_policy(state, build, job.env, produced)
            notes += policy.notes
            reason = policy.reason
        tester = self._smoke_of(build)
        if reason is None and tester is not None:
            self.on_event("phase", {"build": build.id, "phase": "testing"})
            try:
                smoke = tester(build, produced, job, sink, self.cancel)
            except Exception as e:  # a smoke-test bug fails this build only
                smoke = _SmokeError(reason=f"smoke test: error: {e!r}")
            notes += list(smoke.notes)
            # The test stage's own record: passed / failed / not run, where, when, seconds.
            state.note(build.id, tested=smoke.tested)
            if not smoke.ok:
                reason = smoke.reason or "smoke test"
        if reason is None and build.id in self.ctx.repro_builds:
            try:
                reason = repro_check.check(self.executor_of(build), job, build, produced, self.ctx.day,
                                           sink, self.cancel,
                                           timeouts=self.ctx.config.external_timeouts)
            except Exception as e:  # a checking bug fails this build only
                reason = f"reproducibility check: error: {e!r}"
        return reason is None, reason, notes

    def _reap(self, job: Job, executor: Executor) -> None:
        """Stop what a run that died left running of this build (before it runs again)."""
        try:
            notes = executor.reap(job)
        except Exception as e:  # never let cleanup stop the night
            notes = [f"could not clean up after {job.build_id}: {e!r}"]
        for note in notes:
            self.on_event("cleanup", {"build": job.build_id, "note": note})

    def _broken(self, build: Build, queue: int, error: Exception) -> Outcome:
        """A build whose run raised (nightly's own failure or the machine's, not the recipe's:
        a folder that cannot be removed, a full disk): failed as an infrastructure failure
        with that reason, its log filed; the next run builds it again."""
        reason = f"infrastructure failure: {type(error).__name__}: {error}"
        day, log = self.ctx.day, ""
        with contextlib.suppress(OSError):
            with day.running_log(build.id).open("ab") as f:
                f.write(f"\n[nightly] {reason}\n".encode())
            log = str(day.file_log(build.id, False).relative_to(day.path))
        with contextlib.suppress(Exception):  # a state.json that cannot be written: rerun
            self.ctx.state.update(build.id, status=FAILED, reason=reason, infra=True,
                                  ended=time.time(), **({"log": log} if log else {}))
        self.on_event("end", {"build": build.id, "status": FAILED, "reason": reason,
                              "duration_s": 0.0, "queue": queue})
        return Outcome(build_id=build.id, status=FAILED, reason=reason, queue=queue, infra=True,
                       log=str(day.path / log) if log else "")

    def _recover(self, build: Build, queue: int) -> Outcome | None:
        """A build left 'running'/'interrupted' by a run killed after the build had finished
        (footer written, packages filed) but before state.json said so: adopt that attempt
        instead of building again, so each build succeeds exactly once."""
        day, state = self.ctx.day, self.ctx.state
        entry = state.get(build.id)
        if entry.status not in (RUNNING, INTERRUPTED):
            return None
        log = day.final_log(build.id)
        if log is None or log.parent != day.succeeded:
            log = day.running_log(build.id)
        try:
            text = log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        found = last_footer(text, build.id)
        if found is None:
            return None
        duration, files = found
        dest_dir = day.package_dir(build.package, build.cuda)
        packages = []
        for name, size, digest in files:
            f = dest_dir / name
            try:
                if f.stat().st_size != size or sha256_file(f) != digest:
                    return None
            except OSError:
                return None
            packages.append(PackageFile(name=name, path=str(f.relative_to(day.path)), size=size,
                                        sha256=digest))
        final = log if log.parent == day.succeeded else day.file_log(build.id, True)
        state.update(
            build.id, status=SUCCEEDED, reason=None, exit_status=0, ended=time.time(),
            duration_s=round(duration, 3), packages=[p.to_json() for p in packages],
            infra=False, log=str(final.relative_to(day.path)),
        )
        self.on_event("cleanup", {"build": build.id, "note": "its last attempt had finished "
                                  "before the run that started it died: adopted, not rebuilt"})
        self.on_event("end", {"build": build.id, "status": SUCCEEDED, "reason": None,
                              "duration_s": duration, "queue": queue})
        return Outcome(
            build_id=build.id, status=SUCCEEDED, duration_s=duration,
            attempts=entry.attempts, queue=queue, packages=packages,
            log=str(final), exit_status=0,
        )

    # ------------------------------------------------------------------ queues

    def run_queues(
        self, queues: Sequence[Sequence[Build]], order: Sequence[Build] | None = None
    ) -> list[Outcome]:
        """Run queues in parallel, each serially. Work-conserving: a queue that runs dry takes
        the next unstarted build of any queue, in `order` (default: round-robin over queues).

        Ctrl-C sets the cancel event: running builds stop and are marked interrupted, their
        logs kept; then KeyboardInterrupt propagates.
        """
        dispatcher = Dispatcher(queues, order)
        # A run that died may have left recipes running: stop them now, not only when
        # their build's turn comes (they would compete with this run for the machine).
        for q in queues:
            for b in q:
                ex = self.executor_of(b)
                self._reap(make_job(self.ctx, b, executor=ex.name), ex)
        # Build folders removed beside the queues (builds/run/sweep): what such a run left, first.
        self._sweeper = Sweeper()
        self._sweeper.leftovers([day_work(self.ctx), *([self.ctx.slot / "work"] if self.ctx.slot
                                                    else [])], self._not_removed)
        try:
            return self._queue_threads(dispatcher, len(queues))
        finally:
            sweeper, self._sweeper = self._sweeper, None
            sweeper.drain()

    def _queue_threads(self, dispatcher: Dispatcher, count: int) -> list[Outcome]:
        """`count` queue threads taking builds from `dispatcher` until none is left (or the
        run is cancelled); their outcomes."""
        results: list[Outcome] = []
        lock = threading.Lock()

        # Waited on instead of Thread.join: on Python < 3.12 a join() interrupted by Ctrl-C
        # marks a thread that is still running as finished (bpo-45274), so the run would
        # exit with builds half done, state 'running' and their logs unfinished.
        finished = [threading.Event() for _ in range(count)]

        def worker(q: int) -> None:
            try:
                while not self.cancel.is_set():
                    build = dispatcher.next(q)
                    if build is None:
                        return
                    try:
                        outcome = self.run_build(build, queue=q)
                    except Exception as e:  # never the queue's end: this build fails alone
                        outcome = self._broken(build, q, e)
                    with lock:
                        results.append(outcome)
            finally:
                finished[q].set()

        threads = [threading.Thread(target=worker, args=(q,), name=f"queue-{q}", daemon=True)
                   for q in range(count)]
        for t in threads:
            t.start()
        try:
            for ev in finished:
                while not ev.wait(0.2):
                    pass
        except KeyboardInterrupt:
            self.cancel.set()
            for ev in finished:
                ev.wait()
            raise
        return results

    def _not_removed(self, folder: Path, e: OSError) -> None:  # the build's outcome stands
        self.on_event("cleanup", {"build": folder.name, "note": f"its folder could not be removed: {e}"})

