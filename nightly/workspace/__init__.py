"""The day folder: its layout, the day's lock, the typed build state (state.json), log moves
and local pruning.

    day.py     ROOT/YYYY_MM_DD and its paths, atomic writes, log moves
    lock.py    the day's lock (an flock the kernel drops when its holder dies)
    state.py   state.json: BuildEntry per build, for resume; DayMeta, the night's facts
    prune.py   local retention of old day folders
"""

from nightly.files import remove_tree  # re-exported: callers of the day folder use it
from nightly.workspace.day import Day, atomic_write, day_name, write_json
from nightly.workspace.lock import DayLock, is_locked
from nightly.workspace.prune import PruneResult, apply_local_prune, parse_day, plan_local_prune
from nightly.workspace.state import (
    FAILED,
    FINISHED,
    INTERRUPTED,
    LOST_BUILD,
    LOST_GPU_TEST,
    PENDING,
    RUNNING,
    SUCCEEDED,
    BuildEntry,
    DayMeta,
    PackageFile,
    State,
)

__all__ = [
    "FAILED",
    "FINISHED",
    "INTERRUPTED",
    "LOST_BUILD",
    "LOST_GPU_TEST",
    "PENDING",
    "RUNNING",
    "SUCCEEDED",
    "BuildEntry",
    "Day",
    "DayLock",
    "DayMeta",
    "PackageFile",
    "PruneResult",
    "State",
    "apply_local_prune",
    "atomic_write",
    "day_name",
    "is_locked",
    "parse_day",
    "plan_local_prune",
    "remove_tree",
    "write_json",
]
