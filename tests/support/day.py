"""The day folder of a night, found the way nightly finds it: `Day(root, date)` of
nightly.workspace, the date being the one the night ran for. Never the first entry of a
listing: the root also holds the day's lock file (`YYYY_MM_DD.lock`), history.sqlite and
other days.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from nightly.workspace import Day
from nightly.workspace.prune import parse_day


def find_day(root: Path, date: dt.date | str | None = None) -> Day:
    """The day folder under `root` that holds a night (its state.json).

    `date` (a date or its `YYYY_MM_DD` name): that day's folder. None: the night ran for
    the default date (today, which may have turned while it ran), so the one folder under
    `root` whose name is a date, as nightly's retention reads the names, and that holds a
    night; it fails when there are none or several.
    """
    if date is not None:
        when = parse_day(date) if isinstance(date, str) else date
        assert when is not None, f"{date!r} is not a day folder name"
        day = Day(root, when)
        assert day.state_path.is_file(), f"no night in {day.path} (no state.json)"
        return day
    days = [
        Day(root, when)
        for p in root.iterdir()
        if p.is_dir() and not p.is_symlink() and (when := parse_day(p.name)) is not None
    ]
    nights = [d for d in days if d.state_path.is_file()]
    assert len(nights) == 1, f"expected one night under {root}, found {sorted(d.name for d in nights)}"
    return nights[0]
