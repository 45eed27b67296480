"""The history's retention: nights older than `[retention] history_days` leave the database,
so that it stops growing (about 128 KB and 167 rows a night for PyTorch's 164 builds).

What the report and the failure facts still need is kept: the report reads its builds' last
30 nights, and a build failing since before the window keeps its last successful night and
its first failed night after it, so "failing since when" and the last good commit survive.
Release folders' rows (not a calendar day) are never pruned here.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from nightly.history.schema import DAY_GLOB, SUCCEEDED

if TYPE_CHECKING:
    from nightly.history.db import History

# The report's window of trends: never pruned below it, whatever the configuration says.
REPORT_NIGHTS = 30


def cutoff(today: dt.date, keep_days: int) -> str | None:
    """The first day name kept, or None when everything is kept (`keep_days` 0)."""
    if keep_days <= 0:
        return None
    return (today - dt.timedelta(days=max(keep_days, REPORT_NIGHTS))).strftime("%Y_%m_%d")


def prune_history(history: History, today: dt.date, keep_days: int) -> int:
    """Delete the nights before the window from `history` (rows, their files and bisects);
    returns how many build attempts went."""
    cut = cutoff(today, keep_days)
    if cut is None:
        return 0
    with history.transaction() as conn:
        # Builds whose last success is before the window: that night, and the first night
        # after it, stay (triage's last good night and "since").
        kept: list[tuple[str, str]] = []
        stale = conn.execute(
            f"SELECT build_id, MAX(day) FROM builds WHERE outcome = ? AND day GLOB '{DAY_GLOB}' "
            "GROUP BY build_id HAVING MAX(day) < ?",
            (SUCCEEDED, cut),
        ).fetchall()
        for build_id, good in stale:
            kept.append((str(build_id), str(good)))
            first_bad = conn.execute(
                f"SELECT MIN(day) FROM builds WHERE build_id = ? AND day > ? AND day GLOB '{DAY_GLOB}'",
                (build_id, good),
            ).fetchone()
            if first_bad and first_bad[0] is not None and str(first_bad[0]) < cut:
                kept.append((str(build_id), str(first_bad[0])))
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS kept_nights (build_id TEXT, day TEXT)")
        conn.execute("DELETE FROM kept_nights")
        conn.executemany("INSERT INTO kept_nights VALUES (?, ?)", kept)
        gone = conn.execute(
            f"DELETE FROM builds WHERE day < ? AND day GLOB '{DAY_GLOB}' AND NOT EXISTS "
            "(SELECT 1 FROM kept_nights k WHERE k.build_id = builds.build_id AND k.day = builds.day)",
            (cut,),
        ).rowcount
        # The files of a pruned attempt go with it (ON DELETE CASCADE); bisects by night.
        conn.execute(f"DELETE FROM bisects WHERE day < ? AND day GLOB '{DAY_GLOB}'", (cut,))
        conn.execute("DROP TABLE kept_nights")
    return int(gone)


__all__ = ["REPORT_NIGHTS", "cutoff", "prune_history"]
