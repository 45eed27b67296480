"""Handing a night's builds to a Dask scheduler: priorities, resources, bounds, dispatch.

- resources: each build takes one `slots` and requires its platform (`platform-linux`,
  `platform-macos`), so it only goes to a worker that can run it (docs/cluster.md: how
  workers declare them); a build's GPU test (the test stage, `cluster.gpu_smoke`) takes one
  `gpu` of a worker of its platform, so GPU workers test and, without build slots, never build;
- priority: longest estimated first (the plan's estimates: the history's, else the
  configured ones), so the cluster's list schedule stays close to the lower bound;
- retries: a worker that dies mid-build loses its task, and the scheduler runs it again on
  another worker (up to `distributed.scheduler.allowed-failures` times); a task that raised
  is rerun `cluster.task_retries` times.

dask and distributed are imported only inside the functions that use them.
"""

from __future__ import annotations

import contextlib
import heapq
import queue
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nightly.cluster.host import GPU, SLOTS, accel_resource, arch_resource, platform_resource
from nightly.config import Config
from nightly.core.matrix import Build
from nightly.errors import NightlyError

WORKER_CHECK_S = 5.0  # how often the workers' capacity is looked at while builds wait
BATCH = 256  # inbox messages handled before tasks go out again
Resources = Mapping[str, float]


def lpt_priorities(builds: Sequence[Build], estimate: Mapping[str, float]) -> dict[str, int]:
    """Dask priorities (higher runs first): the estimate in milliseconds, so the longest
    builds start first; builds of equal estimate share a priority (and one submission)."""
    return {b.id: round(estimate[b.id] * 1000) for b in builds}


def build_resources(config: Config, build: Build) -> dict[str, float]:
    """What a build needs of a worker: one build slot, and its platform (amount 0: only
    workers that declare it qualify, and running builds never use it up). Never a GPU: with
    `[cluster] gpu_smoke` the GPU part of its test is a task of its own (gpu_test_resources).
    With its route (route_resources): the workers of its architecture and accelerator."""
    return {SLOTS: 1.0, platform_resource(build.platform): 0.0, **route_resources(config, build)}


# Families every worker builds without saying so (as before accelerators were declared).
IMPLICIT_FAMILIES = ("cpu", "cuda")


def route_resources(config: Config, build: Build) -> dict[str, float]:
    """The capabilities a build's route needs of a worker, in amount 0 (never used up):
    `arch-<arch>` when the night builds for more than one architecture of the build's
    platform (then every build of it names its own, so an aarch64 worker never takes an
    x86_64 build), and `accel-<family>` for ROCm and XPU builds. A night of one
    architecture and CPU/CUDA builds needs nothing new of its workers."""
    out: dict[str, float] = {}
    archs = {b.target_arch for b in config.builds if b.platform == build.platform}
    if len(archs | {build.target_arch}) > 1:
        out[arch_resource(build.target_arch)] = 0.0
    if build.family not in IMPLICIT_FAMILIES:
        out[accel_resource(build.family)] = 0.0
    return out


def gpu_test_resources(build: Build) -> dict[str, float]:
    """What a build's GPU test needs: one GPU of a worker of the build's platform (and of its
    architecture, when that is not the platform's default)."""
    res = {GPU: 1.0, platform_resource(build.platform): 0.0}
    if build.arch:
        res[arch_resource(build.target_arch)] = 0.0
    return res


def worker_slots(info: Mapping[str, Any], resources: Resources) -> float:
    """How many tasks needing `resources` one worker (scheduler_info's entry) runs at once:
    its build slots for a build, its GPUs for a GPU test."""
    have = info.get("resources") or {}
    if any(r not in have or float(have[r]) < float(need) for r, need in resources.items()):
        return 0.0
    used = [float(have[r]) // float(n) for r, n in resources.items() if float(n) > 0]
    return min(used) if used else float(have.get(SLOTS, 0.0))


def capacity(workers: Mapping[str, Mapping[str, object]], resources: Resources) -> float:
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
    workers: Mapping[str, Mapping[str, object]],
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


BUILD, TEST = "build", "test"
TEST_PRIORITY = 10**12  # above any build's (its estimate in ms): a test is short and holds
                        # a finished build back from publication; tests go first come, first served


@dataclass(frozen=True, kw_only=True)
class TaskItem:
    build_id: str
    key: str
    spec: object
    resources: Resources
    priority: int
    kind: str = BUILD  # BUILD, or TEST: the build's GPU test

    @property
    def id(self) -> str:
        """The dispatcher's name for it: the build's id, or `test:<id>` for its GPU test."""
        return self.build_id if self.kind == BUILD else f"{self.kind}:{self.build_id}"


def task_key(build: Build, day: str, run_id: str, *, what: str = BUILD) -> str:
    """Unique per orchestrator run. Its leading words (`nightly-manywheel-cuda`,
    `nightly-gputest-manywheel`) are the task's Dask prefix: the scheduler learns durations
    per package and cpu/cuda, and GPU tests apart."""
    if what == TEST:
        return f"nightly-gputest-{build.package}-{day.replace('/', '_')}-{build.id}-{run_id}"
    kind = build.family
    return f"nightly-{build.package}-{kind}-{day.replace('/', '_')}-{build.id}-{run_id}"


class Dispatcher:
    """Hands tasks to the scheduler and gives back, on the calling thread, results as they
    arrive, the workers' events and a periodic tick. The night and the benchmarks share it.
    Tasks are named by `TaskItem.id`; more may be submitted while it runs (a build's GPU test,
    from the callback of the build's result).

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
        self.inbox: queue.Queue[tuple[str, object]] = queue.Queue()
        self.futures: dict[str, Any] = {}
        self.items: dict[str, TaskItem] = {}
        self.fns: dict[str, Callable[..., object]] = {}
        self.remaining: set[str] = set()  # submitted and not yet done
        self.pending: dict[tuple[tuple[str, float], ...], list[TaskItem]] = {}
        self.inflight: dict[tuple[tuple[str, float], ...], int] = {}
        self._workers: dict[str, dict[str, object]] = {}
        self._workers_at = 0.0
        self._running = False
        client.subscribe_topic(topic, self._on_event)

    def _on_event(self, event: object) -> None:
        msg = event[1] if isinstance(event, tuple) and len(event) == 2 else event
        if isinstance(msg, dict):
            self.inbox.put(("event", msg))

    @staticmethod
    def _sig(item: TaskItem) -> tuple[tuple[str, float], ...]:
        return tuple(sorted(item.resources.items()))

    def submit(self, fn: Callable[..., object], items: Iterable[TaskItem]) -> None:
        """Queue `items` (highest priority first, the given order among equals), each to run
        `fn(item.spec)`, and send what the cluster has room for."""
        for it in items:
            self.items[it.id] = it
            self.fns[it.id] = fn
            self.remaining.add(it.id)
            self.pending.setdefault(self._sig(it), []).append(it)
        for q in self.pending.values():
            q.sort(key=lambda i: -i.priority)  # stable: equal priorities keep their order
        if not self._running:  # (while running: once the batch of events is handled)
            self.refill(fresh=not self._workers_at)

    def refill(self, *, fresh: bool = False) -> None:
        # GPU tests go out as they come: they run first come, first served, so there is no
        # later, better choice to hold them back for; queued on the GPU workers, the next
        # starts as one ends, without a round trip through this process.
        for sig, waiting in self.pending.items():
            if waiting and (self.lookahead is None or all(i.kind == TEST for i in waiting)):
                self._send(sig, len(waiting))
        if self.lookahead is None:
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
        """The next `n` tasks of a group: one `client.map` per priority and function."""
        waiting = self.pending.get(sig, [])
        batch, self.pending[sig] = waiting[:max(n, 0)], waiting[max(n, 0):]
        if not batch:
            return
        self.inflight[sig] = self.inflight.get(sig, 0) + len(batch)
        groups: dict[tuple[int, Callable[..., object]], list[TaskItem]] = {}
        for it in batch:
            groups.setdefault((it.priority, self.fns[it.id]), []).append(it)
        for (priority, fn), group in sorted(groups.items(), key=lambda kv: -kv[0][0]):
            futures = self.client.map(
                fn, [it.spec for it in group], key=[it.key for it in group],
                resources=dict(sig), priority=priority, retries=self.retries, pure=False,
            )
            for it, fut in zip(group, futures, strict=True):
                self.futures[it.id] = fut
                fut.add_done_callback(lambda f, iid=it.id: self.inbox.put(("done", (iid, f))))

    def cancel(self, item_id: str) -> None:
        item = self.items.get(item_id)
        if item is not None and item in self.pending.get(self._sig(item), []):
            self.pending[self._sig(item)].remove(item)
            self.inbox.put(("done", (item_id, None)))
            return
        fut = self.futures.get(item_id)
        if fut is not None:
            with contextlib.suppress(Exception):
                fut.cancel()

    def cancel_all(self) -> None:
        self.pending.clear()
        with contextlib.suppress(Exception):
            self.client.cancel(list(self.futures.values()))

    def workers(self) -> dict[str, dict[str, object]]:
        info = self.client.scheduler_info(n_workers=-1)
        self._workers = dict(info.get("workers") or {})
        self._workers_at = time.monotonic()
        return self._workers

    def run(
        self,
        *,
        on_result: Callable[[TaskItem, object], None],  # a result of cluster.messages
        on_error: Callable[[TaskItem, BaseException | None], None],
        on_event: Callable[[dict[str, object]], None] | None = None,
        on_tick: Callable[[set[str]], None] | None = None,
        tick_s: float = WORKER_CHECK_S,
    ) -> None:
        """Until every task submitted (before or meanwhile) has finished, erred or been
        cancelled (`on_error(item, None)`)."""
        remaining = self.remaining
        last_tick = time.monotonic()
        self._running = True
        try:
            while remaining:
                # What has arrived, handled as one batch: tasks go out once per batch (a
                # night's builds end in waves, and each may submit its GPU test).
                try:
                    batch = [self.inbox.get(timeout=min(tick_s, 1.0))]
                except queue.Empty:
                    batch = []
                with contextlib.suppress(queue.Empty):
                    while len(batch) < BATCH:
                        batch.append(self.inbox.get_nowait())
                done = [self._handle(kind, payload, on_result, on_error, on_event)
                        for kind, payload in batch]
                if any(done):
                    self.refill()
                now = time.monotonic()
                if now - last_tick >= tick_s:
                    last_tick = now
                    if on_tick is not None:
                        on_tick(set(remaining))
                    self.refill(fresh=True)
        finally:
            self._running = False
        with contextlib.suppress(Exception):
            self.client.unsubscribe_topic(self.topic)

    def _handle(
        self,
        kind: str,
        payload: Any,
        on_result: Callable[[TaskItem, object], None],
        on_error: Callable[[TaskItem, BaseException | None], None],
        on_event: Callable[[dict[str, object]], None] | None,
    ) -> bool:
        """One message of the inbox. True when a task that was on the cluster is done."""
        if kind == "event" and on_event is not None:
            on_event(payload)
            return False
        if kind != "done":
            return False
        iid: str = payload[0]
        fut: object = payload[1]
        if iid not in self.remaining or (fut is not None and self.futures.get(iid) is not fut):
            return False
        self.remaining.discard(iid)
        item = self.items[iid]
        if fut is not None:
            self.inflight[self._sig(item)] -= 1
        self._done(item, fut, on_result, on_error)  # (may submit more)
        return fut is not None or bool(self.pending.get(self._sig(item)))

    @staticmethod
    def _done(
        item: TaskItem,
        fut: Any,
        on_result: Callable[[TaskItem, object], None],  # a result of cluster.messages
        on_error: Callable[[TaskItem, BaseException | None], None],
    ) -> None:
        if fut is None or fut.status == "cancelled":
            on_error(item, None)
            return
        outcome: tuple[bool, object]
        if fut.status == "finished":
            try:
                outcome = (True, fut.result())
            except Exception as e:  # lost between finishing and fetching
                outcome = (False, e)
        else:
            outcome = (False, fut.exception())
        # Released before the result is filed (which takes a while: packages fetched from
        # staging): while the client holds a finished key, the scheduler computes it again
        # when the worker holding it dies, and the build would run a second time.
        with contextlib.suppress(Exception):
            fut.release()
        ok, value = outcome
        if ok:
            on_result(item, value)
        else:
            on_error(item, value if isinstance(value, BaseException) else None)


def connect(address: str, timeout_s: float, security: Any = None) -> Any:
    from distributed import Client

    try:
        return Client(address, timeout=timeout_s, set_as_default=False,  # type: ignore[no-untyped-call]
                      security=security)
    except (OSError, TimeoutError, ValueError) as e:
        plain = address.startswith("tcp://")
        raise NightlyError(
            f"cannot reach the Dask scheduler at {address}: {e}. "
            # A plain client against a TLS scheduler fails like an unreachable one: the
            # likelier fix first (certificates play no part on tcp://).
            + ("If the scheduler was started with TLS (--tls-ca-file ...), use "
               f"tls://{address[len('tcp://'):]} (with [cluster] tls_ca_file, tls_cert and "
               "tls_key): the address is tls://, not tcp://. Else: " if plain else "")
            + "Is `dask scheduler` running there, and the address right (--cluster, [cluster] "
            "address)?"
            + (" Are [cluster] tls_cert and tls_key from the CA the scheduler trusts "
               "(tls_ca_file)?" if security is not None and not plain else "")
            + " See docs/cluster.md"
        ) from e


def reach(address: str, timeout_s: float, security: Any = None) -> None:
    """Connect and disconnect: NightlyError (naming the fix) when the scheduler cannot be
    reached."""
    client = connect(address, timeout_s, security)
    with contextlib.suppress(Exception):
        client.close()



__all__ = [
    "BUILD",
    "TEST",
    "TEST_PRIORITY",
    "Bounds",
    "Dispatcher",
    "Resources",
    "TaskItem",
    "build_resources",
    "capacity",
    "cluster_bounds",
    "connect",
    "gpu_test_resources",
    "lpt_priorities",
    "reach",
    "route_resources",
    "task_key",
    "worker_slots",
]
