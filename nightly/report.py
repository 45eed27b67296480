"""Seeing the night: `nightly status` (the terminal) and `nightly report` (one static HTML page).

Both read the day folder only (state.json, summary.json, logs/master/plan.json, the logs) and,
for the report's trends, the history database. Nothing here writes anything but the report.

The HTML page is self-contained: inline CSS, bars as positioned divs, sparklines as inline
SVG, no script, and a Content-Security-Policy that forbids every request the page could make
(links to the logs are relative and only followed when clicked). Every string from the day
folder is HTML-escaped.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import math
import os
import re
import statistics
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nightly.errors import NightlyError, UsageError
from nightly.workspace import FAILED, INTERRUPTED, PENDING, RUNNING, SUCCEEDED, Day, atomic_write

if TYPE_CHECKING:
    from rich.console import Console

    from nightly.history import History

REPORT_NAME = "report.html"
TREND_NIGHTS = 30
REGRESSION = 0.20  # more than 20% slower or larger than the build's median is a regression
# A duration regression must also be this many seconds: a 2 s build taking 3 s is noise.
MIN_SLOWER_S = 10.0
HTML_TAIL = 30

# Failures first, then what is still going on, then the good ones.
_ORDER = {FAILED: 0, INTERRUPTED: 1, RUNNING: 2, PENDING: 3, SUCCEEDED: 4}
_FOOTER_SEP = "=" * 78
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]|\x1b\[[0-9;?]*[A-Za-z]")


# ---------------------------------------------------------------------------- the day's data


@dataclass(kw_only=True)
class BuildView:
    """One build of the day as the status and the report show it."""

    id: str
    status: str
    reason: str | None = None
    exit_status: int | None = None
    attempts: int = 0
    machine: str = ""
    queue: int | None = None
    executor: str = ""
    started: float | None = None
    ended: float | None = None
    duration_s: float | None = None
    estimate_s: float | None = None
    files: list[tuple[str, int]] = field(default_factory=list)
    published: int = 0
    upload_error: str | None = None
    log: Path | None = None  # absolute
    # trends (previous nights, oldest first) and the verdicts against their medians
    past_durations: list[float] = field(default_factory=list)
    past_sizes: list[int] = field(default_factory=list)
    slower: float | None = None  # tonight / median - 1, when a regression
    larger: float | None = None

    @property
    def size(self) -> int:
        return sum(s for _, s in self.files)

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
    meta: dict[str, Any]
    summary: dict[str, Any]
    builds: list[BuildView]

    def counts(self) -> dict[str, int]:
        c = {s: 0 for s in (SUCCEEDED, FAILED, INTERRUPTED, RUNNING, PENDING)}
        for b in self.builds:
            c[b.status] = c.get(b.status, 0) + 1
        c["total"] = len(self.builds)
        c["regressions"] = sum(1 for b in self.builds if b.slower or b.larger)
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
    try:
        state = json.loads(day.state_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise NightlyError(f"{day.state_path} is unreadable: {err}") from err
    summary = _read_json(day.summary_path)
    if plan is None:
        plan = _read_json(day.master / "plan.json")
    meta = dict(state.get("meta") or {})
    entries: dict[str, Any] = dict(state.get("builds") or {})
    planned = {
        str(b.get("id")): b for b in (plan or {}).get("builds", []) if isinstance(b, Mapping)
    }
    est_summary = {
        bid: b.get("estimate_s")
        for bid, b in (summary.get("builds") or {}).items()
        if isinstance(b, Mapping)
    }
    # The night's builds: what state.json knows, plus what summary.json lists (never started).
    ids = list(entries)
    ids += [i for i in (summary.get("builds") or {}) if i not in entries]
    views = []
    for bid in ids:
        e: dict[str, Any] = entries.get(bid) or {}
        pb: Mapping[str, Any] = planned.get(bid) or {}
        est = est_summary.get(bid)
        if est is None:
            est = pb.get("estimate_s")
        status = str(e.get("status") or PENDING)
        started, ended = _opt_float(e.get("started")), _opt_float(e.get("ended"))
        duration = _opt_float(e.get("duration_s"))
        if started is not None and ended is None and status != RUNNING:
            # Left 'running' by a run that died (now interrupted): it ended when last heard of.
            ended = started + duration if duration is not None else _opt_float(e.get("updated"))
            if ended is not None and duration is None:
                duration = max(0.0, ended - started)
        files = [
            (str(p.get("name")), int(p.get("size") or 0))
            for p in e.get("packages") or []
            if isinstance(p, Mapping)
        ]
        views.append(
            BuildView(
                id=str(bid),
                status=status,
                reason=_opt_str(e.get("reason")),
                exit_status=_opt_int(e.get("exit_status")),
                attempts=int(e.get("attempts") or 0),
                machine=str(e.get("machine") or pb.get("machine") or summary.get("machine") or ""),
                queue=_opt_int(e.get("queue") if e.get("queue") is not None else pb.get("queue")),
                executor=str(e.get("executor") or ""),
                started=started,
                ended=ended,
                duration_s=duration,
                estimate_s=_opt_float(est),
                files=files,
                published=len(e.get("published") or {}),
                upload_error=_opt_str(e.get("upload_error")),
                log=find_log(day, str(bid), e.get("log")),
            )
        )
    if history is not None:
        starts = [v.started for v in views if v.started is not None]
        until = min(starts) if starts else None
        for v in views:
            past = history.trend(v.id, nights, before=day.name, until=until)
            v.past_durations = [d for _, d, _ in past]
            v.past_sizes = [s for _, _, s in past if s]
            _judge(v)
    views.sort(key=lambda v: (_ORDER.get(v.status, 5), v.id))
    return NightView(day=day, meta=meta, summary=summary, builds=views)


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
    """The build's log: where state.json says, else failed/, succeeded/, the running log."""
    candidates = []
    if isinstance(recorded, str) and recorded:
        p = Path(recorded)
        candidates.append(p if p.is_absolute() else day.path / p)
    candidates += [
        day.failed / f"{build_id}.log",
        day.succeeded / f"{build_id}.log",
        day.running_log(build_id),
    ]
    for p in candidates:
        if p.is_file():
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
    cleaned = [_CONTROL_RE.sub("", line.rsplit("\r", 1)[-1]) for line in out]
    return cleaned[-lines:]


# ---------------------------------------------------------------------------- formatting


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
    if not n:
        return "-"
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def clock(t: float | None) -> str:
    return "-" if t is None else dt.datetime.fromtimestamp(t).strftime("%H:%M:%S")


def _outcome_text(b: BuildView) -> str:
    return b.status + (f": {b.reason}" if b.reason and b.status != SUCCEEDED else "")


# ---------------------------------------------------------------------------- the terminal


def status(
    day: Day,
    *,
    tail: int = 15,
    history: History | None = None,
    console: Console | None = None,
) -> int:
    """Print the day's builds (state, outcome, duration, size), failures first, then the tail
    of each failed (or running) build's log. Returns 1 when a build failed or was interrupted,
    else 0."""
    from rich.console import Console
    from rich.markup import escape
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    con = console or Console()
    night = load_night(day, history)
    c = night.counts()
    meta = night.meta
    head = f"[bold]{escape(day.name)}[/bold]"
    if meta.get("version"):
        head += f"  version {escape(str(meta['version']))}"
    if meta.get("channel"):
        head += f"  channel {escape(str(meta['channel']))}"
    if meta.get("commit"):
        head += f"  commit {escape(str(meta['commit'])[:12])}"
    con.print(head)
    parts = [f"{c['total']} builds", f"[green]{c[SUCCEEDED]} succeeded[/green]"]
    if c[FAILED]:
        parts.append(f"[red]{c[FAILED]} failed[/red]")
    if c[INTERRUPTED]:
        parts.append(f"[red]{c[INTERRUPTED]} interrupted[/red]")
    if c[RUNNING]:
        parts.append(f"[yellow]{c[RUNNING]} running[/yellow]")
    if c[PENDING]:
        parts.append(f"{c[PENDING]} pending")
    if c["regressions"]:
        n = c["regressions"]
        parts.append(f"[magenta]{n} regression{'s' if n != 1 else ''}[/magenta]")
    con.print(", ".join(parts))

    t = Table(title_justify="left")
    t.add_column("build", no_wrap=True)
    t.add_column("outcome", overflow="fold", min_width=12, ratio=1)
    t.add_column("queue", justify="right", no_wrap=True)
    t.add_column("duration", justify="right", no_wrap=True)
    t.add_column("size", justify="right", no_wrap=True)
    retried = any(b.attempts > 1 for b in night.builds)
    if retried:
        t.add_column("tries", justify="right", no_wrap=True)
    styles = {SUCCEEDED: "green", FAILED: "red", INTERRUPTED: "red", RUNNING: "yellow"}
    for b in night.builds:
        style = styles.get(b.status, "dim")
        where = (f"{b.machine}/" if b.machine else "") + ("" if b.queue is None else str(b.queue))
        dur = took(b.elapsed_s) + (" (running)" if b.status == RUNNING else "")
        if b.slower:
            dur += f" [magenta]+{b.slower:.0%}[/magenta]"
        size = human_size(b.size)
        if b.larger:
            size += f" [magenta]+{b.larger:.0%}[/magenta]"
        outcome = f"[{style}]{escape(b.status)}[/{style}]"
        if b.reason and b.status != SUCCEEDED:
            outcome += f": {escape(b.reason)}"
        if b.upload_error:
            outcome += f" [red](upload failed: {escape(b.upload_error)})[/red]"
        t.add_row(
            escape(b.id),
            outcome,
            escape(where or "-"),
            dur,
            size,
            *([str(b.attempts or "-")] if retried else []),
        )
    con.print(t)

    for b in night.builds:
        if not (b.bad or b.status == RUNNING) or tail <= 0:
            continue
        lines = log_tail(b.log, tail)
        where = str(b.log.relative_to(day.path)) if b.log else "no log"
        title = f"{b.id}: {_outcome_text(b)}"
        if b.exit_status is not None:
            title += f" (exit status {b.exit_status})"
        body = Text("\n".join(lines) if lines else "(the log is empty)")
        con.print(
            Panel(
                body,
                title=Text(title),
                subtitle=Text(f"last {len(lines)} lines of {where}"),
                border_style="red" if b.bad else "yellow",
                title_align="left",
                subtitle_align="right",
            )
        )
    return 1 if c[FAILED] or c[INTERRUPTED] else 0


# ---------------------------------------------------------------------------- the HTML page


def esc(value: object) -> str:
    """HTML-escape text for an element or a quoted attribute. '://' is written ':&#47;&#47;'
    (the same text in a browser) so no URL-looking reference is ever in the page's source."""
    return html.escape(str(value), quote=True).replace("://", ":&#47;&#47;")


def href(link_base: str, relative: str) -> str:
    """A relative link from the report to a file of the day folder, URL-quoted and escaped."""
    path = (link_base.rstrip("/") + "/" if link_base else "") + relative
    return esc(urllib.parse.quote(path, safe="/"))


_CSS = """
:root { --ok:#2e9d57; --bad:#d64545; --int:#e08a1e; --run:#3b7dd8; --pend:#9aa3ad;
  --reg:#b02ecf; --fg:#1d2329; --muted:#5f6b76; --line:#dde2e7; --bg:#fff; --panel:#f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1360px; padding: 18px 22px 40px; color: var(--fg);
  background: var(--bg); font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 26px 0 10px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 15px; margin: 14px 0 6px; }
code, pre, .mono { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace;
  font-size: 12.5px; }
.meta { color: var(--muted); margin: 2px 0; }
.meta b { color: var(--fg); font-weight: 600; }
.counts { display: flex; gap: 10px; flex-wrap: wrap; margin-top: 12px; }
.count { border: 1px solid var(--line); border-radius: 6px; padding: 6px 14px; background: var(--panel);
  min-width: 96px; }
.count b { display: block; font-size: 22px; }
.count.succeeded b { color: var(--ok); } .count.failed b, .count.interrupted b { color: var(--bad); }
.count.running b { color: var(--run); } .count.regressions b { color: var(--reg); }
.machine { margin: 8px 0 18px; }
.gantt { border: 1px solid var(--line); border-radius: 6px; padding: 4px 10px 8px; background: var(--panel); }
.lane { display: flex; align-items: center; height: 30px; }
.lane-label { width: 110px; flex: none; color: var(--muted); font-size: 12.5px; white-space: nowrap; }
.track { position: relative; flex: 1; height: 24px; background: var(--bg); border-radius: 3px; }
.axis .track { background: transparent; height: 18px; }
.tick { position: absolute; top: 0; font-size: 11px; color: var(--muted); transform: translateX(-50%);
  white-space: nowrap; }
.grid { position: absolute; top: 0; bottom: 0; border-left: 1px dashed var(--line); }
.bar { position: absolute; top: 2px; height: 20px; border-radius: 3px; color: #fff; font-size: 11.5px;
  line-height: 20px; padding: 0 5px; overflow: hidden; white-space: nowrap; text-overflow: ellipsis;
  min-width: 5px; border: 1px solid rgba(0,0,0,.18); text-decoration: none; }
.bar.succeeded { background: var(--ok); } .bar.failed { background: var(--bad); }
.bar.interrupted { background: var(--int); } .bar.running { background: var(--run);
  background-image: repeating-linear-gradient(45deg, rgba(255,255,255,.18) 0 6px, transparent 6px 12px); }
.bar.regression { box-shadow: inset 0 0 0 2px var(--reg); }
.legend { display: flex; gap: 14px; color: var(--muted); font-size: 12.5px; margin: 4px 0 6px; }
.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 2px; vertical-align: -1px;
  margin-right: 4px; }
.failure { border: 1px solid #f0c7c7; border-left: 4px solid var(--bad); border-radius: 6px;
  padding: 6px 12px 8px; margin: 10px 0; background: #fff8f8; }
.failure.interrupted { border-left-color: var(--int); }
.failure h3 { margin: 4px 0; }
.failure .why { margin: 2px 0 6px; }
/* column-reverse: the box opens scrolled to its end, where the error is (no script needed) */
pre.tail { background: #1f2428; color: #e6e6e6; padding: 8px 10px; border-radius: 4px; margin: 6px 0 2px;
  white-space: pre-wrap; overflow-wrap: anywhere; max-height: 300px; overflow: auto;
  display: flex; flex-direction: column-reverse; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); vertical-align: middle; }
th { font-weight: 600; color: var(--muted); font-size: 12.5px; background: var(--panel); }
td.num, th.num { text-align: right; white-space: nowrap; }
tr.regression td { background: #fbf1fd; }
.worse { color: var(--reg); font-weight: 700; }
.st { display: inline-block; padding: 0 7px; border-radius: 9px; color: #fff; font-size: 12px; }
.st.succeeded { background: var(--ok); } .st.failed { background: var(--bad); }
.st.interrupted { background: var(--int); } .st.running { background: var(--run); }
.st.pending { background: var(--pend); }
.spark { vertical-align: middle; }
.muted { color: var(--muted); }
.small { font-size: 12px; } .nowrap { white-space: nowrap; } td.outcome { max-width: 260px; }
details summary { cursor: pointer; color: var(--muted); white-space: nowrap; }
footer { margin-top: 30px; color: var(--muted); font-size: 12px; }
"""

_COLORS = {SUCCEEDED: "var(--ok)", FAILED: "var(--bad)", INTERRUPTED: "var(--int)",
           RUNNING: "var(--run)"}  # fmt: skip


def render_html(
    day: Day,
    history: History | None,
    *,
    plan: dict[str, Any] | None = None,
    link_base: str = "",
    tail: int = HTML_TAIL,
    now: float | None = None,
) -> str:
    """The night as one self-contained HTML page. Links to logs are relative to `link_base`
    (the day folder as seen from where the page is written: "" for ROOT/DAY/report.html)."""
    night = load_night(day, history, plan=plan)
    now = time.time() if now is None else now
    meta, summary = night.meta, night.summary
    c = night.counts()
    project = str(summary.get("project") or meta.get("project") or "")
    title = f"nightly {day.name}" + (f" · {project}" if project else "")
    out: list[str] = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        # Belt and braces: even if something slipped in, the browser may fetch nothing.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "style-src 'unsafe-inline'; img-src data:\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="generator" content="nightly">',
        f"<title>{esc(title)}</title>",
        f"<style>{_CSS}</style>",
        "</head><body>",
        '<header id="top">',
        f"<h1>Night {esc(day.name)}</h1>",
    ]
    facts = []
    for label, key in (("version", "version"), ("channel", "channel")):
        if meta.get(key) or summary.get(key):
            facts.append(f"{label} <b>{esc(meta.get(key) or summary.get(key))}</b>")
    commit = str(meta.get("commit") or summary.get("commit") or "")
    if commit:
        facts.append(f'commit <b class="mono" id="commit" title="{esc(commit)}">{esc(commit[:12])}</b>')
    source = str(meta.get("source") or summary.get("source") or "")
    if source and source != commit:
        facts.append(f"source {esc(source)}")
    if facts:
        out.append(f'<p class="meta">{" · ".join(facts)}</p>')
    times = []
    if summary.get("machine"):
        times.append(f"machine <b>{esc(summary['machine'])}</b>")
    starts = [b.started for b in night.builds if b.started is not None]
    ends = [b.ended if b.ended is not None else now for b in night.builds if b.started is not None]
    if starts:
        times.append(f"first build {esc(clock(min(starts)))}, last end {esc(clock(max(ends)))}")
    if summary.get("duration_s") is not None:
        wall = f"wall time <b>{esc(took(float(summary['duration_s'])))}</b>"
        if summary.get("estimated_makespan_s"):
            wall += f" (estimated {esc(took(float(summary['estimated_makespan_s'])))})"
        times.append(wall)
    if times:
        out.append(f'<p class="meta">{" · ".join(times)}</p>')
    if summary.get("publish_error"):
        out.append(f'<p class="meta worse">publish error: {esc(summary["publish_error"])}</p>')
    out.append('<div class="counts" id="counts">')
    for key, label in (("total", "builds"), (SUCCEEDED, "succeeded"), (FAILED, "failed"),
                       (INTERRUPTED, "interrupted"), (RUNNING, "running"), (PENDING, "pending"),
                       ("regressions", "regressions")):  # fmt: skip
        if key in ("total", SUCCEEDED, FAILED) or c.get(key):
            out.append(
                f'<div class="count {esc(key)}" data-count="{esc(key)}"><b>{c.get(key, 0)}</b>'
                f"{esc(label)}</div>"
            )
    out.append("</div></header>")

    out += _gantt(night, now)
    out += _failures(night, link_base, tail)
    out += _table(night, link_base, history is not None)
    generated = dt.datetime.fromtimestamp(now).astimezone().isoformat(timespec="seconds")
    out.append(
        f"<footer>Generated {esc(generated)} by nightly from {esc(day.name)}/state.json"
        + (" and the build history" if history is not None else "")
        + ". Regression: a build more than "
        + f"{REGRESSION:.0%} slower (and at least {MIN_SLOWER_S:g} s) or larger than its median"
        + f" over the previous {TREND_NIGHTS} nights.</footer>"
    )
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _gantt(night: NightView, now: float) -> list[str]:
    ran = [b for b in night.builds if b.started is not None]
    out = ['<section id="timeline"><h2>Timeline</h2>']
    if not ran:
        out.append('<p class="muted">No build has started.</p></section>')
        return out
    t0 = min(b.started for b in ran if b.started is not None)
    t1 = max((b.ended if b.ended is not None and b.status != RUNNING else now) for b in ran)
    span = max(t1 - t0, 1.0)
    tz = dt.datetime.fromtimestamp(t0).astimezone().tzname() or ""
    out.append('<div class="legend">')
    for st in (SUCCEEDED, FAILED, INTERRUPTED, RUNNING):
        out.append(f'<span><i class="swatch" style="background:{_COLORS[st]}"></i>{esc(st)}</span>')
    out.append(
        '<span><i class="swatch" style="box-shadow:inset 0 0 0 2px var(--reg)"></i>regression</span>'
        f"<span>times: {esc(tz)}</span></div>"
    )
    ticks = _ticks(t0, t1)
    lanes: dict[tuple[str, int], list[BuildView]] = {}
    for b in ran:
        lanes.setdefault((b.machine, b.queue if b.queue is not None else -1), []).append(b)
    machines = sorted({m for m, _ in lanes})
    for machine in machines:
        label = f"machine {machine}" if machine else "this machine"
        out.append(f'<div class="machine" data-machine="{esc(machine)}"><h3>{esc(label)}</h3>')
        out.append('<div class="gantt">')
        out.append('<div class="lane axis"><div class="lane-label"></div><div class="track">')
        for t in ticks:
            out.append(
                f'<span class="tick" style="left:{_pct(t - t0, span)}">{esc(_tick_label(t, span))}</span>'
            )
        out.append("</div></div>")
        for (m, q), items in sorted(lanes.items()):
            if m != machine:
                continue
            qlabel = f"queue {q}" if q >= 0 else "queue ?"
            out.append(f'<div class="lane" data-queue="{q}"><div class="lane-label">{esc(qlabel)}</div>')
            out.append('<div class="track">')
            for t in ticks:
                out.append(f'<i class="grid" style="left:{_pct(t - t0, span)}"></i>')
            for b in sorted(items, key=lambda b: (b.started or 0, b.id)):
                start = b.started or t0
                end = b.ended if b.ended is not None and b.status != RUNNING else now
                end = max(end, start)
                cls = f"bar {b.status}" + (" regression" if b.slower or b.larger else "")
                tip = (
                    f"{b.id}: {_outcome_text(b)}\n{clock(start)} – {clock(end)} "
                    f"({took(end - start)})"
                )
                if b.estimate_s:
                    tip += f", estimated {took(b.estimate_s)}"
                if b.size:
                    tip += f"\n{human_size(b.size)}"
                out.append(
                    f'<div class="{esc(cls)}" data-build="{esc(b.id)}" data-status="{esc(b.status)}" '
                    f'style="left:{_pct(start - t0, span)};width:{_pct(end - start, span)}" '
                    f'title="{esc(tip)}">{esc(b.id)}</div>'
                )
            out.append("</div></div>")
        out.append("</div></div>")
    out.append("</section>")
    return out


def _pct(x: float, span: float) -> str:
    return f"{max(0.0, min(100.0, 100.0 * x / span)):.3f}%"


_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200)


def _ticks(t0: float, t1: float, most: int = 10) -> list[float]:
    span = max(t1 - t0, 1.0)
    step = next((s for s in _STEPS if span / s <= most), 86400)
    first = math.ceil(t0 / step) * step
    out = []
    t = float(first)
    while t <= t1 + 1e-9:
        out.append(t)
        t += step
    return out


def _tick_label(t: float, span: float) -> str:
    fmt = "%H:%M:%S" if span < 600 else "%H:%M"
    return dt.datetime.fromtimestamp(t).strftime(fmt)


def _failures(night: NightView, link_base: str, tail: int) -> list[str]:
    bad = [b for b in night.builds if b.bad or b.upload_error]
    out = ['<section id="failures">', f"<h2>Failures ({len(bad)})</h2>"]
    if not bad:
        out.append('<p class="muted">No build failed.</p></section>')
        return out
    for b in bad:
        cls = "failure interrupted" if b.status == INTERRUPTED else "failure"
        out.append(f'<div class="{cls}" data-failure="{esc(b.id)}" id="fail-{esc(b.id)}">')
        out.append(f'<h3><span class="st {esc(b.status)}">{esc(b.status)}</span> {esc(b.id)}</h3>')
        why = []
        if b.reason:
            why.append(f"reason: <b>{esc(b.reason)}</b>")
        if b.upload_error:
            why.append(f"upload failed: <b>{esc(b.upload_error)}</b>")
        if b.exit_status is not None:
            why.append(f"exit status {esc(b.exit_status)}")
        if b.attempts:
            why.append(f"{b.attempts} attempt{'s' if b.attempts != 1 else ''}")
        if b.elapsed_s is not None:
            why.append(f"after {esc(took(b.elapsed_s))}")
        if b.machine or b.queue is not None:
            why.append(f"on {esc(b.machine or '?')} queue {esc(b.queue if b.queue is not None else '?')}")
        out.append(f'<p class="why">{" · ".join(why)}</p>')
        if b.log is not None:
            rel = b.log.relative_to(night.day.path).as_posix()
            lines = log_tail(b.log, tail)
            out.append(
                f'<p><a class="log" href="{href(link_base, rel)}">full log: {esc(rel)}</a>'
                f' <span class="muted">(last {len(lines)} lines below)</span></p>'
            )
            out.append(f'<pre class="tail"><code>{esc(chr(10).join(lines)) or "(empty)"}</code></pre>')
        else:
            out.append('<p class="muted">no log was found for this build</p>')
        out.append("</div>")
    out.append("</section>")
    return out


def _table(night: NightView, link_base: str, with_history: bool) -> list[str]:
    out = ['<section id="builds">', "<h2>Builds</h2>"]
    if with_history:
        regs = [b for b in night.builds if b.slower or b.larger]
        if regs:
            items = []
            for b in regs:
                what = []
                if b.slower:
                    what.append(
                        f"{b.slower:+.0%} duration ({took(b.duration_s)} vs median "
                        f"{took(b.median_duration)})"
                    )
                if b.larger:
                    what.append(
                        f"{b.larger:+.0%} size ({human_size(b.size)} vs median "
                        f"{human_size(b.median_size)})"
                    )
                items.append(
                    f'<li data-regression="{esc(b.id)}"><b>{esc(b.id)}</b>: {esc(", ".join(what))}</li>'
                )
            out.append(
                f'<p class="worse">Regressions ({len(regs)}):</p><ul id="regressions">{"".join(items)}</ul>'
            )
    with_estimates = any(b.estimate_s for b in night.builds)
    cols: list[tuple[str, str]] = [("build", ""), ("outcome", ""), ("queue", ""), ("started", "num"),
                                   ("duration", "num")]  # fmt: skip
    if with_estimates:
        cols.append(("estimate", "num"))
    if with_history:
        cols.append((f"duration, last {TREND_NIGHTS} nights", ""))
    cols.append(("size", "num"))
    if with_history:
        cols.append((f"size, last {TREND_NIGHTS} nights", ""))
    cols += [("files", ""), ("tries", "num"), ("log", "")]
    out.append('<div class="scroll"><table><thead><tr>')
    out += [f'<th class="{c}">{esc(name)}</th>' for name, c in cols]
    out.append("</tr></thead><tbody>")
    for b in night.builds:
        reg = b.slower or b.larger
        out.append(f'<tr data-row="{esc(b.id)}"' + (' class="regression">' if reg else ">"))
        out.append(f'<td class="mono">{esc(b.id)}</td>')
        outcome = f'<span class="st {esc(b.status)}">{esc(b.status)}</span>'
        if b.reason and b.status != SUCCEEDED:
            outcome += f'<div class="small muted">{esc(b.reason)}</div>'
        if b.upload_error:
            outcome += f'<div class="small worse">upload failed: {esc(b.upload_error)}</div>'
        out.append(f'<td class="outcome">{outcome}</td>')
        where = f"{b.machine or '-'} / {b.queue if b.queue is not None else '-'}"
        out.append(f'<td class="nowrap">{esc(where)}</td>')
        out.append(f'<td class="num">{esc(clock(b.started))}</td>')
        dur = esc(took(b.elapsed_s))
        if b.slower:
            dur = f'<span class="worse" data-slower="{b.slower:.3f}">{dur} ▲{b.slower:+.0%}</span>'
        if b.median_duration is not None:
            dur += f'<div class="small muted">median {esc(took(b.median_duration))}</div>'
        out.append(f'<td class="num">{dur}</td>')
        if with_estimates:
            out.append(f'<td class="num">{esc(took(b.estimate_s))}</td>')
        if with_history:
            tonight_d = b.duration_s if b.status == SUCCEEDED else None
            out.append(f"<td>{sparkline(b.past_durations, tonight_d, bad=bool(b.slower), unit='s')}</td>")
        size = esc(human_size(b.size))
        if b.larger:
            size = f'<span class="worse" data-larger="{b.larger:.3f}">{size} ▲{b.larger:+.0%}</span>'
        if b.median_size is not None:
            size += f'<div class="small muted">median {esc(human_size(b.median_size))}</div>'
        out.append(f'<td class="num">{size}</td>')
        if with_history:
            tonight_s = float(b.size) if b.status == SUCCEEDED and b.size else None
            past_sizes = [float(s) for s in b.past_sizes]
            out.append(f"<td>{sparkline(past_sizes, tonight_s, bad=bool(b.larger), unit='B')}</td>")
        if b.files:
            listing = "".join(
                f'<div class="mono small">{esc(n)} <span class="muted">{esc(human_size(sz))}</span></div>'
                for n, sz in b.files
            )
            n = len(b.files)
            out.append(
                f"<td><details><summary>{n} file{'s' if n != 1 else ''}</summary>{listing}</details></td>"
            )
        else:
            out.append("<td>-</td>")
        out.append(f'<td class="num">{b.attempts or "-"}</td>')
        if b.log is not None:
            rel = b.log.relative_to(night.day.path).as_posix()
            out.append(f'<td><a href="{href(link_base, rel)}">log</a></td>')
        else:
            out.append("<td>-</td>")
        out.append("</tr>")
    out.append("</tbody></table></div></section>")
    return out


def sparkline(
    past: Sequence[float],
    tonight: float | None,
    *,
    bad: bool = False,
    unit: str = "",
    width: int = 130,
    height: int = 26,
) -> str:
    """An inline SVG line of the previous nights' values and tonight's (the last point, red
    when a regression), with the median as a dashed line. Empty cell text without data."""
    values = [*past, *([tonight] if tonight is not None else [])]
    if not values:
        return '<span class="muted">no history</span>'
    # From zero: a 30% jump looks like one, a few seconds of noise like nothing.
    lo, hi = min(0.0, min(values)), max(values) * 1.08
    if hi - lo < 1e-9:
        hi = lo + 1
    pad = 3.0
    n = len(values)

    def xy(i: int, v: float) -> tuple[float, float]:
        x = pad + (width - 2 * pad) * (i / (n - 1) if n > 1 else 0.5)
        y = pad + (height - 2 * pad) * (1 - (v - lo) / (hi - lo))
        return x, y

    pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(i, v) for i, v in enumerate(values)))
    med = statistics.median(past) if past else None
    fmt = took if unit == "s" else human_size
    tip = f"{len(past)} previous nights"
    if med is not None:
        tip += f", median {fmt(med)}, min {fmt(min(past))}, max {fmt(max(past))}"
    if tonight is not None:
        tip += f"; tonight {fmt(tonight)}"
    parts = [
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{esc(tip)}"><title>{esc(tip)}</title>'
    ]
    if med is not None:
        _, my = xy(0, med)
        parts.append(
            f'<line x1="{pad}" x2="{width - pad}" y1="{my:.1f}" y2="{my:.1f}" '
            'stroke="#9aa3ad" stroke-dasharray="3 3" stroke-width="1"/>'
        )
    if n > 1:
        parts.append(
            f'<polyline points="{pts}" fill="none" stroke="#3b7dd8" stroke-width="1.5"/>'
        )
    lx, ly = xy(n - 1, values[-1])
    color = "#b02ecf" if bad else ("#2e9d57" if tonight is not None else "#3b7dd8")
    parts.append(f'<circle cx="{lx:.1f}" cy="{ly:.1f}" r="2.8" fill="{color}"/></svg>')
    return "".join(parts)


def write_report(
    day: Day,
    history: History | None,
    out: Path | None = None,
    *,
    plan: dict[str, Any] | None = None,
) -> Path:
    """Write ROOT/DAY/report.html (and `out`, with its log links made relative to where it
    is), each atomically. Returns the day folder's report path."""
    now = time.time()
    page = render_html(day, history, plan=plan, now=now)
    target = day.path / REPORT_NAME
    atomic_write(target, page.encode("utf-8"))
    if out is not None:
        out = out.resolve()
        if out != target.resolve():
            base = os.path.relpath(day.path.resolve(), out.parent).replace(os.sep, "/")
            other = render_html(day, history, plan=plan, now=now, link_base="" if base == "." else base)
            atomic_write(out, other.encode("utf-8"))
    return target


# ---------------------------------------------------------------------------- helpers


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _opt_str(v: object) -> str | None:
    return None if v is None else str(v)


def _opt_int(v: object) -> int | None:
    try:
        return None if v is None or v == "" else int(v)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


def _opt_float(v: object) -> float | None:
    try:
        return None if v is None or v == "" else float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
