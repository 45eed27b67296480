"""`[notify] bisect = true`: at the end of a night, after publishing and before the
notification, bisect one build of each *new* failure group (one per signature), on this
machine, within `[notify] bisect_budget`. Results go to the history, so the summary and the
notification that follow carry them; a bisect that cannot run is logged, never fatal."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from nightly.bisect.run import BisectOptions, bisect, record
from nightly.config import Config
from nightly.errors import NightlyError
from nightly.history.db import History, history_path
from nightly.history.triage import facts_for_day, groups
from nightly.workspace import Day


def bisect_new_failures(config: Config, day: Day, machine: str,
                        log: Callable[[str], None]) -> int:
    """Bisect the first build of each new failure group that has a good night to start
    from. Returns how many bisects finished."""
    deadline = time.time() + config.notify.bisect_budget_s
    try:
        facts = facts_for_day(day, History(history_path(config.root)),
                              timeouts=config.external_timeouts)
    except (sqlite3.Error, OSError) as e:
        log(f"bisect: could not read the failures: {e}")
        return 0
    done = 0
    for sig, fs in groups(facts.values()):
        todo = [f for f in fs if f.new and f.last_good_commit and f.bisect is None]
        if not todo:
            continue
        if time.time() > deadline:
            log(f"bisect: budget of {config.notify.bisect_budget_s:g} s spent; not bisected: {sig}")
            continue
        try:
            result = bisect(config, day, todo[0].build_id, BisectOptions(deadline=deadline),
                            say=lambda line: log(f"bisect: {line}"), machine=machine)
        except (NightlyError, OSError) as e:
            log(f"bisect of {todo[0].build_id} failed: {e}")
            continue
        if result is not None:
            record(config, result)
            done += 1
    return done
