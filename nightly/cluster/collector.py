"""Cluster mode: collecting what the workers report, as it arrives.

The orchestrator (nightly.cluster.orchestrator) hands builds to the scheduler; this follows
them: each attempt's start and end (the workers' events), a worker lost mid-build, a task that
erred or was cancelled, and each result, filed into the day folder with nightly.builds.run.collect (the
step the local queues end each build with). A rerun after kill -9 adopts attempts that had
finished in staging before the run that submitted them died.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from nightly.builds.area.ownership import owned_names
from nightly.builds.run.collect import collect_build
from nightly.builds.run.phase import NightContext
from nightly.builds.test.smoke import NOT_RUN, PASSED, stage_part, tested_record
from nightly.builds.view.progress import Progress
from nightly.cluster.dispatch import TaskItem
from nightly.cluster.messages import AttemptResult, GpuTestResult, WorkerEvent
from nightly.cluster.staging import RESULT_JSON, StagingDay, attempt_prefix
from nightly.cluster.verify import check_packages, sealed
from nightly.core.matrix import Build
from nightly.errors import ObjectTooLarge, PublishError
from nightly.files import discard_tree, remove_tree
from nightly.workspace import FAILED, INTERRUPTED, LOST_BUILD, RUNNING, SUCCEEDED, BuildEntry
from nightly.workspace.live import PHASES
from nightly.workspace.records import TestRecord

UNCOLLECTED = ("verifying staging: a package is not the one its worker built (it was changed in "
               "staging after the build); nothing of it is published")


class GpuTestHook(Protocol):
    """The GPU tests a build's result may wait for before it is filed (nightly.cluster.gpustage)."""

    def wants(self, build: Build, result: AttemptResult) -> bool: ...

    def start(self, build: Build, result: AttemptResult) -> None: ...

    def adopt(self, build: Build, result: AttemptResult) -> None: ...

    def on_event(self, ev: WorkerEvent) -> None: ...


def with_gpu_test(tested: TestRecord | None, test: GpuTestResult,
                  require_gpu: bool) -> tuple[TestRecord, str | None]:
    """The build's `tested` with its GPU part, and why the build fails over it (None: it
    passed, or could not run and [smoke] require_gpu is off)."""
    cpu = tested.cpu if tested is not None else None
    cpu = cpu if cpu is not None else stage_part(NOT_RUN, "", time.time())
    part = test.part or stage_part(test.result, "", time.time(), reason=test.reason)
    # a limited-API build's Pythons kept
    record = tested_record(cpu, part, tested.pythons if tested is not None else ())
    if test.result == PASSED or (test.result == NOT_RUN and not require_gpu):
        return record, None
    if test.result == NOT_RUN:
        return record, f"GPU test: not run: {test.reason}; [smoke] require_gpu = true"
    why = test.reason or "GPU test: failed"
    return record, why if why.startswith("GPU test") else f"GPU test: {why}"


class Collector:
    """Files the builds of one cluster night as their results come in."""

    def __init__(
        self,
        night: NightContext,
        staging: StagingDay,
        builds: Sequence[Build],
        *,
        version: str,
        rebuild: Callable[[str], bool],
        keep_staging: bool,
        note: Callable[[str], None],
    ) -> None:
        self.night, self.staging, self.day = night, staging, night.day
        self.by_id = {b.id: b for b in builds}
        self.version, self.rebuild, self.keep_staging, self.note = (
            version, rebuild, keep_staging, note)
        self.progress: Progress | None = None
        self.filed: set[str] = set()
        self.current: dict[str, WorkerEvent] = {}  # build -> its latest start event
        self.lanes: dict[tuple[str, int], int] = {}
        self.given_up: set[str] = set()
        self.interrupting = False
        self.seal_key = b""  # the night's (nightly.cluster.verify): adopted results carry its seal
        self.tests: GpuTestHook | None = None  # [cluster] gpu_smoke: the GPU tests

    def adopt(self, todo: Sequence[Build]) -> set[str]:
        """Builds whose attempt finished in staging (complete result.json, this commit and
        version) before the orchestrator that submitted them died: collected, not rebuilt."""
        adopted: set[str] = set()
        try:
            listing = self.staging.listing()
        except (PublishError, OSError) as e:
            self.note(f"staging: cannot list {self.staging.url}: {e}")
            return adopted
        for b in todo:
            if self.rebuild(b.id):
                continue
            tokens = sorted((t for t, n in listing.get(b.id, {}).items() if RESULT_JSON in n),
                            reverse=True)
            for tok in tokens:
                r = self.staging.read(b.id, tok, RESULT_JSON)
                if (r is None or r.get("status") != SUCCEEDED or r.get("commit") != self.night.commit
                        or r.get("version") != self.version or r.get("build") != b.id
                        or r.get("token") != tok):
                    continue
                if not sealed(self.seal_key, r):
                    self.note(f"not adopted {b.id}: the result.json of attempt {tok} in staging "
                              "does not carry this night's seal (changed in staging, or not "
                              "written by a worker of this night): built again")
                    continue
                self.note(f"adopt  {b.id}: attempt {tok} on "
                          f"{r.get('worker_name') or r.get('worker')} had finished before the "
                          "run that submitted it died")
                self.accept(b, AttemptResult.from_json(r), adopted=True)
                adopted.add(b.id)
                break
        return adopted

    # ------------------------------------------------------------------ events and results

    def _lane(self, worker: str, slot: int) -> int:
        return self.lanes.setdefault((worker, slot), len(self.lanes))

    def _progress(self, kind: str, info: Mapping[str, object]) -> None:
        if self.progress is not None:
            self.progress(kind, info)

    def on_event(self, msg: Mapping[str, object]) -> None:
        ev = WorkerEvent.from_json(msg)
        bid = ev.build
        if bid not in self.by_id or bid in self.filed:
            return
        b, state = self.by_id[bid], self.night.state
        if ev.kind == "start":
            cur = self.current.get(bid)
            if cur is not None:
                if ev.token < cur.token or (ev.token == cur.token and ev.attempt <= cur.attempt):
                    return  # a late event of an attempt already superseded
                if ev.token != cur.token:
                    self._lost(b, cur, ev)
            self.current[bid] = ev
            state.update(
                bid, status=RUNNING, attempts=ev.attempt, started=ev.started,
                ended=None, machine=ev.worker, queue=ev.slot,
                executor=ev.executor, reason=None, package=b.package,
                python=b.python, cuda=b.cuda, variant=b.variant,
                worker_name=ev.worker_name, host=ev.host, token=ev.token,
            )
            self._progress("start", {"build": bid, "attempt": ev.attempt,
                                     "queue": self._lane(ev.worker, ev.slot)})
        elif ev.kind == "end":
            if ev.status != SUCCEEDED:  # a local attempt that failed (maybe retried)
                self._record(BuildEntry.from_json({
                    **state.get(bid).to_json(), "status": ev.status,
                    "reason": ev.reason, "ended": time.time(),
                    "duration_s": ev.duration_s, "attempts": ev.attempt}), bid)
        elif ev.kind == "retry":
            self.note(f"retry  {bid} on {who(ev)}: {ev.reason}")
        elif ev.kind == "phase":  # the worker's Runner said it: the live view shows it
            self._phase(bid, ev.extra.get("phase"))
        elif ev.kind == "test-start" and self.tests is not None:
            self.tests.on_event(ev)
            self._phase(bid, "GPU test")
        else:
            self.note(f"{ev.kind} {bid} on {who(ev)}: {ev.note}")

    def _phase(self, build_id: str, phase: object) -> None:
        """A running build's phase, for the live view and live.json. The worker's log path is
        on its own host: never followed here (its lines reach staging, not this view)."""
        if isinstance(phase, str) and phase in PHASES:
            self._progress("phase", {"build": build_id, "phase": phase})

    def _lost(self, build: Build, cur: WorkerEvent, new: WorkerEvent) -> None:
        reason = (f"attempt on {who(cur)} ended without a result (its worker was lost); "
                  f"run again on {who(new)}")
        state = self.night.state
        self.record_lost(build.id, cur, new.started or time.time())
        self._record(BuildEntry.from_json({
            **state.get(build.id).to_json(), "status": INTERRUPTED, "reason": reason,
            "ended": time.time(), "attempts": cur.attempt}), build.id)
        self.note(f"lost   {build.id}: {reason}")

    def record_lost(self, build_id: str, cur: WorkerEvent, ended: float, *,
                    stage: str = LOST_BUILD) -> None:
        """Keep an attempt whose worker was lost in state.json's entry (`lost`), for the
        report's timeline and the status: an interrupted bar on the lost worker's lane, not
        only "2 attempts". `stage`: "build", or "gpu-test" (the test stage's GPU part)."""
        state = self.night.state
        before = state.get(build_id).extra.get("lost")
        lost = [*(before if isinstance(before, list) else []), {
            "attempt": cur.attempt, "worker": cur.worker, "worker_name": cur.worker_name,
            "slot": cur.slot, "started": cur.started, "ended": max(cur.started, ended),
            "stage": stage}]
        state.update(build_id, lost=lost)

    def _record(self, entry: BuildEntry, build_id: str) -> None:
        night = self.night
        try:
            night.history.record(self.day.name, build_id, entry, commit=night.commit,
                                 channel=night.channel)
        except (sqlite3.Error, OSError) as e:
            self.note(f"history: could not record {build_id}: {e}")

    def on_result(self, item: TaskItem, returned: object) -> None:
        """A result returned over the (authenticated) Dask channel: the record staging is
        checked against (verify). It must be this very task's."""
        result = (returned if isinstance(returned, AttemptResult)
                  else AttemptResult.from_json(returned if isinstance(returned, Mapping) else {}))
        if (result.build != item.build_id
                or result.submission != getattr(item.spec, "submission", None)):
            self.file_without_result(
                self.by_id[item.build_id], FAILED,
                f"the task returned a result for {result.build!r} (submission "
                f"{result.submission!r}), not for this build's task: not used")
            return
        self.accept(self.by_id[item.build_id], result)

    def accept(self, build: Build, result: AttemptResult, *, adopted: bool = False) -> None:
        """A build's result: filed now, or once its GPU test has run (the test stage)."""
        if self.tests is not None and self.tests.wants(build, result):
            (self.tests.adopt if adopted else self.tests.start)(build, result)
        else:
            self.file(build, result)

    def on_error(self, item: TaskItem, exc: BaseException | None) -> None:
        bid = item.build_id
        if bid in self.filed or bid in self.given_up:
            return
        if exc is None:
            if self.interrupting:
                return
            reason = "its task was cancelled on the scheduler"
        elif type(exc).__name__ == "KilledWorker":
            reason = (f"every worker that ran it died ({exc}): the build may be what kills them "
                      "(out of memory?)")
        else:
            reason = f"worker error: {type(exc).__name__}: {exc}"
        self.file_without_result(self.by_id[bid], FAILED, reason)

    # ------------------------------------------------------------------ filing

    def file(self, build: Build, result: AttemptResult, *,
             test: GpuTestResult | None = None) -> None:
        """Collect one attempt's result: packages fetched from staging into packages/, the
        log (with any earlier attempts' that died, and its GPU tests') into
        logs/succeeded|failed/, then state.json and history (nightly.builds.run.collect). With
        `test` (its GPU part, the test stage) it fails unless that passed."""
        day, token, status = self.day, result.token, result.status
        ok, reason, tested = status == SUCCEEDED, result.reason, result.tested
        if test is not None:
            tested, why = with_gpu_test(tested, test, self.night.config.smoke.require_gpu)
            if ok and why:
                ok, reason = False, why
        tmp = day.work / build.id / f"fetch-{token}"
        proj = self.night.config.project
        files: list[Path] = []
        expected: dict[str, tuple[int, str]] = {}
        infra = result.infra
        unsafe = self.staging.unsafe(build.id, token)
        if unsafe:  # a symlink or a FIFO among its files: nothing of this attempt is used
            ok, reason, infra = False, f"{unsafe}; nothing of this attempt is used", True
        try:
            if ok:
                try:
                    files, expected = self.fetch_packages(result, tmp)
                except ObjectTooLarge as e:  # as a package whose sha256 is not the worker's
                    ok, reason, infra = False, f"{UNCOLLECTED}: {e}", True
                except (PublishError, OSError, ValueError) as e:
                    ok, reason, infra = False, f"fetching its packages from staging failed: {e}", True
            collect_build(
                day, self.night.state, build, ok=ok, reason=reason, files=files,
                expected=expected, failed_status=FAILED if status == SUCCEEDED else status,
                # A worker's word is not enough: the orchestrator checks whose packages it files.
                owners=owned_names(proj.name, proj.extra_names),
                uncollected=UNCOLLECTED,
                infra=infra, infra_if_uncollected=True,
                # A build that failed only in collection: its log says why at the end.
                file_log=lambda filed, why, _packages: self.staging.assemble_log(
                    day, build.id, token, filed, result.to_json(),
                    reason=str(why or "") if (status == SUCCEEDED or unsafe) and not filed
                    else "", test=None if test is None else test.to_json()),
                exit_status=result.exit_status,
                attempts=result.attempts, started=result.started,
                ended=result.ended or time.time(), duration_s=result.duration_s,
                machine=result.worker, queue=result.slot,
                executor=result.executor, package=build.package,
                python=build.python, cuda=build.cuda, variant=build.variant,
                worker_name=result.worker_name, host=result.host, token=token,
                cache=result.cache, tested=tested,
            )
        finally:
            discard_tree(tmp)
        entry = self.night.state.get(build.id)
        self._finish(build, entry.status, entry.reason, result.duration_s,
                     lane=self._lane(result.worker, result.slot))

    def file_without_result(self, build: Build, status: str, reason: str) -> None:
        collect_build(
            self.day, self.night.state, build, ok=False, reason=reason, files=(),
            failed_status=status, infra=True,
            file_log=lambda _ok, _reason, _packages: self.staging.assemble_log(
                self.day, build.id, "", False, None, reason=reason),
        )
        self._finish(build, status, reason, 0.0, lane=-1)

    def _finish(self, build: Build, status: str, reason: object, duration: float, lane: int) -> None:
        self.filed.add(build.id)
        self.current.pop(build.id, None)
        self._record(self.night.state.get(build.id), build.id)
        self._progress("end", {"build": build.id, "status": status, "reason": reason,
                               "duration_s": duration, "queue": lane})
        if not self.keep_staging:
            self.staging.drop(build.id)

    def fetch_packages(
        self, result: AttemptResult, tmp: Path
    ) -> tuple[list[Path], dict[str, tuple[int, str]]]:
        """Download the attempt's packages into `tmp` (in work/, on the day's filesystem, so
        filing them is a rename); with the size and sha256 the worker reported of each."""
        if tmp.exists():
            remove_tree(tmp)
        tmp.mkdir(parents=True)
        files, expected = [], {}
        prefix = attempt_prefix(self.day.name, result.build, result.token)
        for p in check_packages(result.packages, prefix):  # names, keys under the attempt, sha256s
            try:
                self.staging.get(p.key, tmp / p.name, p.size)
            except ObjectTooLarge as e:  # never read past what the worker reported
                raise ObjectTooLarge(
                    f"{p.name}: staging holds {e.size} bytes, the worker reported {p.size} "
                    f"bytes sha256 {p.sha256} (not read past them)", size=e.size) from e
            files.append(tmp / p.name)
            expected[p.name] = (p.size, p.sha256)
        return files, expected


def who(ev: WorkerEvent) -> str:
    """A worker as the operator named it (--name), with its address."""
    return f"{ev.worker_name} ({ev.worker})" if ev.worker_name else ev.worker


__all__ = ["Collector", "GpuTestHook", "who", "with_gpu_test"]
