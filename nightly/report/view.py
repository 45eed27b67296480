"""The day folder read as one view: what `nightly status` (status.py) and `nightly report`
(report.py) show.

Reads state.json, summary.json, logs/master/plan.json and the logs of the day folder and, for
trends, the history database; writes nothing. Also the tail of a build's log (formatting of
durations, sizes and times is nightly/format.py).
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nightly.core.manylinux import ManylinuxRecord
from nightly.errors import UsageError
from nightly.format import shown
from nightly.jsonvalues import opt_float, opt_int, read_json_object
from nightly.workspace import (
    FAILED,
    INTERRUPTED,
    LOST_BUILD,
    LOST_GPU_TEST,
    PENDING,
    RUNNING,
    SUCCEEDED,
    BuildEntry,
    Day,
    DayMeta,
    State,
    publication,
)
from nightly.workspace.cost import shown_status
from nightly.workspace.pythontests import PythonTest
from nightly.workspace.records import CacheStats
from nightly.workspace.summary import Summary, read_summary

if TYPE_CHECKING:
    from nightly.history.db import History

TREND_NIGHTS = 30
REGRESSION = 0.20  # more than 20% slower or larger than the build's median is a regression
# A duration regression must also be this many seconds: a 2 s build taking 3 s is noise.
MIN_SLOWER_S = 10.0

# Failures first, then what is still going on, then the good ones.
_ORDER = {FAILED: 0, INTERRUPTED: 1, RUNNING: 2, PENDING: 3, SUCCEEDED: 4}
_FOOTER_SEP = "=" * 78


# ---------------------------------------------------------------------------- the day's data


@dataclass(frozen=True, kw_only=True)
class LostAttempt:
    """An attempt of a cluster build whose worker was lost (kill -9, a crash): state.json's
    `lost` (nightly.cluster.collector), shown as an interrupted bar and in the status."""

    attempt: int
    worker: str  # the worker's --name, else its address
    queue: int | None
    started: float
    ended: float
    stage: str = LOST_BUILD  # or LOST_GPU_TEST: an attempt of the test stage's GPU part

    @property
    def what(self) -> str:
        return attempt_words(self.attempt, self.stage)


def attempt_words(attempt: object, stage: object) -> str:
    """'attempt 2' of a build, 'GPU test attempt 1' of its GPU test (a `lost` record's)."""
    return f"{'GPU test ' if stage == LOST_GPU_TEST else ''}attempt {attempt}"


def lost_attempts(e: BuildEntry) -> list[LostAttempt]:
    """The entry's lost attempts; a malformed record (a hand-edited file) is skipped."""
    raw = e.extra.get("lost")
    out = []
    for r in raw if isinstance(raw, list) else []:
        if not isinstance(r, Mapping):
            continue
        started, ended = opt_float(r.get("started")), opt_float(r.get("ended"))
        if started is None:
            continue
        out.append(LostAttempt(
            attempt=opt_int(r.get("attempt")) or 0,
            worker=str(r.get("worker_name") or r.get("worker") or "?"),
            queue=opt_int(r.get("slot")), started=started,
            ended=max(started, ended if ended is not None else started),
            stage=str(r.get("stage") or LOST_BUILD)))
    return out


def lost_text(b: BuildView) -> str:
    """'attempt 1 lost with worker lin-a' (or 'GPU test attempt 1 ...') for each lost attempt
    of the build, else ''."""
    return "; ".join(f"{a.what} lost with worker {a.worker}" for a in b.lost)


@dataclass(kw_only=True)
class BuildView:
    """One build of the day as the status and the report show it."""

    id: str
    status: str
    reason: str | None = None
    exit_status: int | None = None
    attempts: int = 0
    machine: str = ""  # where it ran: a cluster worker's --name, else its address
    lost: list[LostAttempt] = field(default_factory=list)  # cluster attempts whose worker died
    queue: int | None = None
    executor: str = ""
    # The matrix's axes (from the plan; the accelerator from state.json's cuda otherwise).
    arch: str = ""
    accelerator: str = ""
    started: float | None = None
    ended: float | None = None
    duration_s: float | None = None
    estimate_s: float | None = None
    files: list[tuple[str, int]] = field(default_factory=list)
    published: int = 0
    upload_error: str | None = None
    held_back: bool = False  # by the [publish] atomic gate
    # A one-off `nightly build` (not the night): who ran it, when (ISO), the command.
    manual: dict[str, str] | None = None
    log: Path | None = None  # absolute
    # The compiler cache's statistics of the build (nightly.workspace.records) or None.
    cache: CacheStats | None = None
    # its test stage (state.json's `tested`): seconds, where each part ran, the GPU part's
    test_s: float | None = None
    tested_on: str = ""
    gpu_test_s: float = 0.0
    # "passed", "untested", "GPU test not run", "failed" (nightly.workspace.cost.verdict_of)
    tested: str = ""
    # a limited-API build's test on each Python (nightly.workspace.pythontests)
    python_tests: tuple[PythonTest, ...] = ()
    # The manylinux record (nightly.core.manylinux): policy and tags reached, or a zip's glibc.
    manylinux: ManylinuxRecord | None = None
    # trends (previous nights, oldest first) and the verdicts against their medians
    past_durations: list[float] = field(default_factory=list)
    past_sizes: list[int] = field(default_factory=list)
    slower: float | None = None  # tonight / median - 1, when a regression
    larger: float | None = None

    @property
    def size(self) -> int:
        return sum(s for _, s in self.files)

    @property
    def publication(self) -> str:
        """"published", "not published" or "" (nightly.workspace.publication)."""
        return publication.verdict(self.status, self.upload_error, self.published, self.held_back)

    @property
    def bad(self) -> bool:
        return self.status in (FAILED, INTERRUPTED)

    @property
    def elapsed_s(self) -> float | None:
        if self.duration_s is not None and self.status != RUNNING:
            return self.duration_s
        if self.started is not None:
            return (self.ended or time.time()) - self.started
        return None

    @property
    def median_duration(self) -> float | None:
        return statistics.median(self.past_durations) if self.past_durations else None

    @property
    def median_size(self) -> float | None:
        return statistics.median(self.past_sizes) if self.past_sizes else None


@dataclass(kw_only=True)
class NightView:
    day: Day
    meta: DayMeta  # state.json's
    summary: Summary  # summary.json (empty when the day has none yet)
    builds: list[BuildView]

    def counts(self) -> dict[str, int]:
        c = {s: 0 for s in (SUCCEEDED, FAILED, INTERRUPTED, RUNNING, PENDING)}
        for b in self.builds:
            c[b.status] = c.get(b.status, 0) + 1
        c["total"] = len(self.builds)
        c["regressions"] = sum(1 for b in self.builds if b.slower or b.larger)
        c["manual"] = sum(1 for b in self.builds if b.manual)
        c["untested"] = sum(1 for b in self.builds
                            if b.status == SUCCEEDED and b.tested not in ("passed", ""))
        c["published"] = sum(b.publication == publication.PUBLISHED for b in self.builds)
        c["not_published"] = sum(b.publication == publication.NOT_PUBLISHED for b in self.builds)
        return c


def load_night(
    day: Day,
    history: History | None = None,
    *,
    plan: Mapping[str, Any] | None = None,
    nights: int = TREND_NIGHTS,
) -> NightView:
    """The day folder (and the history's previous nights) as one view. Raises UsageError when
    the day has no state.json."""
    if not day.state_path.exists():
        raise UsageError(f"no night in {day.path} (no state.json): pass --date, or run the night")
    # Read through State and read_summary: the one place each file is checked.
    state = State(day.state_path)
    summary = read_summary(day.summary_path) or Summary(date=day.name)
    if plan is None:
        plan = read_json_object(day.master / "plan.json", 256 << 20)
    entries = state.builds
    listed = (plan or {}).get("builds")
    planned = {
        str(b.get("id")): b for b in (listed if isinstance(listed, list) else [])
        if isinstance(b, Mapping)
    }
    # The night's builds: what state.json knows, plus what summary.json lists (never started).
    ids = list(entries)
    ids += [i for i in summary.builds if i not in entries]
    views = []
    for bid in ids:
        pb: Mapping[str, object] = planned.get(bid) or {}
        night_build = summary.builds.get(bid)
        est = night_build.estimate_s if night_build is not None else None
        if est is None:
            est = opt_float(pb.get("estimate_s"))
        views.append(
            _build_view(day, str(bid), entries.get(bid) or BuildEntry(), pb, est, summary.machine)
        )
    if history is not None:
        starts = [v.started for v in views if v.started is not None]
        until = min(starts) if starts else None
        for v in views:
            past = history.trend(v.id, nights, before=day.name, until=until)
            v.past_durations = [d for _, d, _ in past]
            v.past_sizes = [s for _, _, s in past if s]
            _judge(v)
    for v in views:
        v.held_back = v.id in (state.meta.held_back or {})
    views.sort(key=lambda v: (_ORDER.get(v.status, 5), v.id))
    return NightView(day=day, meta=state.meta, summary=summary, builds=views)


def _test_fields(e: BuildEntry) -> dict[str, Any]:
    from nightly.workspace.cost import GpuHosts, build_cost, verdict_of

    cost = build_cost(e, GpuHosts())
    return {"test_s": cost.test_s, "tested_on": tested_on_by_name(e) or cost.tested_on,
            "gpu_test_s": cost.gpu_test_s,
            "tested": verdict_of(e) if e.status == SUCCEEDED else "",
            "python_tests": e.python_tests}


def tested_on_by_name(e: BuildEntry) -> str:
    """Where each part of its test ran ("lin-a, gpu"), a cluster worker by its --name (its
    address only without one); '' when no part ran."""
    parts = [p for p in (e.tested.parts if e.tested is not None else ()) if p.ran]
    names = {e.machine: e.worker_name} if e.worker_name else {}  # the CPU part ran there
    hosts = [p.worker_name or names.get(p.where, p.where) for p in parts]
    return ", ".join(dict.fromkeys(h for h in hosts if h))


def lost_json(e: BuildEntry) -> dict[str, object]:
    """summary.json's `lost` of a build (each lost attempt's number, worker by name, times),
    as keys of its entry: {} when none was lost."""
    lost = [{"attempt": a.attempt, "worker": a.worker, "started": a.started, "ended": a.ended,
             "stage": a.stage} for a in lost_attempts(e)]
    return {"lost": lost} if lost else {}


def _build_view(
    day: Day, bid: str, e: BuildEntry, pb: Mapping[str, object], est: float | None,
    night_machine: str,
) -> BuildView:
    """One build from its state.json entry `e` and its plan entry `pb`."""
    status = e.status or PENDING
    started, ended, duration = e.started, e.ended, e.duration_s
    if started is not None and ended is None and status != RUNNING:
        # Left 'running' by a run that died (now interrupted): it ended when last heard of.
        ended = started + duration if duration is not None else e.updated
        if ended is not None and duration is None:
            duration = max(0.0, ended - started)
    return BuildView(
        id=bid,
        status=status,
        # Words a build or a remote wrote (a state.json of an older nightly kept them raw).
        reason=None if e.reason is None else shown(e.reason),
        exit_status=e.exit_status,
        attempts=e.attempts,
        # A cluster worker by its --name (docs/cluster.md), its address only without one.
        machine=e.worker_name or e.machine or str(pb.get("machine") or night_machine or ""),
        lost=lost_attempts(e),
        queue=e.queue if e.queue is not None else opt_int(pb.get("queue")),
        executor=e.executor,
        arch=str(pb.get("arch") or ""),
        accelerator=str(pb.get("accelerator") or e.cuda or ""),
        started=started,
        ended=ended,
        duration_s=duration,
        estimate_s=est,
        files=[(p.name, p.size) for p in e.packages],
        published=len(e.published),
        upload_error=None if e.upload_error is None else shown(e.upload_error),
        manual=dict(e.manual) or None,
        log=find_log(day, bid, e.log),
        cache=e.cache,
        **_test_fields(e),
        manylinux=e.manylinux,
    )


def _judge(v: BuildView) -> None:
    """Mark tonight's duration and size against the median of the previous nights."""
    if v.status != SUCCEEDED:
        return
    med = v.median_duration
    if med and v.duration_s is not None:
        ratio = v.duration_s / med - 1
        if ratio > REGRESSION and v.duration_s - med >= MIN_SLOWER_S:
            v.slower = ratio
    med_size = v.median_size
    if med_size and v.size:
        ratio = v.size / med_size - 1
        if ratio > REGRESSION:
            v.larger = ratio


def find_log(day: Day, build_id: str, recorded: object = None) -> Path | None:
    """The build's log: where state.json says, else failed/, succeeded/, the running log;
    each only inside the day folder (Day.inside: no absolute path, `..` or link out)."""
    fallbacks = (day.failed / f"{build_id}.log", day.succeeded / f"{build_id}.log",
                 day.running_log(build_id))
    for rel in (recorded, *(os.path.relpath(p, day.path) for p in fallbacks)):
        p = day.inside(rel)
        if p is not None and p.is_file():
            return p
    return None


def log_tail(path: Path | None, lines: int, *, max_bytes: int = 256 * 1024) -> list[str]:
    """The last `lines` lines of a build's output: after nightly's header of the last attempt
    (where, command, environment) and before its closing block (result, exit status, reason:
    shown beside it anyway), with terminal control sequences removed."""
    if path is None or lines <= 0:
        return []
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace")
    out = text.splitlines()
    if size > max_bytes and out:
        out = out[1:]  # a partial first line
    while out and not out[-1].strip():
        out.pop()
    # Drop the runner's footer: "", SEP, "result: ...", ..., SEP.
    if out and out[-1] == _FOOTER_SEP:
        for j in range(len(out) - 2, -1, -1):
            if out[j] == _FOOTER_SEP:
                if j + 1 < len(out) and out[j + 1].startswith("result:"):
                    out = out[:j]
                break
    # Only the last attempt's output: after the last header (SEP, "nightly build ...", SEP).
    for i in range(len(out) - 2, -1, -1):
        if out[i] == _FOOTER_SEP and out[i + 1].startswith("nightly build "):
            end = next((j for j in range(i + 2, len(out)) if out[j] == _FOOTER_SEP), None)
            if end is not None:
                out = out[end + 1 :]
            break
    while out and not out[0].strip():
        out.pop(0)
    while out and not out[-1].strip():
        out.pop()
    cleaned = [shown(line.rstrip("\r").rsplit("\r", 1)[-1], lines=False) for line in out]
    return cleaned[-lines:]


# ---------------------------------------------------------------------------- formatting


def axes_text(b: BuildView) -> str:
    """`aarch64 · cpu`, `x86_64 · rocm5.7`: what the build is for, beside its id."""
    return " · ".join(x for x in (b.arch, b.accelerator) if x)


def manual_text(b: BuildView) -> str:
    """'manual build by alice, 2026-11-22 14:02' for a one-off build, else ''."""
    if not b.manual:
        return ""
    text = "manual build"
    if b.manual.get("by"):
        text += f" by {b.manual['by']}"
    at = b.manual.get("at", "")
    try:
        text += ", " + dt.datetime.fromisoformat(at).strftime("%Y-%m-%d %H:%M")
    except ValueError:
        text += f", {at}" if at else ""
    return text


def outcome_text(b: BuildView) -> str:
    return (shown_status(b.status, b.tested)
            + (f": {b.reason}" if b.reason and b.status != SUCCEEDED else ""))
