"""Builds -> machines -> queues. Pure and deterministic: the same inputs give the same plan.

Two ways, mixable: builds named in a machine's `explicit_queues` run there in the order
written (to reproduce an existing schedule exactly); every other build is placed by LPT
(longest estimated first, onto the queue of its platform that frees first; ties broken by
machine order, then queue index, then build id) so every machine computes the same plan
without talking to the others.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from nightly.config import Config, Machine
from nightly.core.matrix import Build, SpellingError, matches, near_misses, parse_spec
from nightly.errors import ConfigError, NothingSelected, UsageError
from nightly.plan import routing


@dataclass(frozen=True, kw_only=True)
class PlannedBuild:
    build: Build
    machine: str
    queue: int
    estimate_s: float
    start_s: float
    explicit: bool

    @property
    def end_s(self) -> float:
        return self.start_s + self.estimate_s


@dataclass(frozen=True, kw_only=True)
class QueuePlan:
    index: int
    builds: tuple[PlannedBuild, ...]

    @property
    def finish_s(self) -> float:
        return self.builds[-1].end_s if self.builds else 0.0


@dataclass(frozen=True, kw_only=True)
class MachinePlan:
    name: str
    platform: str
    executor: str
    queues: tuple[QueuePlan, ...]
    archs: tuple[str, ...] = ()  # what it can build (the routing), as Machine.arch_list
    accelerators: tuple[str, ...] = ()
    arch_executors: tuple[tuple[str, str], ...] = ()  # as Machine.arch_executors

    @property
    def executors_text(self) -> str:
        """`container` or `container; aarch64 local`: how plans name its executors."""
        return "; ".join([self.executor, *(f"{a} {e}" for a, e in self.arch_executors)])

    @property
    def builds(self) -> list[PlannedBuild]:
        return [pb for q in self.queues for pb in q.builds]

    @property
    def makespan_s(self) -> float:
        return max((q.finish_s for q in self.queues), default=0.0)

    @property
    def lower_bound_s(self) -> float:
        return lower_bound([pb.estimate_s for pb in self.builds], len(self.queues))

    def in_order(self) -> list[PlannedBuild]:
        """The machine's builds in plan order (start time, then queue): the order a
        work-conserving runner hands them out."""
        return sorted(self.builds, key=lambda pb: (pb.start_s, pb.queue, pb.build.id))


@dataclass(frozen=True, kw_only=True)
class Plan:
    machines: tuple[MachinePlan, ...]
    # The bound the routing imposes (builds only some machines can take: routing.bound).
    routed_bound_s: float = 0.0

    @property
    def builds(self) -> list[PlannedBuild]:
        return [pb for m in self.machines for pb in m.builds]

    @property
    def makespan_s(self) -> float:
        return max((m.makespan_s for m in self.machines), default=0.0)

    @property
    def lower_bound_s(self) -> float:
        """Per platform, the larger of the longest build and the work over all its queues."""
        bounds = []
        for plat in {m.platform for m in self.machines}:
            ms = [m for m in self.machines if m.platform == plat]
            bounds.append(
                lower_bound(
                    [pb.estimate_s for m in ms for pb in m.builds], sum(len(m.queues) for m in ms)
                )
            )
        return max(self.routed_bound_s, *bounds) if bounds else self.routed_bound_s

    def machine(self, name: str) -> MachinePlan:
        for m in self.machines:
            if m.name == name:
                return m
        raise KeyError(name)

    def to_json(self, *, date: str = "", version: str = "") -> dict[str, object]:
        return {
            "date": date,
            "version": version,
            "makespan_s": self.makespan_s,
            "lower_bound_s": self.lower_bound_s,
            "builds": [
                {
                    "id": pb.build.id,
                    "package": pb.build.package,
                    "python": pb.build.python,
                    "cuda": pb.build.cuda,
                    "variant": pb.build.variant,
                    "platform": pb.build.platform,
                    "arch": pb.build.target_arch,
                    "accelerator": pb.build.accelerator,
                    "family": pb.build.family,
                    "label": pb.build.label,
                    "machine": pb.machine,
                    "queue": pb.queue,
                    "estimate_s": pb.estimate_s,
                    "start_s": pb.start_s,
                    "end_s": pb.end_s,
                    "explicit": pb.explicit,
                    # a limited-API build: its wheel's floor and the Pythons it is tested on
                    **({"limited_api": pb.build.limited_api, "tests_on": list(pb.build.tests_on)}
                       if pb.build.limited_api else {}),
                }
                for pb in self.builds
            ],
            "machines": [
                {
                    "name": m.name,
                    "platform": m.platform,
                    "executor": m.executor,
                    "arch_executors": dict(m.arch_executors),
                    "archs": list(m.archs),
                    "accelerators": list(m.accelerators),
                    "makespan_s": m.makespan_s,
                    "lower_bound_s": m.lower_bound_s,
                    "queues": [
                        {
                            "index": q.index,
                            "finish_s": q.finish_s,
                            "builds": [pb.build.id for pb in q.builds],
                        }
                        for q in m.queues
                    ],
                }
                for m in self.machines
            ],
        }


def lower_bound(estimates: Sequence[float], queues: int) -> float:
    if not estimates or queues < 1:
        return 0.0
    return max(max(estimates), sum(estimates) / queues)


def make_plan(
    config: Config,
    builds: Sequence[Build] | None = None,
    *,
    estimate: Callable[[Build], float] | None = None,
    mode: str | None = None,
) -> Plan:
    """Assign `builds` (default: the config's selected matrix) to machines and queues."""
    builds = list(config.builds if builds is None else builds)
    est = estimate or config.estimate_for
    mode = mode or config.schedule_mode
    by_id = {b.id: b for b in builds}

    # queue contents per (machine index, queue index), as (build, explicit) in order
    queues: dict[tuple[int, int], list[tuple[Build, bool]]] = {
        (mi, qi): [] for mi, m in enumerate(config.machines) for qi in range(m.queues)
    }
    pinned: set[str] = set()
    if mode == "explicit":
        for mi, m in enumerate(config.machines):
            for qi, entries in enumerate(m.explicit_queues):
                for b in _resolve_queue(config, m, mi, qi, entries, by_id):
                    if b.id in pinned:
                        raise ConfigError(
                            f"build {b.id} is listed in two explicit queues",
                            file=str(config.path),
                            key=f"machines[{mi}].explicit_queues",
                        )
                    pinned.add(b.id)
                    queues[(mi, qi)].append((b, True))

    rest = sorted((b for b in builds if b.id not in pinned), key=lambda b: (-est(b), b.id))
    loads = {q: sum(est(b) for b, _ in items) for q, items in queues.items()}
    router = routing.Router(config, loads)
    for b in rest:
        mi, qi = router.place(b, est(b))
        queues[(mi, qi)].append((b, False))
    pinned_to = {b.id: (mi,) for (mi, _), items in queues.items() for b, explicit in items
                 if explicit}
    bound = routing.bound(
        [(est(b), pinned_to.get(b.id) or router.eligible(b)) for b in builds],
        [m.queues for m in config.machines],
    )

    machines = []
    for mi, m in enumerate(config.machines):
        qplans = []
        for qi in range(m.queues):
            t = 0.0
            pbs = []
            for b, explicit in queues[(mi, qi)]:
                e = est(b)
                pbs.append(
                    PlannedBuild(
                        build=b, machine=m.name, queue=qi, estimate_s=e, start_s=t,
                        explicit=explicit,
                    )
                )
                t += e
            qplans.append(QueuePlan(index=qi, builds=tuple(pbs)))
        machines.append(
            MachinePlan(name=m.name, platform=m.platform, executor=m.executor, queues=tuple(qplans),
                        archs=m.arch_list, accelerators=m.accelerator_list,
                        arch_executors=m.arch_executors)
        )
    return Plan(machines=tuple(machines), routed_bound_s=bound)


def _resolve_queue(
    config: Config,
    machine: Machine,
    mi: int,
    qi: int,
    entries: Sequence[str],
    selected: Mapping[str, Build],
) -> list[Build]:
    """An explicit queue's entries -> the selected builds they name, in the order written."""
    key = f"machines[{mi}].explicit_queues[{qi}]"
    full = {b.id: b for m in config.matrices for b in m.expand()}
    out: list[Build] = []
    for entry in entries:
        parts = entry.split()
        if len(parts) == 3:
            lt = config.libtorch_matrix(machine.platform)
            try:
                named = parse_spec(
                    *parts,
                    platform=machine.platform,
                    libtorch_python=lt.python if lt else "3",
                    libtorch_variants=lt.variants if lt else (),
                )
            except SpellingError as e:
                raise ConfigError(f"'{entry}': {e}", file=str(config.path), key=key) from e
            ids = [b.id for b in named]
        elif len(parts) == 1:
            ids = sorted(i for i in full if fnmatch.fnmatchcase(i, entry))
        else:
            raise ConfigError(
                f"'{entry}' is neither a build id/glob nor 'package pythons cudas'",
                file=str(config.path),
                key=key,
            )
        missing = [i for i in ids if i not in full]
        if not ids or missing:
            what = missing[0] if missing else entry
            close = near_misses(what, full)
            raise ConfigError(
                f"'{what}' is not a build of the matrix",
                file=str(config.path),
                key=key,
                hint=("near misses: " + ", ".join(close)) if close else None,
            )
        for i in ids:
            b = full[i]
            if b.platform != machine.platform:
                raise ConfigError(
                    f"{i} is a {b.platform} build on {machine.platform} machine '{machine.name}'",
                    file=str(config.path),
                    key=key,
                )
            if not machine.can_build(b):
                raise ConfigError(
                    f"{i} ({b.target_arch}, {b.cuda}) is listed on machine "
                    f"{machine.describe()}, which cannot build it",
                    file=str(config.path),
                    key=key,
                    hint="add its architecture to archs and its accelerator to accelerators",
                )
            if i in selected:  # builds the selectors removed simply drop out of the queue
                out.append(selected[i])
    return out


def filter_plan(plan: Plan, *, machine: str | None = None, ids: set[str] | None = None) -> Plan:
    """The same plan restricted to one machine and/or some builds (times unchanged)."""
    ms = []
    for m in plan.machines:
        if machine is not None and m.name != machine:
            continue
        qs = tuple(
            QueuePlan(
                index=q.index,
                builds=tuple(pb for pb in q.builds if ids is None or pb.build.id in ids),
            )
            for q in m.queues
        )
        ms.append(MachinePlan(name=m.name, platform=m.platform, executor=m.executor, queues=qs,
                              archs=m.archs, accelerators=m.accelerators,
                              arch_executors=m.arch_executors))
    return Plan(machines=tuple(ms), routed_bound_s=plan.routed_bound_s)


def select_cli(config: Config, selects: Sequence[str]) -> list[Build]:
    """The config's builds narrowed by --select globs; a glob matching nothing selects
    nothing (NothingSelected: exit 3)."""
    builds = list(config.builds)
    if not selects:
        return builds
    check_globs(config, selects, "--select", NothingSelected)
    return [b for b in builds if any(matches(b, p) for p in selects)]


def check_globs(
    config: Config, globs: Sequence[str], option: str,
    error: type[NothingSelected] | type[UsageError] = UsageError,
) -> None:
    """Each glob matches a build of the config, or `error` names it and its near misses."""
    ids = [b.id for b in config.builds]
    for pattern in globs:
        if not any(matches(b, pattern) for b in config.builds):
            close = near_misses(pattern, ids)
            raise error(
                f"{option} '{pattern}' matches no build"
                + (f"; near misses: {', '.join(close)}" if close else "")
                + " (`nightly plan` lists them)"
            )


def plan_night(
    config: Config,
    *,
    machine: str | None = None,
    selects: Sequence[str] = (),
    estimate: Callable[[Build], float] | None = None,
) -> Plan:
    """The whole night's plan (so every machine agrees), then narrowed for display/running.

    The plan is always computed over the config's full selection: a --select or --machine
    filter must not move builds between machines, or two machines could build the same one.
    """
    full = make_plan(config, estimate=estimate)
    chosen = {b.id for b in select_cli(config, selects)} if selects else None
    name = config.machine(machine).name if machine is not None else None
    narrowed = filter_plan(full, machine=name, ids=chosen)
    if not narrowed.builds:
        where = f" on machine '{name}'" if name else ""
        raise NothingSelected(f"nothing selected{where}: no build of the plan matches")
    return narrowed
