"""The day's machine-readable records: the night's summary.json and one-off builds' own.

- `ROOT/DAY/summary.json` is the night's: `nightly run` (and `nightly release`) write it for
  the builds of the night. It stays the night's: a later command that changes the day
  refreshes only what it changed, never the night's outcomes, counts or times:
  `nightly upload` and a one-off `nightly build` rewrite the publication fields of the
  night's builds (`published`, `publication`, the counts `published` and `not_published`,
  `failed_uploads`, `publish_error` and so `exit_code`), and a
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
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nightly.jsonvalues import opt_float, opt_int, opt_str, read_json_file
from nightly.workspace import SUCCEEDED, Day, PackageFile, State, publication, write_json
from nightly.workspace.pythontests import SUMMARY_KEY, PythonTest, read_tests, tests_json

if TYPE_CHECKING:
    from nightly.config import Config

MANUAL_PREFIX = "manual-"
MAX_SUMMARY_BYTES = 64 << 20  # far beyond any night's summary.json


@dataclass(frozen=True, kw_only=True)
class BuildSummary:
    """One build's line of summary.json."""

    outcome: str
    reason: str | None = None
    duration_s: float | None = None
    estimate_s: float | None = None
    attempts: int = 0
    queue: int | None = None
    packages: tuple[PackageFile, ...] = ()
    published: Mapping[str, str] = field(default_factory=dict)  # destination -> sha256
    log: str | None = None
    # cost (nightly.workspace.cost): duration_s is the build alone, test_s its test stage
    test_s: float | None = None
    built_on: str = ""
    tested_on: str = ""
    # "passed", "untested", "GPU test not run", "failed" (nightly.workspace.cost.verdict_of)
    tested: str = ""
    python_tests: tuple[PythonTest, ...] = ()  # a limited-API build's test on each Python
    extra: Mapping[str, object] = field(default_factory=dict)  # keys other versions wrote

    _KEYS = ("outcome", "reason", "duration_s", "estimate_s", "attempts", "queue", "packages",
             "published", "log", "test_s", "built_on", "tested_on", "tested", SUMMARY_KEY)

    def to_json(self) -> dict[str, object]:
        return {**self.extra, "outcome": self.outcome, "reason": self.reason,
                "duration_s": self.duration_s, "estimate_s": self.estimate_s,
                "attempts": self.attempts, "queue": self.queue,
                "packages": [p.to_json() for p in self.packages], "published": dict(self.published),
                "log": self.log, "test_s": self.test_s, "built_on": self.built_on,
                "tested_on": self.tested_on, **({"tested": self.tested} if self.tested else {}),
                **({SUMMARY_KEY: tests_json(self.python_tests)} if self.python_tests else {})}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> BuildSummary:
        packages, published = data.get("packages"), data.get("published")
        return cls(
            outcome=str(data.get("outcome") or ""),
            reason=opt_str(data.get("reason")),
            duration_s=opt_float(data.get("duration_s")),
            estimate_s=opt_float(data.get("estimate_s")),
            attempts=opt_int(data.get("attempts")) or 0, queue=opt_int(data.get("queue")),
            packages=tuple(PackageFile.from_json(p) for p in packages if isinstance(p, Mapping))
            if isinstance(packages, list) else (),
            published={str(k): str(v) for k, v in published.items()}
            if isinstance(published, Mapping) else {},
            log=opt_str(data.get("log")),
            test_s=opt_float(data.get("test_s")), built_on=str(data.get("built_on") or ""),
            tested_on=str(data.get("tested_on") or ""), tested=str(data.get("tested") or ""),
            python_tests=read_tests(data.get(SUMMARY_KEY)),
            extra={k: v for k, v in data.items() if k not in cls._KEYS},
        )


@dataclass(kw_only=True)
class Summary:
    """summary.json: the night's outcome (or a one-off build's own record). Read back with
    `from_json`, which keeps the keys it does not know, so a summary written by another
    version of nightly survives a refresh by this one."""

    date: str
    machine: str = ""
    version: str = ""
    channel: str = ""
    commit: str | None = None
    source: str = ""
    started: str = ""
    ended: str = ""
    duration_s: float | None = None
    estimated_makespan_s: float | None = None
    counts: dict[str, int] = field(default_factory=dict)
    failed_uploads: list[str] = field(default_factory=list)
    publish_error: str | None = None
    builds: dict[str, BuildSummary] = field(default_factory=dict)
    exit_code: int = 0
    manual: object = None  # the one-off builds of the day (a list), or a one-off's own mark
    updated: dict[str, str] | None = None  # the last command that refreshed it
    # good builds not published because [publish] atomic waits for a failed one: id -> why
    held_back: dict[str, str] = field(default_factory=dict)
    # the night's seconds on GPU hosts: {"building": s, "testing": s} (nightly.workspace.cost)
    gpu_host_s: dict[str, float] = field(default_factory=dict)
    extra: dict[str, object] = field(default_factory=dict)

    _KEYS = ("date", "machine", "version", "channel", "commit", "source", "started", "ended",
             "duration_s", "estimated_makespan_s", "counts", "failed_uploads", "publish_error",
             "builds", "exit_code", "manual", "updated", "held_back",
             "gpu_host_s")

    def to_json(self) -> dict[str, object]:
        data = {**self.extra, **{k: getattr(self, k) for k in self._KEYS if k != "builds"}}
        data["builds"] = {bid: b.to_json() for bid, b in self.builds.items()}
        if self.updated is None:
            data.pop("updated")
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Summary:
        builds = data.get("builds")
        counts = data.get("counts")
        return cls(
            date=str(data.get("date") or ""), machine=str(data.get("machine") or ""),
            version=str(data.get("version") or ""), channel=str(data.get("channel") or ""),
            commit=opt_str(data.get("commit")),
            source=str(data.get("source") or ""), started=str(data.get("started") or ""),
            ended=str(data.get("ended") or ""), duration_s=opt_float(data.get("duration_s")),
            estimated_makespan_s=opt_float(data.get("estimated_makespan_s")),
            counts={str(k): int(v) for k, v in counts.items() if isinstance(v, int)}
            if isinstance(counts, Mapping) else {},
            failed_uploads=[str(x) for x in data.get("failed_uploads") or []],
            publish_error=None if not data.get("publish_error") else str(data["publish_error"]),
            builds={str(k): BuildSummary.from_json(v) for k, v in builds.items()
                    if isinstance(v, Mapping)} if isinstance(builds, Mapping) else {},
            exit_code=opt_int(data.get("exit_code")) or 0, manual=data.get("manual"),
            updated=dict(data["updated"]) if isinstance(data.get("updated"), Mapping) else None,
            held_back=held_back_of(data),
            gpu_host_s={str(k): float(v) for k, v in data["gpu_host_s"].items()
                        if isinstance(v, (int, float))}
            if isinstance(data.get("gpu_host_s"), Mapping) else {},
            extra={k: v for k, v in data.items() if k not in cls._KEYS},
        )


def held_back_of(data: Mapping[str, object]) -> dict[str, str]:
    """The `held_back` map (build -> why) of summary.json."""
    held = data.get("held_back")
    return {str(k): str(v) for k, v in held.items()} if isinstance(held, Mapping) else {}


def read_summary(path: Path) -> Summary | None:
    """summary.json (or a one-off build's), None when missing or unreadable."""
    try:  # bounded: a FIFO, a link, a huge or deeply nested file reads as unreadable
        data = read_json_file(path, MAX_SUMMARY_BYTES)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("builds"), dict):
        return None
    return Summary.from_json(data)


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
    if not pub.has_destination:
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


def exit_code(builds: Mapping[str, BuildSummary], failed: list[str], publish_error: object) -> int:
    ok = all(b.outcome == SUCCEEDED and b.extra.get("publication") != publication.NOT_PUBLISHED
             for b in builds.values())
    return 0 if ok and not failed and not publish_error else 1


def refresh(day: Day, state: State, *, by: str) -> Summary | None:
    """Bring the night's summary.json up to date with state.json after `by` (a command) changed
    the day: publication of the night's builds and the day's one-off builds. Returns the new
    summary, or None when the day has no night (no summary.json, or an unreadable one)."""
    summary = read_summary(day.summary_path)
    if summary is None:
        return None
    night_ids = []
    for bid, b in list(summary.builds.items()):
        e = state.get(bid)
        if [p.sha256 for p in e.packages] != [p.sha256 for p in b.packages]:
            continue  # rebuilt by hand since the night: the night's record of it stays
        night_ids.append(bid)
        pub = publication.of_entry(bid, e, state.meta.held_back)
        summary.builds[bid] = replace(b, published=dict(e.published),
                                      extra={**b.extra, "publication": pub})
    summary.failed_uploads = failed_uploads(state, night_ids)
    summary.held_back = dict(state.meta.held_back or {})
    summary.publish_error = state.meta.publish_error
    fresh = publication.counts((b.outcome, b.tested, str(b.extra.get("publication") or ""))
                               for b in summary.builds.values())
    summary.counts = {**summary.counts,
                      **{k: fresh[k] for k in ("published", "not_published")}}
    summary.exit_code = exit_code(summary.builds, summary.failed_uploads, summary.publish_error)
    summary.manual = manual_builds(state)
    summary.updated = {"at": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                       "by": by}
    write_json(day.summary_path, summary.to_json())
    return summary


def package_destinations(summary: Summary) -> list[tuple[str, str, str, list[str]]]:
    """(build, package, local path relative to the day folder, where it was published) for
    every package of a summary's builds; an empty list of destinations: not published."""
    out = []
    for bid, b in sorted(summary.builds.items()):
        for p in b.packages:
            name = p.name
            # A destination ends with the file's name (s3://.../whl/nightly/cpu/NAME,
            # file://.../linux-64/NAME, anaconda:user/label/NAME).
            dests = sorted(d for d in b.published if d.rsplit("/", 1)[-1] == name)
            out.append((bid, name, p.path, dests))
    return out
