"""`nightly run --cluster ADDRESS`: the whole night on a Dask cluster.

The orchestrating process does what `nightly run` does on one machine (the day's lock, the day
folder, the source checkout, plan.json, state.json with resume and `--rebuild`), then submits
every build of the night (all platforms) to the Dask scheduler, one task per build:

- resources: each build takes one `slots` and requires its platform (`platform-linux`,
  `platform-macos`; with `cluster.gpu_smoke`, CUDA builds also `gpu`), so it only goes to a
  worker that can run it (docs/cluster.md: how workers declare them);
- priority: longest estimated first (the plan's estimates: the history's, else the
  configured ones), so the cluster's list schedule stays close to the lower bound;
- retries: a worker that dies mid-build loses its task, and the scheduler runs it again on
  another worker (up to `distributed.scheduler.allowed-failures` times); a task that raised
  is rerun `cluster.task_retries` times.

Each build runs on its worker through the ordinary Runner (nightly.executors.cluster). Its
packages and log go to the staging store, never through the scheduler; the task returns a
small dict. As results arrive, this process fetches the packages into
`packages/<package>/<cuda>/`, puts the log (every attempt's, dead workers' included) into
`logs/succeeded|failed/`, updates state.json and the history, and in the end runs the same
publish, report, prune and summary steps as `nightly run` (nightly.night's functions).
Publishing happens once, here, after the builds: nothing is uploaded twice.

Resume: killed (kill -9) and rerun, it skips succeeded builds, adopts an attempt that had
finished in staging but was not yet collected (a complete result.json, same commit and
version), and runs the rest again. The killed orchestrator's tasks are released by the
scheduler; their workers notice and stop the recipes.

dask and distributed are imported only inside the functions that use them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import fnmatch
import hashlib
import heapq
import json
import os
import queue
import secrets
import shutil
import sqlite3
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nightly.config import Config, Machine
from nightly.errors import ConfigError, NightlyError, NothingSelected, PublishError, UsageError
from nightly.executors.cluster import (
    ATTEMPT_JSON,
    GPU,
    LOG_CHUNKS,
    LOG_TXT,
    RESULT_JSON,
    SLOTS,
    StagingSpec,
    TaskSpec,
    attempt_prefix,
    build_prefix,
    builds_prefix,
    inputs_key,
    make_tarball,
    platform_resource,
    read_json,
    run_build_task,
)
from nightly.matrix import Build, nightly_version
from nightly.workspace import (
    FAILED,
    INTERRUPTED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    Day,
    DayLock,
    State,
    atomic_write,
    write_json,
)

WORKER_CHECK_S = 5.0  # how often the workers' capacity is looked at while builds wait
LEFTOVER_WAIT_S = 60.0  # how long a rerun waits for a killed run's attempts to stop
Resources = Mapping[str, float]


@dataclass(kw_only=True)
class ClusterOptions:
    address: str = ""  # --cluster; "" = [cluster] address
    machine: str | None = None  # --machine (an error together with a cluster)
    dry_run: bool = False
    no_upload: bool = False
    rebuild: tuple[str, ...] = ()
    selects: tuple[str, ...] = ()
    keep_container: bool = False
    live: bool | None = None
    notify: bool = True


# ---------------------------------------------------------------------------- planning


def estimator(config: Config) -> Callable[[Build], float]:
    """One process plans the whole cluster, so the history's estimates are always
    consistent here (unless history_estimates = "never")."""
    from nightly.history import History, history_path
    from nightly.history import estimator as history_estimator

    path = history_path(config.root)
    if config.history_estimates == "never" or not path.exists():
        return config.estimate_for
    return history_estimator(config, History(path))


def lpt_priorities(builds: Sequence[Build], estimate: Mapping[str, float]) -> dict[str, int]:
    """Dask priorities (higher runs first): the estimate in milliseconds, so the longest
    builds start first; builds of equal estimate share a priority (and one submission)."""
    return {b.id: round(estimate[b.id] * 1000) for b in builds}


def build_resources(config: Config, build: Build) -> dict[str, float]:
    """What a build needs of a worker: one build slot, and its capabilities (amount 0: only
    workers that declare them qualify, and running builds never use them up)."""
    res = {SLOTS: 1.0, platform_resource(build.platform): 0.0}
    if config.cluster.gpu_smoke and config.smoke.enabled and build.is_cuda:
        res[GPU] = 0.0
    return res


def worker_slots(info: Mapping[str, Any], resources: Resources) -> float:
    """The build slots of one worker (scheduler_info's entry) that `resources` may use."""
    have = info.get("resources") or {}
    if any(r not in have or float(have[r]) < float(need) for r, need in resources.items()):
        return 0.0
    return float(have.get(SLOTS, 0.0))


def capacity(workers: Mapping[str, Mapping[str, Any]], resources: Resources) -> float:
    return sum(worker_slots(w, resources) for w in workers.values())


@dataclass(frozen=True, kw_only=True)
class Bounds:
    lower_bound_s: float  # per group of builds with the same needs: max(longest, work / slots)
    makespan_s: float  # greedy list schedule, longest first, on the slots available
    slots: dict[str, float]  # slots per resource signature
    unplaceable: tuple[str, ...]  # builds no worker can run


def cluster_bounds(
    estimates: Mapping[str, float],
    resources: Mapping[str, Resources],
    workers: Mapping[str, Mapping[str, Any]],
) -> Bounds:
    groups: dict[str, list[str]] = {}
    sig_res: dict[str, Resources] = {}
    for bid, res in resources.items():
        sig = ",".join(sorted(r for r in res if r != SLOTS))
        groups.setdefault(sig, []).append(bid)
        sig_res[sig] = res
    lb = ms = 0.0
    slots: dict[str, float] = {}
    unplaceable: list[str] = []
    for sig, ids in groups.items():
        cap = capacity(workers, sig_res[sig])
        slots[sig] = cap
        if cap < 1:
            unplaceable += ids
            continue
        ests = sorted((estimates[i] for i in ids), reverse=True)
        lb = max(lb, ests[0], sum(ests) / cap)
        heap = [0.0] * int(cap)
        for e in ests:
            t = heapq.heappop(heap)
            heapq.heappush(heap, t + e)
        ms = max(ms, max(heap))
    return Bounds(lower_bound_s=lb, makespan_s=ms, slots=slots, unplaceable=tuple(sorted(unplaceable)))


# ---------------------------------------------------------------------------- dispatching


@dataclass(frozen=True, kw_only=True)
class TaskItem:
    build_id: str
    key: str
    spec: Any
    resources: Resources
    priority: int


def task_key(build: Build, day: str, run_id: str) -> str:
    """Unique per orchestrator run. Its leading words (`nightly-manywheel-cuda`) are the
    task's Dask prefix: the scheduler learns durations per package and cpu/cuda."""
    kind = "cuda" if build.is_cuda else "cpu"
    return f"nightly-{build.package}-{kind}-{day.replace('/', '_')}-{build.id}-{run_id}"


class Dispatcher:
    """Hands tasks to the scheduler and gives back, on the calling thread, results as they
    arrive, the workers' events and a periodic tick. The night and the benchmark share it.

    Work-conserving list scheduling, longest first: per group of tasks with the same
    resources, at most (the group's slots + `lookahead` per worker that can run it) are on
    the cluster at a time, and as each finishes the next one by priority goes out; the few
    queued on each worker hide the round trip. Handing everything over at once
    (`lookahead=None`) has the scheduler place every task up front, on its guesses of the
    durations (it learns them per task prefix: `task_key`), which stealing then corrects.
    benchmarks/bench_cluster.py measures both.
    """

    def __init__(
        self, client: Any, *, topic: str, retries: int, lookahead: int | None = 2
    ) -> None:
        self.client = client
        self.topic = topic
        self.retries = retries
        self.lookahead = lookahead
        self.inbox: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.futures: dict[str, Any] = {}
        self.items: dict[str, TaskItem] = {}
        self.pending: dict[tuple[tuple[str, float], ...], list[TaskItem]] = {}
        self.inflight: dict[tuple[tuple[str, float], ...], int] = {}
        self.fn: Callable[..., Any] | None = None
        self._workers: dict[str, dict[str, Any]] = {}
        self._workers_at = 0.0
        client.subscribe_topic(topic, self._on_event)

    def _on_event(self, event: Any) -> None:
        msg = event[1] if isinstance(event, tuple) and len(event) == 2 else event
        if isinstance(msg, dict):
            self.inbox.put(("event", msg))

    @staticmethod
    def _sig(item: TaskItem) -> tuple[tuple[str, float], ...]:
        return tuple(sorted(item.resources.items()))

    def submit(self, fn: Callable[..., Any], items: Iterable[TaskItem]) -> None:
        """Queue `items` (highest priority first, the given order among equals) and send
        what the cluster has room for."""
        self.fn = fn
        for it in items:
            self.items[it.build_id] = it
            self.pending.setdefault(self._sig(it), []).append(it)
        for q in self.pending.values():
            q.sort(key=lambda i: -i.priority)  # stable: equal priorities keep their order
        self.refill(fresh=True)

    def refill(self, *, fresh: bool = False) -> None:
        if self.lookahead is None:
            for sig in list(self.pending):
                self._send(sig, len(self.pending[sig]))
            return
        workers = self.workers() if fresh or time.monotonic() - self._workers_at > 1.0 \
            else self._workers
        for sig, waiting in self.pending.items():
            if not waiting:
                continue
            res = dict(sig)
            able = [w for w in workers.values() if worker_slots(w, res) > 0]
            limit = int(sum(worker_slots(w, res) for w in able)) + self.lookahead * len(able)
            self._send(sig, limit - self.inflight.get(sig, 0))

    def _send(self, sig: tuple[tuple[str, float], ...], n: int) -> None:
        """The next `n` tasks of a group: one `client.map` per priority."""
        waiting = self.pending.get(sig, [])
        batch, self.pending[sig] = waiting[:max(n, 0)], waiting[max(n, 0):]
        if not batch:
            return
        assert self.fn is not None
        self.inflight[sig] = self.inflight.get(sig, 0) + len(batch)
        by_priority: dict[int, list[TaskItem]] = {}
        for it in batch:
            by_priority.setdefault(it.priority, []).append(it)
        for priority, group in sorted(by_priority.items(), key=lambda kv: -kv[0]):
            futures = self.client.map(
                self.fn, [it.spec for it in group], key=[it.key for it in group],
                resources=dict(sig), priority=priority, retries=self.retries, pure=False,
            )
            for it, fut in zip(group, futures, strict=True):
                self.futures[it.build_id] = fut
                fut.add_done_callback(
                    lambda f, bid=it.build_id: self.inbox.put(("done", (bid, f))))

    def cancel(self, build_id: str) -> None:
        item = self.items.get(build_id)
        if item is not None and item in self.pending.get(self._sig(item), []):
            self.pending[self._sig(item)].remove(item)
            self.inbox.put(("done", (build_id, None)))
            return
        fut = self.futures.get(build_id)
        if fut is not None:
            with contextlib.suppress(Exception):
                fut.cancel()

    def cancel_all(self) -> None:
        self.pending.clear()
        with contextlib.suppress(Exception):
            self.client.cancel(list(self.futures.values()))

    def workers(self) -> dict[str, dict[str, Any]]:
        info = self.client.scheduler_info(n_workers=-1)
        self._workers = dict(info.get("workers") or {})
        self._workers_at = time.monotonic()
        return self._workers

    def run(
        self,
        *,
        on_result: Callable[[TaskItem, dict[str, Any]], None],
        on_error: Callable[[TaskItem, BaseException | None], None],
        on_event: Callable[[dict[str, Any]], None] | None = None,
        on_tick: Callable[[set[str]], None] | None = None,
        tick_s: float = WORKER_CHECK_S,
    ) -> None:
        """Until every task has finished, erred or been cancelled (`on_error(item, None)`)."""
        remaining = set(self.items)
        last_tick = time.monotonic()
        while remaining:
            try:
                kind, payload = self.inbox.get(timeout=min(tick_s, 1.0))
            except queue.Empty:
                kind, payload = "idle", None
            if kind == "event" and on_event is not None:
                on_event(payload)
            elif kind == "done":
                bid: str = payload[0]
                fut: Any = payload[1]
                if bid in remaining and (fut is None or self.futures.get(bid) is fut):
                    remaining.discard(bid)
                    item = self.items[bid]
                    self._done(item, fut, on_result, on_error)
                    if fut is not None:
                        self.inflight[self._sig(item)] -= 1
                        self.refill()
            now = time.monotonic()
            if now - last_tick >= tick_s:
                last_tick = now
                if on_tick is not None:
                    on_tick(remaining)
                self.refill(fresh=True)
        with contextlib.suppress(Exception):
            self.client.unsubscribe_topic(self.topic)

    @staticmethod
    def _done(
        item: TaskItem,
        fut: Any,
        on_result: Callable[[TaskItem, dict[str, Any]], None],
        on_error: Callable[[TaskItem, BaseException | None], None],
    ) -> None:
        if fut is None or fut.status == "cancelled":
            on_error(item, None)
        elif fut.status == "finished":
            try:
                result = fut.result()
            except Exception as e:  # lost between finishing and fetching
                on_error(item, e)
            else:
                on_result(item, result)
        else:
            on_error(item, fut.exception())
        if fut is not None:
            with contextlib.suppress(Exception):
                fut.release()


def connect(address: str, timeout_s: float, security: Any = None) -> Any:
    from distributed import Client

    try:
        return Client(address, timeout=timeout_s, set_as_default=False,  # type: ignore[no-untyped-call]
                      security=security)
    except (OSError, TimeoutError, ValueError) as e:
        raise NightlyError(
            f"cannot reach the Dask scheduler at {address}: {e}. Is `dask scheduler` running "
            "there, and the address right (--cluster, [cluster] address)?"
            + (" Are [cluster] tls_cert and tls_key from the CA the scheduler trusts "
               "(tls_ca_file)?" if security is not None else "")
            + " See docs/cluster.md"
        ) from e


# ---------------------------------------------------------------------------- the night


def run_night(config: Config, date: dt.date, opts: ClusterOptions) -> int:
    """`nightly run --cluster`: the exit code of the night."""
    if opts.machine is not None:
        raise UsageError(
            "--machine and a cluster exclude each other: a cluster night runs every machine's "
            "builds (drop --machine, or run without --cluster and [cluster] address)"
        )
    address = opts.address or config.cluster.address
    if not address:
        raise UsageError("no cluster: pass --cluster ADDRESS or set [cluster] address")
    if not config.cluster.staging:
        raise ConfigError(
            "is required in cluster mode: where workers put packages and logs",
            file=str(config.path), key="cluster.staging",
            hint="a folder every host mounts, or s3://BUCKET/PREFIX (docs/cluster.md)",
        )
    from nightly.tls import client_security

    security = client_security(config.cluster, address, config=str(config.path))
    return ClusterNight(config, date, opts, address, security).run()


class ClusterNight:
    def __init__(self, config: Config, date: dt.date, opts: ClusterOptions, address: str,
                 security: Any = None) -> None:
        from nightly.schedule import make_plan, select_cli

        self.config, self.date, self.opts, self.address = config, date, opts, address
        self.security = security  # distributed.Security: mutual TLS (nightly.tls)
        est = estimator(config)
        plan = make_plan(config, estimate=est)
        self.plan_json = plan.to_json()
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
        self.channel = "nightly"
        self.day = Day(config.root, date)
        self.run_id = secrets.token_hex(4)
        self.topic = f"nightly-{self.day.name}-{self.run_id}"
        # filled in by run()
        self.state: State = None  # type: ignore[assignment]
        self.history: Any = None
        self.store: Any = None
        self.progress: Any = None
        self.commit = ""
        self.filed: set[str] = set()
        self.current: dict[str, dict[str, Any]] = {}  # build -> its latest start event
        self.lanes: dict[tuple[str, int], int] = {}
        self.no_worker_since: dict[str, float] = {}
        self.given_up: set[str] = set()
        self.warned: set[str] = set()
        self.dispatcher: Dispatcher | None = None
        self.interrupting = False

    def executor_for(self, build: Build) -> str:
        if self.config.cluster.executor:
            return self.config.cluster.executor
        for m in self.config.machines:
            if m.platform == build.platform:
                return m.executor
        return "local"

    def note(self, line: str) -> None:
        if self.progress is not None:
            self.progress.log(line)
        else:
            _append(self.day.master / "run.log", line)

    # ------------------------------------------------------------------ the whole night

    def run(self) -> int:
        from nightly import source as src
        from nightly.history import History, history_path
        from nightly.night import (
            NightContext,
            check_free_space,
            prune_step,
            publish_step,
            report_step,
            write_summary,
        )

        config, day, opts = self.config, self.day, self.opts
        if opts.dry_run:
            return self.dry_run()
        check_free_space(config)
        lock = DayLock(day.lock_path).acquire("run")
        try:
            day.create()
            started = time.time()
            if lock.taken_over:
                h = lock.taken_over
                msg = (f"warning: took over a stale lock of host {h.get('host')}, pid "
                       f"{h.get('pid')}, started {h.get('started')} (that run is gone)")
                print(msg, file=sys.stderr)
                self.note(msg)
            checkout = src.prepare(config.project, day.source, self.date,
                                   config_dir=config.path.parent)
            self.commit = checkout.commit
            self.state = state = State(day.state_path)
            self.history = History(history_path(config.root))
            stale = state.mark_stale_running()
            if stale:
                self.note(f"resuming: {len(stale)} build(s) left running by a dead run: "
                          f"{', '.join(stale)}")
            state.set_meta(commit=checkout.commit, source=checkout.describe, version=self.version,
                           channel=self.channel, date=day.name, cluster=self.address)
            todo = [b for b in self.builds
                    if state.status(b.id) != SUCCEEDED or self._rebuild(b.id)]
            night = NightContext(
                config=config, day=day, state=state,
                machine=Machine(name="cluster", platform=self.builds[0].platform,
                                queues=1, executor="cluster"),
                version=self.version, channel=self.channel, commit=checkout.commit,
                source_describe=checkout.describe, log=self.note, builds=list(self.builds),
            )
            estimate_s = 0.0
            if todo:
                estimate_s = self.build(todo, checkout)
            else:
                write_json(day.master / "plan.json", self.plan_json)
                self.note(f"night {day.name} on cluster {self.address}: nothing to build, "
                          f"{len(self.builds)} already succeeded")
            if not opts.no_upload:
                publish_step(night)
            try:
                self.history.record_state(day.name, state, commit=checkout.commit,
                                          channel=self.channel)
            except (sqlite3.Error, OSError) as e:
                self.note(f"history: could not record the night: {e}")
            report_step(night, self.history, publish=not opts.no_upload)
            prune_step(config, self.date, self.note)
            self.drop_day_staging()
            summary = write_summary(night, started=started, estimate_s=estimate_s,
                                    estimates=self.estimates)
            from nightly import display, notify

            if opts.notify:
                for line in notify.send(config.notify, summary):
                    self.note(line)
            display.print_summary(summary)
            return int(summary["exit_code"])
        except KeyboardInterrupt:
            _append(day.master / "run.log", "interrupted by the user (Ctrl-C)")
            raise
        finally:
            lock.release()

    def _rebuild(self, build_id: str) -> bool:
        return any(fnmatch.fnmatchcase(build_id, g) for g in self.opts.rebuild)

    def dry_run(self) -> int:
        print(json.dumps({"cluster": self.address, "staging": self.config.cluster.staging,
                          "day": self.day.name, "version": self.version}))
        prio = lpt_priorities(self.builds, self.estimates)
        for b in self.builds:
            print(json.dumps({
                "build": b.id, "priority": prio[b.id], "estimate_s": self.estimates[b.id],
                "resources": build_resources(self.config, b), "executor": self.executor_for(b),
            }))
        return 0

    # ------------------------------------------------------------------ the builds

    def build(self, todo: list[Build], checkout: Any) -> float:
        """Stage the inputs, connect, adopt finished attempts, submit and collect. Returns
        the estimated makespan on the cluster as it was at the start."""
        from nightly.progress import Progress

        cc = self.config.cluster
        staging = StagingSpec(url=cc.staging, endpoint_url=cc.endpoint_url or
                              self.config.publish.endpoint_url, region=cc.region, profile=cc.profile)
        self.store = staging.open()
        source_sha, recipes_sha = self.stage_inputs(checkout)
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
            self.progress = progress = Progress(
                total=len(todo), master_log=self.day.master / "run.log",
                estimate_s=bounds.makespan_s, live=self.opts.live,
            )
            with progress:
                progress.log(
                    f"night {self.day.name} on cluster {self.address}: {len(todo)} to build, "
                    f"{len(self.builds) - len(todo)} already succeeded, {len(workers)} worker(s), "
                    f"slots {bounds.slots}, staging {cc.staging}, source {checkout.describe}"
                )
                for bid in bounds.unplaceable:
                    self._warn_no_worker(bid, resources[bid])
                self.wait_for_leftovers(client, todo)
                adopted = self.adopt(todo)
                items = []
                for b in todo:
                    if b.id in adopted:
                        continue
                    key = task_key(b, self.day.name, self.run_id)
                    spec = TaskSpec(
                        config=dataclasses.replace(self.config, builds=()), build=b,
                        day=self.day.name, date=self.date, version=self.version,
                        channel=self.channel, commit=self.commit,
                        executor=self.executor_for(b), keep_container=self.opts.keep_container,
                        staging=staging, source_key=inputs_key(self.day.name, "source", source_sha),
                        source_sha256=source_sha,
                        recipes_key=inputs_key(self.day.name, "recipes", recipes_sha),
                        recipes_sha256=recipes_sha,
                        attempts=int(self.state.get(b.id).get("attempts") or 0),
                        submission=hashlib.sha1(key.encode()).hexdigest(),
                        topic=self.topic, log_flush_s=cc.log_flush_s,
                    )
                    items.append(TaskItem(build_id=b.id, key=key, spec=spec,
                                          resources=resources[b.id], priority=prio[b.id]))
                dispatcher.submit(run_build_task, items)
                try:
                    dispatcher.run(on_result=self.on_result, on_error=self.on_error,
                                   on_event=self.on_event, on_tick=self.on_tick,
                                   tick_s=max(0.5, min(WORKER_CHECK_S, cc.worker_wait_s / 4)))
                except KeyboardInterrupt:
                    self.interrupting = True
                    dispatcher.cancel_all()
                    for bid in dispatcher.futures:
                        if bid not in self.filed and self.state.status(bid) == RUNNING:
                            self.state.update(bid, status=INTERRUPTED,
                                              reason="interrupted by the user (Ctrl-C)")
                    raise
        finally:
            with contextlib.suppress(Exception):
                client.close()
        return bounds.makespan_s

    def stage_inputs(self, checkout: Any) -> tuple[str, str]:
        """The day's source and the recipes, as tarballs in staging (each host fetches them
        once). The source tarball is made once per checkout."""
        cache = self.day.work / "cluster"
        src_tar, meta_path = cache / "source.tar.gz", cache / "source.json"
        meta: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            meta = json.loads(meta_path.read_text())
        ident = {"commit": checkout.commit, "describe": checkout.describe}
        if src_tar.exists() and {k: meta.get(k) for k in ident} == ident and meta.get("sha256"):
            source_sha = str(meta["sha256"])
        else:
            source_sha = make_tarball(checkout.path, src_tar)
            write_json(meta_path, {**ident, "sha256": source_sha})
        recipes_tar = cache / "recipes.tar.gz"
        recipes_sha = make_tarball(self.config.recipes, recipes_tar)
        try:
            self.store.ensure(inputs_key(self.day.name, "source", source_sha), src_tar, source_sha)
            self.store.ensure(inputs_key(self.day.name, "recipes", recipes_sha), recipes_tar,
                              recipes_sha)
        except (PublishError, OSError) as e:
            raise NightlyError(f"cannot write to the staging store {self.store.url}: {e}") from e
        return source_sha, recipes_sha

    # ------------------------------------------------------------------ staging

    def listing(self, build_id: str | None = None) -> dict[str, dict[str, set[str]]]:
        """build -> attempt token -> names under the attempt's prefix."""
        base = builds_prefix(self.day.name)
        prefix = build_prefix(self.day.name, build_id) if build_id else base
        out: dict[str, dict[str, set[str]]] = {}
        for obj in self.store.list(prefix):
            bid, _, rest = obj.key[len(base):].partition("/")
            tok, _, name = rest.partition("/")
            if bid and tok and name:
                out.setdefault(bid, {}).setdefault(tok, set()).add(name)
        return out

    def attempt_log(self, build_id: str, token: str, names: set[str]) -> bytes:
        prefix = attempt_prefix(self.day.name, build_id, token)
        if LOG_TXT in names:
            got = self.store.get_bytes(prefix + LOG_TXT)
            if got is not None:
                return bytes(got[0])
        out = b""
        for name in sorted(n for n in names if n.startswith(LOG_CHUNKS)):
            got = self.store.get_bytes(prefix + name)
            out += got[0] if got is not None else b""
        return out

    def drop_build_staging(self, build_id: str) -> None:
        if self.config.cluster.keep_staging:
            return
        with contextlib.suppress(PublishError, OSError):
            for obj in list(self.store.list(build_prefix(self.day.name, build_id))):
                self.store.delete(obj.key)

    def drop_day_staging(self) -> None:
        """What is left of the day in staging (inputs, stray attempts) once the night is
        collected; a rerun stages the inputs again."""
        if self.config.cluster.keep_staging:
            return
        if self.store is None:
            cc = self.config.cluster
            self.store = StagingSpec(url=cc.staging, endpoint_url=cc.endpoint_url or
                                     self.config.publish.endpoint_url, region=cc.region,
                                     profile=cc.profile).open()
        with contextlib.suppress(PublishError, OSError):
            for obj in list(self.store.list(f"{self.day.name}/")):
                self.store.delete(obj.key)

    def wait_for_leftovers(self, client: Any, todo: Sequence[Build]) -> None:
        """Attempts that a killed run left on the workers stop by themselves within seconds
        (their task was released) or finish: wait for them, so a finished one is adopted
        rather than built a second time beside it."""
        from nightly.executors.cluster import running_attempts

        ids = {b.id for b in todo}
        deadline = time.monotonic() + LEFTOVER_WAIT_S
        said = False
        while True:
            try:
                per_worker = client.run(running_attempts)
            except Exception as e:
                self.note(f"cannot ask the workers what they run: {e}")
                return
            left = sorted({a["build"] for attempts in per_worker.values() for a in attempts
                           if a.get("day") == self.day.name and a.get("topic") != self.topic
                           and a.get("build") in ids})
            if not left or time.monotonic() > deadline:
                if left:
                    self.note(f"still running after {LEFTOVER_WAIT_S:g} s, built again: "
                              f"{', '.join(left)}")
                return
            if not said:
                self.note(f"waiting for {len(left)} attempt(s) a previous run left on the "
                          f"workers to stop or finish: {', '.join(left)}")
                said = True
            time.sleep(0.5)

    def adopt(self, todo: Sequence[Build]) -> set[str]:
        """Builds whose attempt finished in staging (complete result.json, this commit and
        version) before the orchestrator that submitted them died: collected, not rebuilt."""
        adopted: set[str] = set()
        try:
            listing = self.listing()
        except (PublishError, OSError) as e:
            self.note(f"staging: cannot list {self.store.url}: {e}")
            return adopted
        for b in todo:
            if self._rebuild(b.id):
                continue
            tokens = sorted((t for t, n in listing.get(b.id, {}).items() if RESULT_JSON in n),
                            reverse=True)
            for tok in tokens:
                r = read_json(self.store, attempt_prefix(self.day.name, b.id, tok) + RESULT_JSON)
                if (r is None or r.get("status") != SUCCEEDED or r.get("commit") != self.commit
                        or r.get("version") != self.version or r.get("build") != b.id):
                    continue
                self.note(f"adopt  {b.id}: attempt {tok} on {r.get('worker')} had finished "
                          "before the run that submitted it died")
                self.file(b, r)
                adopted.add(b.id)
                break
        return adopted

    # ------------------------------------------------------------------ events and results

    def _lane(self, worker: str, slot: int) -> int:
        return self.lanes.setdefault((worker, slot), len(self.lanes))

    def on_event(self, msg: dict[str, Any]) -> None:
        kind, bid = str(msg.get("kind", "")), str(msg.get("build", ""))
        if bid not in self.by_id or bid in self.filed:
            return
        b = self.by_id[bid]
        if kind == "start":
            tok, attempt = str(msg.get("token", "")), int(msg.get("attempt") or 1)
            cur = self.current.get(bid)
            if cur is not None:
                if tok < cur["token"] or (tok == cur["token"] and attempt <= cur["attempt"]):
                    return  # a late event of an attempt already superseded
                if tok != cur["token"]:
                    self._lost(b, cur, msg)
            self.current[bid] = {"token": tok, "attempt": attempt, "worker": msg.get("worker")}
            slot = int(msg.get("slot") or 0)
            self.state.update(
                bid, status=RUNNING, attempts=attempt, started=float(msg.get("started") or
                                                                     time.time()),
                ended=None, machine=str(msg.get("worker")), queue=slot,
                executor=str(msg.get("executor") or ""), reason=None, package=b.package,
                python=b.python, cuda=b.cuda, variant=b.variant,
                worker_name=str(msg.get("worker_name") or ""), host=str(msg.get("host") or ""),
                token=tok,
            )
            self.progress("start", {"build": bid, "attempt": attempt,
                                    "queue": self._lane(str(msg.get("worker")), slot)})
        elif kind == "end":
            if msg.get("status") != SUCCEEDED:  # a local attempt that failed (maybe retried)
                self._record({**self.state.get(bid), "status": msg.get("status"),
                              "reason": msg.get("reason"), "ended": time.time(),
                              "duration_s": msg.get("duration_s"),
                              "attempts": msg.get("attempt")}, bid)
        elif kind == "retry":
            self.progress.log(f"retry  {bid} on {msg.get('worker')}: {msg.get('reason')}")
        else:
            self.progress.log(f"{kind} {bid} on {msg.get('worker')}: {msg.get('note', '')}")

    def _lost(self, build: Build, cur: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        reason = (f"attempt on {cur.get('worker')} ended without a result (its worker was lost); "
                  f"run again on {new.get('worker')}")
        self._record({**self.state.get(build.id), "status": INTERRUPTED, "reason": reason,
                      "ended": time.time(), "attempts": cur.get("attempt")}, build.id)
        self.progress.log(f"lost   {build.id}: {reason}")

    def _record(self, entry: Mapping[str, Any], build_id: str) -> None:
        try:
            self.history.record(self.day.name, build_id, entry, commit=self.commit,
                                channel=self.channel)
        except (sqlite3.Error, OSError) as e:
            self.note(f"history: could not record {build_id}: {e}")

    def on_result(self, item: TaskItem, result: dict[str, Any]) -> None:
        self.file(self.by_id[item.build_id], result)

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

    def on_tick(self, remaining: set[str]) -> None:
        """Builds that no live worker can run wait `cluster.worker_wait`, then are given up."""
        assert self.dispatcher is not None
        try:
            workers = self.dispatcher.workers()
        except Exception as e:
            self.note(f"cannot ask the scheduler for its workers: {e}")
            return
        now = time.monotonic()
        wait_s = self.config.cluster.worker_wait_s
        for bid in sorted(remaining):
            res = self.dispatcher.items[bid].resources
            if capacity(workers, res) >= 1:
                self.no_worker_since.pop(bid, None)
                continue
            since = self.no_worker_since.setdefault(bid, now)
            self._warn_no_worker(bid, res)
            if now - since >= wait_s and bid not in self.filed:
                self.given_up.add(bid)
                self.dispatcher.cancel(bid)
                started = self.state.status(bid) == RUNNING
                needs = ", ".join(r for r in res if r != SLOTS)
                self.file_without_result(
                    self.by_id[bid], INTERRUPTED if started else PENDING,
                    f"no worker with {needs} (and a free slot) for {wait_s:g} s: not "
                    f"{'finished' if started else 'run'}; rerun the night when one is up",
                )

    def _warn_no_worker(self, build_id: str, res: Resources) -> None:
        needs = ", ".join(r for r in res if r != SLOTS)
        if needs not in self.warned:
            self.warned.add(needs)
            self.note(f"warning: no worker has {needs} and slots: its builds ({build_id}, ...) "
                      f"wait up to {self.config.cluster.worker_wait_s:g} s for one")

    # ------------------------------------------------------------------ filing

    def file(self, build: Build, result: Mapping[str, Any]) -> None:
        """Collect one attempt's result: packages into packages/, the log (with any earlier
        attempts' that died) into logs/succeeded|failed/, then state.json and history."""
        bid, state = build.id, self.state
        status = str(result.get("status") or FAILED)
        reason = result.get("reason")
        infra = bool(result.get("infra"))
        packages: list[dict[str, Any]] = []
        if status == SUCCEEDED:
            try:
                packages = self.fetch_packages(build, result)
            except (PublishError, OSError, ValueError) as e:
                status, reason, infra = FAILED, f"fetching its packages from staging failed: {e}", True
        log = self.assemble_log(build, str(result.get("token") or ""), status == SUCCEEDED,
                                result)
        state.update(
            bid, status=status, reason=reason, exit_status=result.get("exit_status"),
            attempts=int(result.get("attempts") or 1), started=result.get("started"),
            ended=result.get("ended") or time.time(), duration_s=result.get("duration_s"),
            packages=packages, infra=infra, log=log, machine=str(result.get("worker") or ""),
            queue=int(result.get("slot") or 0), executor=str(result.get("executor") or ""),
            package=build.package, python=build.python, cuda=build.cuda, variant=build.variant,
            worker_name=str(result.get("worker_name") or ""), host=str(result.get("host") or ""),
            token=str(result.get("token") or ""),
        )
        self._finish(build, status, reason, float(result.get("duration_s") or 0.0),
                     lane=self._lane(str(result.get("worker") or ""), int(result.get("slot") or 0)))

    def file_without_result(self, build: Build, status: str, reason: str) -> None:
        log = self.assemble_log(build, "", False, None, reason=reason)
        now = time.time()
        self.state.update(build.id, status=status, reason=reason, infra=True, ended=now,
                          packages=[], log=log)
        self._finish(build, status, reason, 0.0, lane=-1)

    def _finish(self, build: Build, status: str, reason: Any, duration: float, lane: int) -> None:
        self.filed.add(build.id)
        self.current.pop(build.id, None)
        self._record(self.state.get(build.id), build.id)
        if self.progress is not None:
            self.progress("end", {"build": build.id, "status": status, "reason": reason,
                                  "duration_s": duration, "queue": lane})
        self.drop_build_staging(build.id)

    def fetch_packages(self, build: Build, result: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Download into work/, check size and sha256, then rename into packages/ (atomic:
        never half a package)."""
        day = self.day
        dest_dir = day.package_dir(build.package, build.cuda)
        tmp = day.work / build.id / f"fetch-{result.get('token')}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        fetched = []
        try:
            for p in result.get("packages") or []:
                name = str(p["name"])
                if "/" in name or name in ("", ".", ".."):
                    raise ValueError(f"bad package name {name!r}")
                local = tmp / name
                self.store.get(str(p["key"]), local)
                size = local.stat().st_size
                from nightly.runner import sha256_file

                digest = sha256_file(local)
                if size != int(p["size"]) or digest != p["sha256"]:
                    raise ValueError(f"{name}: staging holds {size} bytes sha256 {digest}, the "
                                     f"worker reported {p['size']} bytes sha256 {p['sha256']}")
                os.chmod(local, 0o644)
                fetched.append((local, name, size, digest))
            dest_dir.mkdir(parents=True, exist_ok=True)
            out = []
            for local, name, size, digest in fetched:
                dest = dest_dir / name
                os.replace(local, dest)
                out.append({"name": name, "path": str(dest.relative_to(day.path)), "size": size,
                            "sha256": digest})
            return out
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def assemble_log(
        self,
        build: Build,
        token: str,
        ok: bool,
        result: Mapping[str, Any] | None,
        *,
        reason: str = "",
    ) -> str:
        """The build's log in the day folder: what it had (earlier runs' attempts), then every
        attempt in staging not yet in it, oldest first: attempts that ended without a result
        (a worker died) are kept and marked, the accepted attempt comes last. Written whole and
        renamed into place; a marker line per attempt makes a rerun of this step idempotent."""
        day, bid = self.day, build.id
        existing = [p for p in (day.running_log(bid), day.succeeded / f"{bid}.log",
                                day.failed / f"{bid}.log") if p.exists()]
        prior = b"".join(p.read_bytes() for p in existing)
        try:
            attempts = self.listing(bid).get(bid, {})
        except (PublishError, OSError) as e:
            attempts = {}
            reason = reason or f"(staging unreadable: {e})"
        parts = [prior]
        for tok in sorted(attempts):
            if tok == token or _marker(tok).encode() in prior:
                continue
            names = attempts[tok]
            about = read_json(self.store, attempt_prefix(day.name, bid, tok) + ATTEMPT_JSON) or {}
            parts.append(_attempt_head(tok, about).encode())
            parts.append(self.attempt_log(bid, tok, names))
            if RESULT_JSON in names:
                res = read_json(self.store, attempt_prefix(day.name, bid, tok) + RESULT_JSON) or {}
                if res.get("status") == INTERRUPTED:
                    tail = (f"[nightly] attempt {tok} was stopped (interrupted): the run that "
                            "submitted it had gone away; not used")
                else:
                    tail = (f"[nightly] attempt {tok} finished ({res.get('status', '?')}) but its "
                            "result was not used: another attempt's was")
            else:
                tail = (f"[nightly] attempt {tok} ended without a result: its worker was lost "
                        "(or it was stopped) before the build finished; its log ends here")
            parts.append(f"\n{tail}\n".encode())
        if token and _marker(token).encode() not in prior:
            parts.append(_attempt_head(token, result or {}).encode())
            parts.append(self.attempt_log(bid, token, attempts.get(token, {LOG_TXT})))
        if reason:
            parts.append(f"\n[nightly] {reason}\n".encode())
        dest = (day.succeeded if ok else day.failed) / f"{bid}.log"
        atomic_write(dest, b"".join(parts))
        for p in existing:
            if p != dest:
                p.unlink(missing_ok=True)
        return str(dest.relative_to(day.path))


def _marker(token: str) -> str:
    return f"[nightly] cluster attempt {token} "


def _attempt_head(token: str, about: Mapping[str, Any]) -> str:
    return (f"\n{_marker(token)}on worker {about.get('worker', '?')} "
            f"({about.get('worker_name', '?')}, host {about.get('host', '?')})\n")


def _append(path: Path, line: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().isoformat(timespec="seconds")
    with path.open("a", encoding="utf-8") as f:
        f.write(f"{stamp} {line}\n")


__all__ = [
    "Bounds",
    "ClusterNight",
    "ClusterOptions",
    "Dispatcher",
    "TaskItem",
    "build_resources",
    "capacity",
    "cluster_bounds",
    "connect",
    "lpt_priorities",
    "run_night",
    "task_key",
]
