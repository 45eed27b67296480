"""The day's machine-readable records: the night's summary.json and one-off builds' own.

- `ROOT/DAY/summary.json` is the night's: `nightly run` (and `nightly release`) write it for
  the builds of the night. It stays the night's: a later command that changes the day
  refreshes only what it changed, never the night's outcomes, counts or times:
  `nightly upload` and a one-off `nightly build` rewrite the publication fields of the
  night's builds (`published`, `failed_uploads`, `publish_error` and so `exit_code`), and a
  one-off build adds itself to the `manual` list. A day with no night has no summary.json.
- A one-off `nightly build` is marked in state.json (the build's `manual`: who, when, the
  command) and writes its own summary, `logs/master/manual-<YYYYMMDDTHHMMSS>.json`, with the
  same fields as summary.json for its builds plus `manual`.

A build of the night rebuilt by hand (other packages than the night's) keeps its night
outcome and publication in summary.json (the `manual` list says it was rebuilt, and how that
went); `nightly status` and the report show its current state, marked manual.
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nightly.workspace import SUCCEEDED, Day, State, write_json

if TYPE_CHECKING:
    from nightly.config import Config

MANUAL_PREFIX = "manual-"


def who() -> str:
    """Who runs this command: $USER, else the login name, else the uid."""
    user = os.environ.get("USER", "").strip()
    if user:
        return user
    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):
        return f"uid {os.getuid()}"


def manual_mark(command: str, *, at: float | None = None) -> dict[str, str]:
    """What a one-off build's state entry records: who ran it, when, and the command."""
    when = dt.datetime.fromtimestamp(time.time() if at is None else at).astimezone()
    return {"by": who(), "at": when.isoformat(timespec="seconds"), "command": command}


def mark_manual(state: State, build_ids: Iterable[str], mark: Mapping[str, str] | None) -> None:
    """Before the builds run: a one-off build's are marked manual; a night's lose the mark a
    one-off build of the day left (the night made them its own again)."""
    for bid in build_ids:
        if mark is not None or state.get(bid).manual:
            state.update(bid, manual=dict(mark) if mark is not None else None)


def why_not_published(config: Config, *, no_upload: bool, day: Day) -> str:
    """Why a good package of a one-off build was not published, in words for its user."""
    if no_upload:
        return f"--no-upload (`nightly upload --date {day.name}` publishes it)"
    pub = config.publish
    if not (pub.url or pub.conda_channel or pub.anaconda_user):
        return "no publish destination is configured ([publish] url)"
    return f"see {day.master / 'run.log'}"


def manual_summary_path(day: Day, at: float) -> Path:
    """logs/master/manual-<YYYYMMDDTHHMMSS>.json, with -2, -3 ... when that second is taken."""
    stamp = dt.datetime.fromtimestamp(at).strftime("%Y%m%dT%H%M%S")
    path = day.master / f"{MANUAL_PREFIX}{stamp}.json"
    n = 2
    while path.exists():
        path = day.master / f"{MANUAL_PREFIX}{stamp}-{n}.json"
        n += 1
    return path


def manual_builds(state: State) -> list[dict[str, Any]]:
    """The day's builds whose last run was a one-off build: id, outcome, who, when, command."""
    out = []
    for bid in sorted(state.builds):
        e = state.get(bid)
        if e.manual:
            out.append({"id": bid, "outcome": e.status, **e.manual})
    return out


def failed_uploads(state: State, build_ids: Iterable[str]) -> list[str]:
    """The builds among `build_ids` whose last upload failed."""
    return [bid for bid in build_ids if state.get(bid).upload_error]


def exit_code(builds: Mapping[str, Mapping[str, Any]], failed: list[str], publish_error: object) -> int:
    ok = all(b.get("outcome") == SUCCEEDED for b in builds.values())
    return 0 if ok and not failed and not publish_error else 1


def refresh(day: Day, state: State, *, by: str) -> dict[str, Any] | None:
    """Bring the night's summary.json up to date with state.json after `by` (a command) changed
    the day: publication of the night's builds and the day's one-off builds. Returns the new
    summary, or None when the day has no night (no summary.json, or an unreadable one)."""
    try:
        summary = json.loads(day.summary_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict) or not isinstance(summary.get("builds"), dict):
        return None
    builds: dict[str, dict[str, Any]] = summary["builds"]
    night_ids = []
    for bid, b in builds.items():
        e = state.get(bid)
        if not isinstance(b, dict) or _shas([p.to_json() for p in e.packages]) != _shas(
                b.get("packages")):
            continue  # rebuilt by hand since the night: the night's record of it stays
        night_ids.append(bid)
        b["published"] = dict(e.published)
    failed = failed_uploads(state, night_ids)
    summary["failed_uploads"] = failed
    summary["publish_error"] = state.meta.get("publish_error")
    summary["exit_code"] = exit_code(builds, failed, summary["publish_error"])
    summary["manual"] = manual_builds(state)
    summary["updated"] = {"at": dt.datetime.now().astimezone().isoformat(timespec="seconds"), "by": by}
    write_json(day.summary_path, summary)
    return summary


def _shas(packages: object) -> list[str]:
    if not isinstance(packages, list):
        return []
    return [str(p.get("sha256")) for p in packages if isinstance(p, Mapping)]


def package_destinations(summary: Mapping[str, Any]) -> list[tuple[str, str, str, list[str]]]:
    """(build, package, local path relative to the day folder, where it was published) for
    every package of a summary's builds; an empty list of destinations: not published."""
    out = []
    for bid, b in sorted((summary.get("builds") or {}).items()):
        published = b.get("published") or {}
        for p in b.get("packages") or []:
            name = str(p.get("name"))
            # A destination ends with the file's name (s3://.../whl/nightly/cpu/NAME,
            # file://.../linux-64/NAME, anaconda:user/label/NAME).
            dests = sorted(d for d in published if d.rsplit("/", 1)[-1] == name)
            out.append((bid, name, str(p.get("path") or ""), dests))
    return out
