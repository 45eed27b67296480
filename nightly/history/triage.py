"""Failure facts: for each failed build of a night, is it new or still failing (since which
night), the last good and first bad nights with their commits, the commits between them, and
a failure signature shared by builds that fail the same way.

Pure logic over plain values (the nights' outcomes, a log's text); reading them from the day
folder, the history and the source checkout is in `facts_for_day` and `commit_range`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from nightly.config.timeouts import ExternalTimeouts, default_timeouts
from nightly.errors import NightlyError
from nightly.format import shown, shown_log
from nightly.jsonvalues import read_json_object
from nightly.procs import git

if TYPE_CHECKING:
    from nightly.history.db import History
    from nightly.workspace import Day

SUCCEEDED, FAILED = "succeeded", "failed"  # as nightly.workspace (kept light: no import)
RANGE_LINES = 20
_DAY_RE = re.compile(r"^\d{4}_\d{2}_\d{2}$")


@dataclass(frozen=True, kw_only=True)
class NightOutcome:
    """One night's final result of one build."""

    day: str
    outcome: str
    commit: str = ""


@dataclass(frozen=True, kw_only=True)
class FailureFacts:
    """What a release engineer asks first about a failed build."""

    build_id: str
    day: str
    new: bool  # it succeeded in the previous night that built it (or it never built before)
    since: str  # the first night of this run of failures (the first bad night)
    nights: int  # failing nights in a row, this one included
    first_bad_commit: str
    last_good: str | None = None  # the last night it succeeded, before `since`
    last_good_commit: str | None = None
    signature: str = ""
    commits: tuple[str, ...] | None = None  # `git log --oneline GOOD..BAD`; None: unknown
    commits_total: int = 0
    bisect: dict[str, object] | None = field(default=None, compare=False)

    def headline(self) -> str:
        if self.new:
            return "new"
        return f"still failing since {self.since} ({self.nights} nights)"

    def to_json(self) -> dict[str, object]:
        return {
            "new": self.new,
            "headline": self.headline(),
            "since": self.since,
            "nights": self.nights,
            "first_bad": {"day": self.since, "commit": self.first_bad_commit},
            "last_good": (None if self.last_good is None
                          else {"day": self.last_good, "commit": self.last_good_commit or ""}),
            "signature": self.signature,
            "commits": list(self.commits) if self.commits is not None else "unknown",
            "commits_total": self.commits_total,
            "bisect": self.bisect,
        }


def facts(build_id: str, tonight: NightOutcome, earlier: Sequence[NightOutcome],
          signature: str = "") -> FailureFacts:
    """The facts of a failed build from its earlier nights (any order; only nights before
    tonight that succeeded or failed count: an interrupted night says nothing)."""
    past = sorted((n for n in earlier if n.day < tonight.day and n.outcome in (SUCCEEDED, FAILED)),
                  key=lambda n: n.day)
    first_bad = tonight
    nights = 1
    last_good: NightOutcome | None = None
    for n in reversed(past):
        if n.outcome == SUCCEEDED:
            last_good = n
            break
        first_bad = n
        nights += 1
    return FailureFacts(
        build_id=build_id, day=tonight.day, new=nights == 1, since=first_bad.day, nights=nights,
        first_bad_commit=first_bad.commit,
        last_good=last_good.day if last_good else None,
        last_good_commit=last_good.commit if last_good else None,
        signature=signature,
    )


# ---------------------------------------------------------------------------- signatures

_RULE = "=" * 78
# What looks like an error, strongest first: the first line matching the earliest pattern
# wins, so "error: command 'gcc' failed" after a compiler's "fatal error:" loses to it.
_ERROR_PATTERNS = [
    re.compile(r"\bfatal error\b", re.I),
    re.compile(r"^CMake Error\b"),
    re.compile(r"\berror(\[\w+\])?:", re.I),
    re.compile(r"^Traceback \(most recent call last\):"),
    re.compile(r"\bError\b"),
    re.compile(r"^smoke test\b|\bsmoke test: ", re.I),
]
_LOCATION = re.compile(r"^(?:In file included from )?\S+?:\d+(?::\d+)?:\s*")
_PATH = re.compile(r"(?<![\w.])(?:/|\.\.?/)[^\s:'\"(),]*/([^\s:'\"(),/]+)")
_LINE_NO = re.compile(r"(?:\bline |:)\d+(?::\d+)?\b")
_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b")
_TEMP = re.compile(r"\b(?:tmp|pip-[a-z-]+-|build-env-)[A-Za-z0-9_]{4,}\b")
_LONG_HEX = re.compile(r"\b[0-9a-f]{12,64}\b")
_GPU_SECTION = re.compile(r"^-{10,} GPU test -{10,}$", re.M)  # nightly.builds.test.smoke's


def build_output(log_text: str, build_id: str = "") -> list[str]:
    """The build's own output lines of the log's last attempt (no header, footer or
    nightly's notes)."""
    text = shown_log(log_text)
    start = text.rfind(f"nightly build {build_id}  (attempt ") if build_id else -1
    if start < 0:
        start = text.rfind("nightly build ")
    lines = text[max(start, 0):].split("\n")
    if start >= 0:
        rules = [i for i, line in enumerate(lines) if line == _RULE]
        lines = lines[rules[0] + 1:] if rules else lines
    for i, line in enumerate(lines):
        if line == _RULE and i + 1 < len(lines) and lines[i + 1].startswith("result:"):
            lines = lines[:i]
            break
    return [ln.rstrip() for ln in lines if ln.strip() and not ln.startswith("[nightly]")]


def gpu_test_output(log_text: str) -> list[str]:
    """The output of the log's last GPU test section (`---- GPU test ----`,
    nightly.builds.test.smoke): inside the build's output on one machine, after the build's footer
    in a cluster night (the test stage's own log, nightly.cluster.gputest). [] without one."""
    text = shown_log(log_text)
    found = list(_GPU_SECTION.finditer(text))
    if not found:
        return []
    lines = text[found[-1].end():].split("\n")
    end = next((i for i, line in enumerate(lines) if line == _RULE), len(lines))
    # Not nightly's own lines: its notes, and the test's narration ("gpu test: project
    # command: ...", which echoes the command, error-looking words and all).
    return [ln.rstrip() for ln in lines[:end]
            if ln.strip() and not ln.startswith(("[nightly]", "gpu test: "))]


def footer_reason(log_text: str) -> str:
    found = re.findall(r"^reason:\s+(.+)$", log_text, re.M)
    return found[-1].strip() if found else ""


def normalise(line: str) -> str:
    """A line with what differs between machines and runs removed: the location prefix
    (file:line:col:), directories of paths, line numbers, hex addresses, temporary names."""
    s = shown(line, lines=False).strip()
    s = _LOCATION.sub("", s)
    s = _PATH.sub(r"\1", s)
    s = _LINE_NO.sub("", s)
    s = _HEX.sub("0x?", s)
    s = _TEMP.sub("tmp?", s)
    s = _LONG_HEX.sub("?", s)
    return re.sub(r"\s+", " ", s).strip()[:300]


def signature(log_text: str, build_id: str = "", reason: str = "") -> str:
    """The failure's signature: the first line of the build output that looks like an error
    (a Traceback stands for its last line, the exception), normalised; else the footer's
    reason (a smoke-test verdict, a timeout), else `reason` (state.json's), normalised. A
    build that failed its GPU test (`reason` or the footer's says so) is known by the error
    line of the GPU test's own section first: the build before it went well."""
    why = footer_reason(log_text) or reason
    sections = [build_output(log_text, build_id)]
    if (reason or why).startswith("GPU test"):
        sections.insert(0, gpu_test_output(log_text))
    for lines in sections:
        found = _first_error(lines)
        if found:
            return normalise(found)
    return normalise(why) or "failed (no error line in the log)"


def _first_error(lines: Sequence[str]) -> str:
    """The line that looks most like the error (strongest pattern first; a Traceback stands
    for its exception line), or ''."""
    for pattern in _ERROR_PATTERNS:
        for i, line in enumerate(lines):
            if not pattern.search(line):
                continue
            if line.startswith("Traceback"):
                after = [ln for ln in lines[i + 1:] if ln and not ln[0].isspace()]
                if after:
                    return after[0]
                continue
            return line
    return ""


# ---------------------------------------------------------------------------- commit ranges


def commit_range(source: Path, good: str | None, bad: str, *,
                 timeouts: ExternalTimeouts | None = None) -> tuple[tuple[str, ...] | None, int]:
    """(`git log --oneline GOOD..BAD` first RANGE_LINES lines, how many commits) in the
    source checkout; (None, 0) when unknown (a plain folder, no good night, git failing)."""
    if not good or not bad or not (source / ".git").exists():
        return None, 0
    try:
        out = git("log", "--oneline", f"{good}..{bad}", cwd=source,
                  timeout=(timeouts or default_timeouts()).git_log)
    except NightlyError:
        return None, 0
    lines = out.splitlines()
    return tuple(lines[:RANGE_LINES]), len(lines)


# ---------------------------------------------------------------------------- a day's facts


def facts_for_day(day: Day, history: History | None, *,
                  timeouts: ExternalTimeouts | None = None) -> dict[str, FailureFacts]:
    """Every failed build of the day folder (state.json) with its facts: earlier nights from
    the history, the signature from its log, the range from the day's source checkout."""
    state = read_json_object(day.state_path, 256 << 20)
    listed, meta = state.get("builds"), state.get("meta")
    builds: Mapping[str, object] = listed if isinstance(listed, Mapping) else {}
    commit = str(meta.get("commit") or "") if isinstance(meta, Mapping) else ""
    bisects = _bisects(history, day.name)
    out: dict[str, FailureFacts] = {}
    for bid, entry in sorted((builds or {}).items()):
        if not isinstance(entry, Mapping) or entry.get("status") != FAILED:
            continue
        earlier: list[NightOutcome] = []
        if history is not None and _DAY_RE.match(day.name):
            earlier = [NightOutcome(day=d, outcome=o, commit=c)
                       for d, o, c in _safe_outcomes(history, bid, day.name) if _DAY_RE.match(d)]
        log = day.inside(entry.get("log"))  # never a file outside the day folder
        text = _read_text(log) if log is not None else ""
        reason = str(entry.get("reason") or "")
        sig = signature(text, bid, reason) if text else normalise(reason or "failed")
        f = facts(bid, NightOutcome(day=day.name, outcome=FAILED, commit=commit), earlier, sig)
        lines, total = commit_range(day.source, f.last_good_commit, f.first_bad_commit,
                                    timeouts=timeouts)
        out[bid] = FailureFacts(**{**f.__dict__, "commits": lines, "commits_total": total,
                                   "bisect": bisects.get(bid)})
    return out


def groups(all_facts: Iterable[FailureFacts]) -> list[tuple[str, list[FailureFacts]]]:
    """Failures grouped by signature, the largest group first."""
    by: dict[str, list[FailureFacts]] = {}
    for f in all_facts:
        by.setdefault(f.signature, []).append(f)
    return sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def summary_section(all_facts: Mapping[str, FailureFacts]) -> dict[str, object]:
    """summary.json's "failures": per build its facts, the groups, and the counts."""
    return {
        "new": sum(f.new for f in all_facts.values()),
        "still_failing": sum(not f.new for f in all_facts.values()),
        "builds": {bid: f.to_json() for bid, f in sorted(all_facts.items())},
        "groups": [{"signature": sig, "builds": [f.build_id for f in fs]}
                   for sig, fs in groups(all_facts.values())],
    }


def summary_for_day(day: Day, history: History | None, *,
                    timeouts: ExternalTimeouts | None = None) -> dict[str, object]:
    """summary.json's "failures" for a day folder; never fails the night (an unreadable log
    or history gives fewer facts, not an error)."""
    try:
        return summary_section(facts_for_day(day, history, timeouts=timeouts))
    except (OSError, ValueError) as e:
        return {"new": 0, "still_failing": 0, "builds": {}, "groups": [], "error": str(e)}


def subject_counts(summary: Mapping[str, object]) -> str | None:
    """"3 new failures, 2 still failing" from summary.json's "failures", or None."""
    f = summary.get("failures")
    if not isinstance(f, Mapping) or not (f.get("new") or f.get("still_failing")):
        return None
    new, old = int(f.get("new") or 0), int(f.get("still_failing") or 0)
    return f"{new} new failure{'' if new == 1 else 's'}, {old} still failing"


def _safe_outcomes(history: History, build_id: str, before: str) -> list[tuple[str, str, str]]:
    import sqlite3

    try:
        return history.outcomes(build_id, before=before)
    except sqlite3.Error:
        return []


def _bisects(history: History | None, day_name: str) -> dict[str, dict[str, object]]:
    import sqlite3

    if history is None:
        return {}
    try:
        return history.bisects(day_name)
    except sqlite3.Error:
        return {}



def _read_text(path: Path, limit: int = 4 * 1024 * 1024) -> str:
    try:
        with path.open("rb") as f:
            return f.read(limit).decode("utf-8", errors="replace")
    except OSError:
        return ""
