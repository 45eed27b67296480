"""How durations, sizes and clock times read, wherever nightly shows them (terminal, live
progress, HTML report, status). One module at the base layer, so the build phase's progress
view and the report format the same way without the build phase importing the report."""

from __future__ import annotations

import datetime as dt


def hms(seconds: float) -> str:
    """A plan's or a live view's clock: 2:50, 1:02:03."""
    s = round(seconds)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def took(seconds: float | None) -> str:
    """A duration as people read it: 42s, 16m 40s, 2h 05m."""
    if seconds is None:
        return "-"
    s = round(seconds)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{h}h {m:02d}m"
    return f"{m}m {sec:02d}s" if m else f"{sec}s"


def human_size(n: float | None) -> str:
    """1.5 MB; '-' for nothing."""
    if not n:
        return "-"
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def clock(t: float | None) -> str:
    """A time of day (local), '-' for none."""
    return "-" if t is None else dt.datetime.fromtimestamp(t).strftime("%H:%M:%S")
