"""Local retention at the end of a night and in `nightly prune`: the day folders older than
`[retention] local_days` (workspace/prune.py) with their `<day>.lock` files, and the nights
of the build history older than `[retention] history_days` (history/retention.py)."""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Callable

from nightly.config import Config
from nightly.errors import NightlyError
from nightly.history import recover
from nightly.history.db import History, history_path
from nightly.history.retention import prune_history
from nightly.workspace import apply_local_prune, is_locked, plan_local_prune
from nightly.workspace.prune import prune_day_locks


def prune_step(config: Config, today: dt.date, log: Callable[[str], None],
               history: History | None = None) -> None:
    """Local retention at the end of a night. Never fatal."""
    try:
        doomed = plan_local_prune(config.root, today, config.retention.local_days, is_locked)
        if doomed:
            result = apply_local_prune(config.root, doomed, is_locked)
            log(f"prune: {result}")
        locks = prune_day_locks(config.root, today, config.retention.local_days, is_locked)
        if locks:
            log(f"prune: {len(locks)} lock file(s) of pruned days removed")
    except (NightlyError, OSError) as e:
        log(f"prune failed: {e}")
    prune_history_step(config, today, log, history)


def prune_history_step(config: Config, today: dt.date, log: Callable[[str], None],
                       history: History | None = None) -> int:
    """The history's nights before `[retention] history_days`; never fatal. How many build
    attempts went."""
    days = config.retention.history_days
    path = history_path(config.root)
    if days <= 0 or (history is None and not path.exists()):
        return 0
    if history is None and recover.header_verdict(path) not in ("ok", "unknown"):
        # Retention is clean-up: a file that is no history is left for the commands that use
        # the history to set aside (history/recover.py), never changed here.
        log(f"prune: {path} is not a history database: not pruned")
        return 0
    try:
        gone = prune_history(history or History(path), today, days)
    except (sqlite3.Error, OSError) as e:
        log(f"prune: the history {path} could not be pruned: {e}")
        return 0
    if gone:
        log(f"prune: {gone} build attempt(s) older than {days} days left the history")
    return gone


__all__ = ["prune_history_step", "prune_step"]
