"""The build phase of a night, and what the night hands it.

A night (nightly.night.pipeline) is one pipeline: lock, source, plan, *build phase*, publish, history,
report, prune, summary, notify. Only the build phase differs between a machine running its
own queues (nightly.builds.session.local_phase.LocalPhase) and a Dask cluster running every machine's builds
(nightly.cluster.orchestrator.ClusterPhase). Both file each finished build with
nightly.builds.run.collect.collect_build, so what follows the phase reads one day folder either way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from nightly.config import Config, Machine
from nightly.core.matrix import Build
from nightly.history.db import History
from nightly.workspace import Day, State


@dataclass(kw_only=True)
class NightContext:
    """One night once its day is locked, its source checked out and its state loaded."""

    config: Config
    day: Day
    state: State
    history: History
    machine: Machine
    version: str
    channel: str
    commit: str
    source_describe: str
    source_dir: Path
    log: Callable[[str], None]  # a line into logs/master/run.log
    builds: list[Build]  # every build of the night (todo and already succeeded)
    live: bool | None = None  # the live terminal view (None: when stdout is a terminal)


class BuildPhase(Protocol):
    """Runs a night's builds to their end: each build filed in the day folder, its state
    entry final, its attempts recorded in the history."""

    @property
    def machine(self) -> Machine:
        """The machine the night's summary and report are about."""

    def meta(self) -> dict[str, object]:
        """Extra fields for state.json's meta (e.g. the cluster's address)."""

    def dry_run(self, day: Day, builds: Sequence[Build], version: str, channel: str) -> None:
        """Print where and how each build would run; touch nothing."""

    def run(self, night: NightContext, todo: Sequence[Build]) -> float:
        """Build `todo` (the rest of night.builds already succeeded). Returns the estimated
        makespan the summary compares the night with."""

    def finish(self, night: NightContext) -> None:
        """Clean up once the night is published and pruned."""


__all__ = ["BuildPhase", "NightContext"]
