"""What a night builds on this machine: the machine (--machine, the hostname), its share of
the plan (its builds and queues), or the builds a command line names."""

from __future__ import annotations

import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from nightly.config import Config, Machine
from nightly.core.matrix import Build, SpellingError, parse_spec
from nightly.errors import NothingSelected, UsageError
from nightly.history.feeds import planning_estimator
from nightly.plan.schedule import make_plan, select_cli


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


@dataclass(frozen=True, kw_only=True)
class Share:
    """This machine's part of the night's plan."""

    order: list[Build]  # its builds, in plan order
    queues: list[list[Build]]  # its queues, each in plan order
    plan_json: dict[str, object]  # the whole plan, for logs/master/plan.json
    makespan_s: float  # its estimated makespan
    estimates: dict[str, float]  # build id -> estimated seconds


def plan_share(config: Config, machine: Machine, selects: Sequence[str] = ()) -> Share:
    """This machine's builds and queues (only the selected ones, when selectors are given)."""
    full = make_plan(config, estimate=planning_estimator(config))
    chosen = {b.id for b in select_cli(config, selects)} if selects else None
    mp = full.machine(machine.name)
    queues = [[pb.build for pb in q.builds if chosen is None or pb.build.id in chosen]
              for q in mp.queues]
    order = [pb.build for pb in mp.in_order() if chosen is None or pb.build.id in chosen]
    if not order:
        raise NothingSelected(f"nothing selected for machine '{machine.name}'")
    return Share(order=order, queues=queues, plan_json=full.to_json(),
                 makespan_s=mp.makespan_s,
                 estimates={pb.build.id: pb.estimate_s for pb in mp.builds})


def builds_from_cli(
    config: Config, package: str, pythons: str, cudas: str, arch: str = "", platform: str = ""
) -> list[Build]:
    platform = platform or this_platform()
    lt = config.libtorch_matrix(platform)
    try:
        builds = parse_spec(
            package, pythons, cudas, platform=platform,
            libtorch_python=lt.python if lt else "3",
            libtorch_variants=lt.variants if lt else ("shared-with-deps",),
            arch=arch,
        )
    except SpellingError as e:
        raise UsageError(str(e)) from e
    # Keep the matrix's own Build (it carries devtoolset etc.) when the build is in it.
    known = {b.id: b for b in config.builds}
    return [known.get(b.id, b) for b in builds]


__all__ = ["Share", "builds_from_cli", "pick_machine", "plan_share", "this_platform"]
