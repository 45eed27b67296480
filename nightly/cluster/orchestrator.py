"""`nightly run --cluster ADDRESS`: the build phase of a night on a Dask cluster.

The night itself (lock, day folder, source, resume, publish, report, prune, summary) is
nightly.night.pipeline's pipeline, as on one machine; this phase submits every build of the night (all
platforms) to the Dask scheduler, one task per build (nightly.cluster.dispatch: resources,
priorities, retries), and each build runs on its worker through the ordinary Runner
(nightly.cluster.worker). Its packages and log go to the staging store, never through the
scheduler (nightly.cluster.staging); the task returns a small dict. As results arrive, this
process fetches the packages and files the build with nightly.builds.run.collect (the same step the local
queues end each build with): packages into `packages/<package>/<cuda>/`, the log (every
attempt's, dead workers' included) into `logs/succeeded|failed/`, then state.json and the
history. Publishing happens once, in the pipeline, after the builds.

With `[cluster] gpu_smoke` (the test stage), a CUDA build's GPU test is a task of its own on a
GPU worker, submitted when the build's result is in; the build is filed once the test is
(nightly.cluster.gpustage), so nothing CUDA is published before its GPU test.

Resume: killed (kill -9) and rerun, the night skips succeeded builds; this phase adopts an
attempt that had finished in staging but was not yet collected (a complete result.json, same
commit and version), and runs the rest again. The killed orchestrator's tasks are released by
the scheduler; their workers notice and stop the recipes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fnmatch
import hashlib
import json
import os
import secrets
import time
from collections.abc import Sequence
from typing import Any

from nightly.builds.run.phase import NightContext
from nightly.builds.view.progress import Progress
from nightly.cluster.collector import Collector
from nightly.cluster.dispatch import (
    TEST,
    WORKER_CHECK_S,
    Dispatcher,
    Resources,
    TaskItem,
    build_resources,
    capacity,
    cluster_bounds,
    connect,
    gpu_test_resources,
    lpt_priorities,
    reach,
    task_key,
)
from nightly.cluster.gpustage import GpuStage, spec_packages
from nightly.cluster.host import GPU, SLOTS
from nightly.cluster.inputs import stage_inputs, wait_for_leftovers
from nightly.cluster.messages import AttemptResult, GpuTestSpec
from nightly.cluster.options import (
    ClusterOptions,
    check_options,
    config_for_workers,
    estimate_source,
    estimator,
)
from nightly.cluster.staging import StagingDay, StagingSpec, attempt_prefix, inputs_key
from nightly.cluster.tls import client_security
from nightly.cluster.verify import night_key
from nightly.cluster.worker import TaskSpec, run_build_task
from nightly.config import Config, Machine
from nightly.core.matrix import Build, nightly_version
from nightly.errors import NothingSelected
from nightly.plan.schedule import make_plan, select_cli
from nightly.redact import environment_secrets
from nightly.workspace import INTERRUPTED, PENDING, RUNNING, Day, write_json
from nightly.workspace import live as live_state


class ClusterPhase:
    """The build phase on a Dask cluster (nightly.builds.run.phase.BuildPhase)."""

    def __init__(self, config: Config, date: dt.date, opts: ClusterOptions) -> None:
        self.address = check_options(config, opts)
        # distributed.Security: mutual TLS (nightly.cluster.tls)
        self.security = client_security(config.cluster, self.address, config=str(config.path))
        self.config, self.date, self.opts = config, date, opts
        est = estimator(config)
        self.plan_json = make_plan(config, estimate=est).to_json()
        chosen = select_cli(config, opts.selects)
        if not chosen:
            raise NothingSelected("nothing selected")
        self.estimates = {b.id: est(b) for b in chosen}
        # Longest first: the order builds are submitted (and shown).
        self.builds = sorted(chosen, key=lambda b: (-self.estimates[b.id], b.id))
        self.by_id = {b.id: b for b in self.builds}
        self.version = nightly_version(
            config.project.base_version, date, config.project.version_from
        )
        self.day = Day(config.root, date)
        self.run_id = secrets.token_hex(4)
        self.topic = f"nightly-{self.day.name}-{self.run_id}"
        cc = config.cluster
        self.staging_spec = StagingSpec(
            url=cc.staging, endpoint_url=cc.endpoint_url or config.publish.endpoint_url,
            region=cc.region, profile=cc.profile,
            backoffs=config.backoff, timeouts=config.external_timeouts,
        )
        self._staging: StagingDay | None = None
        self._night: NightContext | None = None
        self.progress: Progress | None = None
        self._collector: Collector | None = None
        self.no_worker_since: dict[str, float] = {}
        self.warned: set[str] = set()
        self.dispatcher: Dispatcher | None = None
        self.tests: GpuStage | None = None  # [cluster] gpu_smoke: the test stage's GPU tests
        self.seal_key = b""  # the night's (nightly.cluster.verify), made by build()
        self._inputs: tuple[str, str] = ("", "")  # the staged source's and recipes' sha256
        if not opts.dry_run and not self.day.path.exists():
            # A first run that cannot reach the scheduler (down; tcp:// to a TLS one) stops
            # here, naming the fix, before it makes a day folder it would leave behind.
            reach(self.address, cc.connect_timeout_s, self.security)

    # ------------------------------------------------------------------ BuildPhase

    @property
    def machine(self) -> Machine:
        return Machine(name="cluster", platform=self.builds[0].platform, queues=1,
                       executor="cluster")

    def meta(self) -> dict[str, object]:
        return {"cluster": self.address}

    def dry_run(self, day: Day, builds: Sequence[Build], version: str, channel: str) -> None:
        print(json.dumps({"cluster": self.address, "staging": self.config.cluster.staging,
                          "day": day.name, "version": version}))
        prio = lpt_priorities(self.builds, self.estimates)
        sm = self.config.smoke
        for b in self.builds:
            gpu_test = (self.config.cluster.gpu_smoke and sm.enabled and b.is_cuda
                        and bool(sm.gpu_check or sm.gpu_command))
            print(json.dumps({
                "build": b.id, "priority": prio[b.id], "estimate_s": self.estimates[b.id],
                "resources": build_resources(self.config, b), "executor": self.executor_for(b),
                **({"gpu_test_resources": gpu_test_resources(b)} if gpu_test else {}),
            }))

    def run(self, night: NightContext, todo: Sequence[Build]) -> float:
        self._night = night
        self._collector = Collector(
            night, self.staging, self.builds, version=self.version, rebuild=self._rebuild,
            keep_staging=self.config.cluster.keep_staging, note=self.note,
        )
        if not todo:
            self.note(f"night {self.day.name} on cluster {self.address}: nothing to build, "
                      f"{len(self.builds)} already succeeded")
            return 0.0
        return self.build(list(todo))

    def finish(self, night: NightContext) -> None:
        """What is left of the day in staging (inputs, stray attempts) once the night is
        collected; a rerun stages the inputs again."""
        if not self.config.cluster.keep_staging:
            self.staging.drop()

    # ------------------------------------------------------------------ helpers

    @property
    def night(self) -> NightContext:
        assert self._night is not None, "the phase has not started"
        return self._night

    @property
    def collector(self) -> Collector:
        assert self._collector is not None, "the phase has not started"
        return self._collector

    @property
    def staging(self) -> StagingDay:
        if self._staging is None:
            self._staging = StagingDay(self.staging_spec.open(), self.day.name)
        return self._staging

    def executor_for(self, build: Build) -> str:
        if self.config.cluster.executor:
            return self.config.cluster.executor
        # The executor of the first machine that can build it, for its architecture (a
        # machine's `executors`: aarch64 cross-built on the host beside its containers).
        for m in self.config.machines:
            if m.can_build(build):
                return m.executor_for(build.target_arch)
        for m in self.config.machines:
            if m.platform == build.platform:
                return m.executor
        return "local"

    def note(self, line: str) -> None:
        if self.progress is not None:
            self.progress.log(line)
        else:
            self.night.log(line)

    def _rebuild(self, build_id: str) -> bool:
        return any(fnmatch.fnmatchcase(build_id, g) for g in self.opts.rebuild)

    # ------------------------------------------------------------------ the builds

    def build(self, todo: list[Build]) -> float:
        """Stage the inputs, connect, adopt finished attempts, submit and collect. Returns
        the estimated makespan on the cluster as it was at the start."""
        cc = self.config.cluster
        # Made once per day (a rerun adopts with it); kept in the day folder, never in staging.
        self.seal_key = self.collector.seal_key = night_key(self.day.work / "cluster" / "seal.key")
        # Masked in every log read back from staging (no worker has a reason to print them).
        self.staging.secrets = (self.seal_key.hex(), *environment_secrets(os.environ))
        source_sha, recipes_sha = self._inputs = self.stage_inputs()
        client = connect(self.address, cc.connect_timeout_s, self.security)
        try:
            dispatcher = self.dispatcher = Dispatcher(client, topic=self.topic,
                                                      retries=cc.task_retries)
            workers = dispatcher.workers()
            resources = {b.id: build_resources(self.config, b) for b in todo}
            bounds = cluster_bounds({b.id: self.estimates[b.id] for b in todo}, resources, workers)
            prio = lpt_priorities(todo, self.estimates)
            self.plan_json["cluster"] = {
                "address": self.address,
                "staging": cc.staging,
                "workers": {a: {"name": str(w.get("name")), "resources": w.get("resources"),
                                "nthreads": w.get("nthreads")} for a, w in workers.items()},
                "slots": bounds.slots,
                "lower_bound_s": bounds.lower_bound_s,
                "estimated_makespan_s": bounds.makespan_s,
                "builds": [{"id": b.id, "priority": prio[b.id], "estimate_s": self.estimates[b.id],
                            "resources": resources[b.id]} for b in todo],
            }
            write_json(self.day.master / "plan.json", self.plan_json)
            estimates = {b.id: self.estimates[b.id] for b in todo}
            # The same live view as a local night's: each running build's phase (the
            # workers' events), and logs/master/live.json for `nightly status`.
            self.progress = self.collector.progress = progress = Progress(
                total=len(todo), master_log=self.day.master / "run.log",
                estimate_s=bounds.makespan_s, live=self.opts.live, estimates=estimates,
                estimate_source=estimate_source(self.config, estimates),
                live_path=live_state.path_of(self.day.master),
            )
            with progress:
                progress.log(
                    f"night {self.day.name} on cluster {self.address}: {len(todo)} to build, "
                    f"{len(self.builds) - len(todo)} already succeeded, {len(workers)} worker(s), "
                    f"slots {bounds.slots}, staging {cc.staging}, "
                    f"source {self.night.source_describe}"
                )
                for bid in bounds.unplaceable:
                    self._warn_no_worker(bid, resources[bid])
                if cc.gpu_smoke:
                    self._start_test_stage(dispatcher, workers)
                wait_for_leftovers(client, todo, day_name=self.day.name, topic=self.topic,
                                   note=self.note)
                adopted = self.collector.adopt(todo)
                items = [
                    self._task(b, resources[b.id], prio[b.id], source_sha, recipes_sha)
                    for b in todo if b.id not in adopted
                ]
                dispatcher.submit(run_build_task, items)
                self._dispatch(dispatcher)
        finally:
            with contextlib.suppress(Exception):
                client.close()
        return bounds.makespan_s

    def _task(self, b: Build, resources: Resources, priority: int, source_sha: str,
              recipes_sha: str) -> TaskItem:
        cc = self.config.cluster
        key = task_key(b, self.day.name, self.run_id)
        spec = TaskSpec(
            config=config_for_workers(self.config), build=b,
            day=self.day.name, date=self.date, version=self.version,
            channel=self.night.channel, commit=self.night.commit,
            executor=self.executor_for(b), keep_container=self.opts.keep_container,
            staging=self.staging_spec,
            source_key=inputs_key(self.day.name, "source", source_sha),
            source_sha256=source_sha,
            recipes_key=inputs_key(self.day.name, "recipes", recipes_sha),
            recipes_sha256=recipes_sha,
            source_size=self._input_size("source.tar.gz"),
            recipes_size=self._input_size("recipes.tar.gz"),
            attempts=self.night.state.get(b.id).attempts,
            submission=hashlib.sha1(key.encode()).hexdigest(),
            topic=self.topic, log_flush_s=cc.log_flush_s, seal_key=self.seal_key,
            gpu_stage=cc.gpu_smoke,
        )
        return TaskItem(build_id=b.id, key=key, spec=spec, resources=resources,
                        priority=priority)

    # ------------------------------------------------------------------ the test stage

    def _start_test_stage(self, dispatcher: Dispatcher, workers: dict[str, Any]) -> None:
        """[cluster] gpu_smoke: CUDA builds build on CPU workers; their GPU tests are tasks of
        their own on GPU workers (nightly.cluster.gpustage)."""
        self.tests = self.collector.tests = GpuStage(
            self.config, self.collector, self.staging, dispatcher, spec_for=self._test_spec,
            key_for=lambda b: task_key(b, self.day.name, self.run_id, what=TEST),
            note=self.note, commit=self.night.commit, version=self.version,
        )
        self.tests.begin(workers, self.night.state)

    def _test_spec(self, b: Build, result: AttemptResult, submission: str) -> GpuTestSpec:
        source_sha = self._inputs[0]
        return GpuTestSpec(
            config=config_for_workers(self.config), build=b, day=self.day.name, date=self.date,
            version=self.version, channel=self.night.channel, commit=self.night.commit,
            executor=self.executor_for(b), keep_container=self.opts.keep_container,
            staging=self.staging_spec, source_key=inputs_key(self.day.name, "source", source_sha),
            source_sha256=source_sha, source_size=self._input_size("source.tar.gz"),
            build_token=result.token,
            packages=spec_packages(result, attempt_prefix(self.day.name, b.id, result.token)),
            submission=submission, topic=self.topic, log_flush_s=self.config.cluster.log_flush_s,
            seal_key=self.seal_key,
        )

    def _dispatch(self, dispatcher: Dispatcher) -> None:
        cc = self.config.cluster

        def on_result(item: TaskItem, result: object) -> None:
            if item.kind == TEST and self.tests is not None:
                self.tests.on_result(item, result)
            else:
                self.collector.on_result(item, result)

        def on_error(item: TaskItem, exc: BaseException | None) -> None:
            if item.kind == TEST and self.tests is not None:
                self.tests.on_error(item, exc)
            else:
                self.collector.on_error(item, exc)

        try:
            dispatcher.run(on_result=on_result, on_error=on_error,
                           on_event=self.collector.on_event, on_tick=self.on_tick,
                           tick_s=max(0.5, min(WORKER_CHECK_S, cc.worker_wait_s / 4)))
        except KeyboardInterrupt:
            self.collector.interrupting = True
            dispatcher.cancel_all()
            state = self.night.state
            for bid in dispatcher.futures:
                if bid not in self.collector.filed and state.status(bid) == RUNNING:
                    state.update(bid, status=INTERRUPTED,
                                 reason="interrupted by the user (Ctrl-C)")
            raise

    def _input_size(self, name: str) -> int:
        try:
            return (self.day.work / "cluster" / name).stat().st_size
        except OSError:
            return 0  # not capped

    def stage_inputs(self) -> tuple[str, str]:
        """The day's source and the recipes, as tarballs in staging (nightly.cluster.inputs)."""
        return stage_inputs(self.night, self.config.recipes, self.day.work / "cluster",
                            self.staging)

    def on_tick(self, remaining: set[str]) -> None:
        """Tasks that no live worker can run wait `cluster.worker_wait`, then are given up: a
        build is reported not run (or not finished), a GPU test recorded not run."""
        assert self.dispatcher is not None
        try:
            workers = self.dispatcher.workers()
        except Exception as e:
            self.note(f"cannot ask the scheduler for its workers: {e}")
            return
        if self.tests is not None:
            self.tests.see_workers(workers, self.night.state)
        now = time.monotonic()
        wait_s = self.config.cluster.worker_wait_s
        for iid in sorted(remaining):
            item = self.dispatcher.items[iid]
            res, bid = item.resources, item.build_id
            if capacity(workers, res) >= 1:
                self.no_worker_since.pop(iid, None)
                continue
            since = self.no_worker_since.setdefault(iid, now)
            self._warn_no_worker(bid, res)
            if now - since < wait_s or bid in self.collector.filed:
                continue
            self.dispatcher.cancel(iid)
            if item.kind == TEST and self.tests is not None:
                self.tests.give_up(item, wait_s)
                continue
            self.collector.given_up.add(bid)
            started = self.night.state.status(bid) == RUNNING
            needs = ", ".join(r for r in res if r != SLOTS)
            self.collector.file_without_result(
                self.by_id[bid], INTERRUPTED if started else PENDING,
                f"no worker with {needs} (and a free slot) for {wait_s:g} s: not "
                f"{'finished' if started else 'run'}; rerun the night when one is up",
            )

    def _warn_no_worker(self, build_id: str, res: Resources) -> None:
        needs = ", ".join(r for r in res if r != SLOTS)
        what = "GPU tests" if GPU in res and res[GPU] > 0 else "builds"
        if f"{what}: {needs}" not in self.warned:
            self.warned.add(f"{what}: {needs}")
            have = "" if what == "GPU tests" else " and slots"
            self.note(f"warning: no worker has {needs}{have}: its {what} ({build_id}, ...) "
                      f"wait up to {self.config.cluster.worker_wait_s:g} s for one")

__all__ = ["ClusterOptions", "ClusterPhase", "check_options", "config_for_workers", "estimator"]
