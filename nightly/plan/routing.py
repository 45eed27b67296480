"""Routing: which machines' queues may take a build, LPT placement under that constraint,
and the lower bound it implies. Pure and deterministic.

A build goes only to a machine that can build it (its platform, one of its architectures,
one of its accelerators: `Machine.can_build`). Builds that share a route (platform,
architecture, accelerator) share a set of eligible machines; each distinct set has a heap of
its queues' (load, machine, queue), and a queue placed on is pushed anew into every heap
that holds it: entries whose load is no longer the queue's are stale and skipped. Where every
machine of a platform can build everything (every config before routing existed), there is
one set per platform, and placement is exactly the former per-platform LPT.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping, Sequence

from nightly.config import Config
from nightly.core.matrix import Build
from nightly.errors import ConfigError

Queue = tuple[int, int]  # (machine index, queue index)
# Beyond this many distinct machine sets the bound looks at the sets alone, not their unions.
MAX_UNION_SETS = 12


class Router:
    """LPT placement onto the queue that frees first among the machines that can build."""

    def __init__(self, config: Config, loads: Mapping[Queue, float]) -> None:
        self.config = config
        self.loads = dict(loads)
        self._eligible: dict[tuple[str, str, str], tuple[int, ...]] = {}
        self._heaps: dict[tuple[int, ...], list[tuple[float, int, int]]] = {}
        self._holding: dict[int, list[tuple[int, ...]]] = {}  # machine -> sets holding it

    def eligible(self, build: Build) -> tuple[int, ...]:
        """The indices of the machines that can build it (ConfigError when none)."""
        route = (build.platform, build.target_arch, build.cuda)
        found = self._eligible.get(route)
        if found is None:
            machines = self.config.machines
            found = tuple(i for i, m in enumerate(machines) if m.can_build(build))
            if not found:
                considered = [m.describe() for m in machines if m.platform == build.platform]
                raise ConfigError(
                    f"no machine can build {build.id} ({build.platform} {build.target_arch}, "
                    f"{build.cuda}); considered: {'; '.join(considered) or 'none'}",
                    file=str(self.config.path),
                    key="machines",
                    hint="declare it in a [[machines]] entry's archs and accelerators",
                )
            self._eligible[route] = found
        return found

    def _heap(self, machines: tuple[int, ...]) -> list[tuple[float, int, int]]:
        heap = self._heaps.get(machines)
        if heap is None:
            heap = [(load, mi, qi) for (mi, qi), load in self.loads.items() if mi in machines]
            heapq.heapify(heap)
            self._heaps[machines] = heap
            for mi in machines:
                self._holding.setdefault(mi, []).append(machines)
        return heap

    def place(self, build: Build, estimate: float) -> Queue:
        heap = self._heap(self.eligible(build))
        while True:
            load, mi, qi = heapq.heappop(heap)
            if self.loads[(mi, qi)] == load:
                break
        load += estimate
        self.loads[(mi, qi)] = load
        for machines in self._holding[mi]:
            heapq.heappush(self._heaps[machines], (load, mi, qi))
        return mi, qi


def bound(builds: Sequence[tuple[float, tuple[int, ...]]], queues: Sequence[int]) -> float:
    """A lower bound of any schedule's makespan under the routing: the longest build, and
    for each set S of machines (each distinct eligible set and, while few, their unions) the
    work of the builds that can only run within S over S's queues."""
    if not builds:
        return 0.0
    work: dict[frozenset[int], float] = {}  # the work of the builds of each eligible set
    for e, elig in builds:
        key = frozenset(elig)
        work[key] = work.get(key, 0.0) + e
    sets = sorted(work, key=sorted)
    candidates = set(sets)
    if len(sets) <= MAX_UNION_SETS:
        for r in range(2, len(sets) + 1):
            for combo in itertools.combinations(sets, r):
                candidates.add(frozenset().union(*combo))
    best = max(e for e, _ in builds)
    for s in candidates:
        slots = sum(queues[mi] for mi in s)
        if slots:
            best = max(best, sum(w for k, w in work.items() if k <= s) / slots)
    return best
