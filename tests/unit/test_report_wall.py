"""The report's wall time is the run it reports: summary.json's only when that summary is
this run's (written during the run, the report comes before the run's summary)."""

from __future__ import annotations

import datetime as dt

from nightly.report.html import _wall_s as _typed_wall_s
from nightly.workspace.state import DayMeta
from nightly.workspace.summary import Summary


def _wall_s(meta: dict[str, object], summary: dict[str, object], now: float) -> float | None:
    """The report's wall time from state.json's meta and summary.json as read from disk."""
    return _typed_wall_s(DayMeta.from_json(meta), Summary.from_json(summary), now)


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t).isoformat(timespec="seconds")


def test_the_wall_time_is_never_an_earlier_runs() -> None:
    earlier = {"started": _iso(1000.0), "duration_s": 50.0}
    # The report written during a later run (started at 5000), before its summary: so far.
    assert _wall_s({"run_started": 5000.0}, earlier, now=5049.0) == 49.0
    # That run's own summary, once written.
    mine = {"started": _iso(5000.0), "duration_s": 77.6}
    assert _wall_s({"run_started": 5000.0}, mine, now=9999.0) == 77.6
    # A day folder from before run_started was recorded: the summary, as before.
    assert _wall_s({}, earlier, now=9999.0) == 50.0
    assert _wall_s({}, {}, now=1.0) is None
