"""What the night takes from the build history and gives it: the scheduler's estimates
(the median of each build's last successful runs) and the runner's event sink that records
each attempt as it ends."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from nightly.history.db import History, history_path

if TYPE_CHECKING:
    from nightly.config import Config
    from nightly.core.matrix import Build
    from nightly.workspace import State


def recorder(
    history: History,
    day_name: str,
    state: State,
    *,
    commit: str,
    channel: str = "nightly",
    log: Callable[[str], None] | None = None,
) -> Callable[[str, Mapping[str, object]], None]:
    """A runner event sink that records each attempt as it ends (the runner's "end" event
    comes after state.json has the attempt's final entry). A history that cannot be written
    is logged, never fatal: the build's result is in state.json either way."""

    def on_event(kind: str, info: Mapping[str, object]) -> None:
        if kind != "end" or not info.get("build"):
            return
        build_id = str(info["build"])
        try:
            history.record(day_name, build_id, state.get(build_id), commit=commit, channel=channel)
        except (sqlite3.Error, OSError) as e:
            if log is not None:
                log(f"history: could not record {build_id} in {history.path}: {e}")

    return on_event


def estimator(config: Config, history: History | None) -> Callable[[Build], float]:
    """The scheduler's estimate of a build: the history's (median of its last successful
    runs) when there is one, else the configured estimate. The history is read once, here,
    for the config's builds; a build outside them is looked up on first use."""
    known: dict[str, float] = history.estimates(b.id for b in config.builds) if history else {}
    looked_up = {b.id for b in config.builds}

    def estimate(build: Build) -> float:
        if history is not None and build.id not in looked_up:
            looked_up.add(build.id)
            known.update(history.estimates([build.id]))
        if build.id in known:
            return known[build.id]
        return config.estimate_for(build)

    return estimate


def planning_estimator(config: Config) -> Callable[[Build], float]:
    """The estimates a plan uses: history's where the config allows it and a history exists
    (never created just to plan), else the configured ones."""
    path = history_path(config.root)
    if not config.uses_history_estimates() or not path.exists():
        return config.estimate_for
    return estimator(config, History(path))


def estimates_note(config: Config, build_ids: Sequence[str]) -> tuple[str, int]:
    """Where a plan's estimates come from, in words, and how many builds have one from the
    history. The first nights have none: their estimates are a guess from [estimates], and
    the words say so and that each night's times teach the later ones."""
    ids = sorted(set(build_ids))
    if not config.uses_history_estimates():
        return ("estimates from [estimates] in the config (history_estimates does not use "
                "the history on this setup)", 0)
    path = history_path(config.root)
    try:
        known = History(path).estimates(ids) if path.exists() else {}
    except (sqlite3.Error, OSError):
        known = {}
    learn = ("each night records its builds' times in the history, and later nights "
             "estimate from them (the median of a build's last 5 successful runs)")
    if not known:
        return (f"estimates are a guess ([estimates] in the config): no history yet; {learn}",
                0)
    if len(known) < len(ids):
        return (f"estimates: {len(known)} of {len(ids)} builds from this project's past nights, "
                f"the other {len(ids) - len(known)} a guess from [estimates] (no successful "
                f"run recorded yet); {learn}", len(known))
    return ("estimates from this project's past nights (the median of each build's last 5 "
            "successful runs)", len(known))


__all__ = ["estimates_note", "estimator", "planning_estimator", "recorder"]
