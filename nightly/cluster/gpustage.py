"""Cluster mode, the orchestrator's side of the test stage (`[cluster] gpu_smoke`).

A CUDA build is built, and the CPU part of its test run, on a CPU worker. When its result
comes in (succeeded, with wheels, and a `[smoke] gpu_check` or `gpu_command` to run), the
build is not filed yet: its GPU part is submitted as a task of its own
(nightly.cluster.gputest.run_gpu_test_task) that needs one `gpu` of a worker of its
platform. Only when that test's result is in is the build filed (nightly.cluster.collector):
its packages published only if the test passed (or, without `[smoke] require_gpu`, could not
run); the test's log appended to the build's; the result in the build's `tested.gpu`.

A test that cannot run (no GPU worker for `[cluster] worker_wait`, its task cancelled or
its every worker killed) is recorded "not run", with why: a failure under require_gpu. A GPU
worker that dies mid-test has the scheduler run the test again on another GPU worker; if
there is none, the wait above applies. Either way the night goes on.

A rerun after the orchestrator was killed adopts a finished build from staging and with it
a finished (sealed) test of that build attempt, else tests it again; it never rebuilds it.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from typing import Any

from nightly.builds.test.smoke import FAILED, NOT_RUN, PASSED, needs_gpu_part, stage_part
from nightly.cluster.collector import Collector, who
from nightly.cluster.dispatch import (
    TEST,
    TEST_PRIORITY,
    Dispatcher,
    TaskItem,
    gpu_test_resources,
)
from nightly.cluster.gputest import run_gpu_test_task
from nightly.cluster.host import GPU, PLATFORM_PREFIX, platform_resource
from nightly.cluster.messages import (
    AttemptResult,
    GpuTestResult,
    GpuTestSpec,
    StagedPackage,
    WorkerEvent,
)
from nightly.cluster.staging import RESULT_JSON, StagingDay
from nightly.cluster.verify import check_packages, sealed
from nightly.config import Config
from nightly.core.matrix import Build
from nightly.workspace import LOST_GPU_TEST, SUCCEEDED, State

# (build, its result, this test's submission) -> the test's task
SpecFor = Callable[[Build, AttemptResult, str], GpuTestSpec]


class GpuStage:
    """The GPU tests of one cluster night: submitted as builds come in, filed as they end."""

    def __init__(
        self,
        config: Config,
        collector: Collector,
        staging: StagingDay,
        dispatcher: Dispatcher,
        *,
        spec_for: SpecFor,
        key_for: Callable[[Build], str],
        note: Callable[[str], None],
        commit: str,
        version: str,
    ) -> None:
        self.config, self.collector, self.staging = config, collector, staging
        self.dispatcher, self.spec_for, self.key_for, self.note = (
            dispatcher, spec_for, key_for, note)
        self.commit, self.version = commit, version
        self.awaiting: dict[str, AttemptResult] = {}  # build -> its result, until tested
        self.current: dict[str, WorkerEvent] = {}  # build -> its test's latest start
        self.gpu_workers: set[str] = set()  # the night's GPU workers (its cost)
        self._state: State | None = None  # where they are recorded (the night's, once seen)

    def begin(self, workers: Mapping[str, Mapping[str, object]], state: State) -> None:
        """Say what gpu_smoke means now (one line in the master log), and who the GPU
        workers are."""
        gpus = self.see_workers(workers, state)
        self.note("gpu_smoke: the test stage. CUDA builds are built on workers with build slots "
                  "(no longer sent to GPU workers); the GPU part of their test is a task of its "
                  f"own on a worker with the gpu resource ({len(gpus)} now), and each is "
                  "published only after it")

    def see_workers(self, workers: Mapping[str, Mapping[str, Any]], state: State) -> set[str]:
        """The GPU workers among `workers`; the night's list of them (state.json's meta
        `gpu_workers`: its cost, GPU-host seconds building vs testing) grows with them."""
        self._state = state
        gpus = {a for a, w in workers.items() if GPU in (w.get("resources") or {})}
        if not gpus <= self.gpu_workers:
            for address in sorted(gpus - self.gpu_workers):
                self._check_platform(address, workers[address])
            self.gpu_workers |= gpus
            state.set_meta(gpu_workers=sorted(self.gpu_workers))
        return gpus

    def _check_platform(self, address: str, worker: Mapping[str, Any]) -> None:
        """A GPU worker that declares no platform is never given a test (a test needs a
        worker of its build's platform): say so once, with the fix, rather than let its
        tests wait and end `not run`."""
        if any(str(r).startswith(PLATFORM_PREFIX) for r in worker.get("resources") or {}):
            return
        name = worker.get("name") or address
        self.note(f"GPU worker {name} ({address}) declares gpu but no platform, so it runs no "
                  f"GPU test: restart it with --resources \"gpu=1,{platform_resource('linux')}=1\" "
                  "(docs/cluster.md, 'GPU workers only test')")

    # ------------------------------------------------------------------ the collector's hook

    def wants(self, build: Build, result: AttemptResult) -> bool:
        """Whether this build's result waits for a GPU test before it is filed."""
        if not (self.config.cluster.gpu_smoke and self.config.smoke.enabled
                and result.status == SUCCEEDED):
            return False
        try:  # the record's shape is checked when it is filed; a bad one is not tested
            names = [str(p.get("name", "")) for p in result.packages or ()]
        except AttributeError:
            return False
        return needs_gpu_part(self.config, build, names)

    def start(self, build: Build, result: AttemptResult) -> None:
        """Submit the GPU test of a build that has just been built."""
        self.awaiting[build.id] = result
        key = self.key_for(build)
        try:
            spec = self.spec_for(build, result, hashlib.sha1(key.encode()).hexdigest())
        except ValueError as e:  # its package records are not a worker's: never tested
            self.file_test(build.id, FAILED, f"GPU test: not run: {e}")
            return
        self.note(f"built  {build.id} on {result.worker_name or result.worker}: its GPU test "
                  "waits for a worker with the gpu resource")
        self.dispatcher.submit(run_gpu_test_task, [TaskItem(
            build_id=build.id, key=key, spec=spec, resources=gpu_test_resources(build),
            priority=TEST_PRIORITY, kind=TEST)])

    def adopt(self, build: Build, result: AttemptResult) -> None:
        """A build adopted from staging (a killed run's): with its finished GPU test, if one
        of this build attempt carries the night's seal; else it is tested now."""
        try:
            tokens = self.staging.listing(build.id, tests=True).get(build.id, {})
        except OSError:
            tokens = {}
        for tok in sorted((t for t, n in tokens.items() if RESULT_JSON in n), reverse=True):
            r = self.staging.read(build.id, tok, RESULT_JSON, tests=True)
            if (r is None or r.get("build") != build.id or r.get("token") != tok
                    or r.get("build_token") != result.token or r.get("commit") != self.commit
                    or r.get("version") != self.version or r.get("result") not in (PASSED, FAILED)):
                continue
            if not sealed(self.collector.seal_key, r):
                self.note(f"not adopted the GPU test {tok} of {build.id}: its result.json does "
                          "not carry this night's seal: tested again")
                continue
            self.note(f"adopt  GPU test of {build.id}: attempt {tok} on "
                      f"{r.get('worker_name') or r.get('worker')} had finished before the run "
                      "that submitted it died")
            self.awaiting[build.id] = result
            self._file(build.id, GpuTestResult.from_json(r))
            return
        self.start(build, result)

    # ------------------------------------------------------------------ the tests' outcomes

    def on_event(self, ev: WorkerEvent) -> None:
        """A test attempt started (a later one than the last: the earlier one's worker was
        lost, and the scheduler runs the test again)."""
        cur = self.current.get(ev.build)
        if cur is not None and cur.token != ev.token:
            if ev.token < cur.token:
                return  # a late event of an attempt already superseded
            self.note(f"lost   GPU test of {ev.build}: its attempt on {who(cur)} ended without "
                      f"a result (its worker was lost); run again on {who(ev)}")
            self.collector.record_lost(ev.build, cur, ev.started or time.time(), stage=LOST_GPU_TEST)
        self.current[ev.build] = ev
        if ev.worker and ev.worker not in self.gpu_workers:
            # A worker that joined since the last tick and took a test at once is one of the
            # night's GPU workers too (its cost), even if the night ends before the next tick.
            self.gpu_workers.add(ev.worker)
            if self._state is not None:
                self._state.set_meta(gpu_workers=sorted(self.gpu_workers))
        self.note(f"test   {ev.build} on {ev.worker_name} ({ev.worker}): the GPU part")

    def on_result(self, item: TaskItem, returned: object) -> None:
        """A test's result, returned over the authenticated channel: it must be this very
        task's, of the build attempt it was given."""
        bid = item.build_id
        built = self.awaiting.get(bid)
        if built is None or bid in self.collector.filed:
            return
        test = (returned if isinstance(returned, GpuTestResult)
                else GpuTestResult.from_json(returned if isinstance(returned, Mapping) else {}))
        if (test.build != bid or test.submission != getattr(item.spec, "submission", None)
                or test.build_token != built.token):
            self.file_test(bid, FAILED, f"GPU test: its task returned a result for "
                           f"{test.build!r} (build attempt {test.build_token!r}), not for this "
                           "build's test: not used")
            return
        self._file(bid, test)

    def on_error(self, item: TaskItem, exc: BaseException | None) -> None:
        if item.build_id in self.collector.filed:
            return
        if exc is None:
            if self.collector.interrupting:
                return
            why = "its task was cancelled on the scheduler"
        elif type(exc).__name__ == "KilledWorker":
            why = f"every worker that ran it died ({exc})"
            self._lost_now(item.build_id)
        else:
            why = f"worker error: {type(exc).__name__}: {exc}"
        self.file_test(item.build_id, NOT_RUN, why)

    def give_up(self, item: TaskItem, wait_s: float) -> None:
        """No worker could run the test for `wait_s`: recorded not run."""
        lost = self.current.get(item.build_id)
        self._lost_now(item.build_id)
        needs = ", ".join(sorted(item.resources))
        why = (f"no worker with {needs} for {wait_s:g} s"
               + (f" after the one testing it ({lost.worker_name}, {lost.worker}) was lost"
                  if lost is not None else ""))
        self.file_test(item.build_id, NOT_RUN, why)

    def _lost_now(self, build_id: str) -> None:
        """The test's current attempt ended with its worker (no other took it up)."""
        cur = self.current.get(build_id)
        if cur is not None:
            self.collector.record_lost(build_id, cur, time.time(), stage=LOST_GPU_TEST)

    def file_test(self, build_id: str, result: str, why: str) -> None:
        """File a build whose GPU test did not give a result of its own: `result` (not run,
        or failed) with why."""
        part = stage_part(result, "", time.time(), reason=why)
        self._file(build_id, GpuTestResult(build=build_id, result=result, reason=why, part=part,
                                           token=""))

    def _file(self, build_id: str, test: GpuTestResult) -> None:
        built = self.awaiting.pop(build_id, None)
        if built is None or build_id in self.collector.filed:
            return
        self.current.pop(build_id, None)
        self.collector.file(self.collector.by_id[build_id], built, test=test)


def spec_packages(result: AttemptResult, prefix: str) -> tuple[StagedPackage, ...]:
    """The build's package records, checked (names, keys under its attempt, sha256s) before
    they go to a GPU worker (ValueError otherwise)."""
    return tuple(check_packages(result.packages, prefix))


__all__ = ["GpuStage", "SpecFor", "spec_packages"]
