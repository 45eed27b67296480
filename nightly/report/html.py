"""`nightly report`: the night as one static HTML page (ROOT/DAY/report.html).

It reads the day folder (and the history's previous nights, for trends) through nightview.py;
the page's sections are in report_parts.py. The page is self-contained: inline CSS, bars as
positioned divs, sparklines as inline SVG, no script, and a Content-Security-Policy that forbids
every request the page could make (links to the logs are relative and only followed when
clicked). Every string from the day folder is HTML-escaped.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from nightly.format import clock, took
from nightly.report.sections import builds_table, esc, failures, timeline
from nightly.report.triage import report_section as failure_groups
from nightly.report.view import MIN_SLOWER_S, REGRESSION, TREND_NIGHTS, NightView, load_night
from nightly.workspace import FAILED, INTERRUPTED, PENDING, RUNNING, SUCCEEDED, Day, atomic_write

if TYPE_CHECKING:
    from nightly.history.db import History
    from nightly.workspace.state import DayMeta
    from nightly.workspace.summary import Summary

REPORT_NAME = "report.html"
HTML_TAIL = 30

_CSS = """
:root { --ok:#2e9d57; --bad:#d64545; --int:#e08a1e; --run:#3b7dd8; --pend:#9aa3ad;
  --reg:#b02ecf; --man:#0b7a8a; --fg:#1d2329; --muted:#5f6b76; --line:#dde2e7; --bg:#fff; --panel:#f6f8fa; }
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
.count.succeeded b { color: var(--ok); }
.count.failed b, .count.interrupted b, .count.not_published b { color: var(--bad); }
.count.running b { color: var(--run); } .count.regressions b { color: var(--reg); }
.count.manual b, .manual { color: var(--man); }
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
.bar.lost { border-right: 3px dashed #000; opacity: .8; } /* cut off: its worker was lost */
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


def render_html(
    day: Day,
    history: History | None,
    *,
    plan: dict[str, object] | None = None,
    link_base: str = "",
    tail: int = HTML_TAIL,
    now: float | None = None,
    notes: Sequence[str] = (),
) -> str:
    """The night as one self-contained HTML page. Links to logs are relative to `link_base`
    (the day folder as seen from where the page is written: "" for ROOT/DAY/report.html)."""
    night = load_night(day, history, plan=plan)
    now = time.time() if now is None else now
    meta, summary = night.meta, night.summary
    c = night.counts()
    project = str(summary.extra.get("project") or meta.project or "")
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
    out += _facts(night, now)
    out += [f'<p class="meta published-note">{esc(n)}</p>' for n in notes]  # the published copy's
    out.append('<div class="counts" id="counts">')
    for key, label in (("total", "builds"), (SUCCEEDED, "succeeded"), ("published", "published"),
                       ("not_published", "not published"), (FAILED, "failed"),
                       (INTERRUPTED, "interrupted"), (RUNNING, "running"), (PENDING, "pending"),
                       ("regressions", "regressions"), ("manual", "manual builds")):  # fmt: skip
        if key in ("total", SUCCEEDED, FAILED) or c.get(key):
            out.append(
                f'<div class="count {esc(key)}" data-count="{esc(key)}"><b>{c.get(key, 0)}</b>'
                f"{esc(label)}</div>"
            )
    out.append("</div></header>")

    out += failure_groups(night, history, link_base)  # failures first, grouped by signature
    out += timeline(night, now)
    out += failures(night, link_base, tail)
    out += builds_table(night, link_base, history is not None)
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


def _wall_s(meta: DayMeta, summary: Summary, now: float) -> float | None:
    """The wall time of the run the report is about: summary.json's when it is that run's
    (its start is the run's), else (the report written during the run, before its summary)
    the run's time so far; never an earlier run's summary."""
    started, duration = meta.run_started, summary.duration_s
    try:
        summary_started: float | None = dt.datetime.fromisoformat(summary.started).timestamp()
    except ValueError:
        summary_started = None
    if duration is not None and (started is None or (
            summary_started is not None and abs(summary_started - started) < 2)):
        return float(duration)
    return max(0.0, now - started) if started is not None else None


def _facts(night: NightView, now: float) -> list[str]:
    """The header's lines under the title: version, channel, commit; machine and times."""
    meta, summary = night.meta, night.summary
    out: list[str] = []
    facts = []
    for label, value in (("version", meta.version or summary.version),
                         ("channel", meta.channel or summary.channel)):
        if value:
            facts.append(f"{label} <b>{esc(value)}</b>")
    commit = meta.commit or summary.commit or ""
    if commit:
        facts.append(f'commit <b class="mono" id="commit" title="{esc(commit)}">{esc(commit[:12])}</b>')
    source = meta.source or summary.source
    if source and source != commit:
        facts.append(f"source {esc(source)}")
    if facts:
        out.append(f'<p class="meta">{" · ".join(facts)}</p>')
    times = []
    if summary.machine:
        times.append(f"machine <b>{esc(summary.machine)}</b>")
    starts = [b.started for b in night.builds if b.started is not None]
    ends = [b.ended if b.ended is not None else now for b in night.builds if b.started is not None]
    if starts:
        times.append(f"first build {esc(clock(min(starts)))}, last end {esc(clock(max(ends)))}")
    wall_s = _wall_s(meta, summary, now)
    if wall_s is not None:
        wall = f'wall time <b id="wall-time">{esc(took(wall_s))}</b>'
        if summary.estimated_makespan_s:
            wall += f" (estimated {esc(took(summary.estimated_makespan_s))})"
        times.append(wall)
    tested = [b for b in night.builds if b.test_s is not None]
    if tested:
        total, gpu = sum(b.test_s or 0 for b in tested), sum(b.gpu_test_s for b in tested)
        times.append(f"tests <b>{esc(took(total))}</b> (GPU hosts <b id=\"gpu-test-s\">"
                     f"{esc(took(gpu))}</b>)")
    if times:
        out.append(f'<p class="meta">{" · ".join(times)}</p>')
    if summary.publish_error:
        out.append(f'<p class="meta worse">publish error: {esc(summary.publish_error)}</p>')
    # state.json's meta first: the report is written before the night's summary.json.
    held = meta.held_back if meta.held_back is not None else summary.held_back
    if held:
        rows = "".join(f"<li><b>{esc(bid)}</b>: {esc(why)}</li>" for bid, why in sorted(held.items()))
        out.append(f'<div class="meta worse" id="held-back">held back, not published '
                   f'(<code>nightly upload --force-partial</code> publishes them):<ul>{rows}</ul></div>')
    return out


def write_report(
    day: Day,
    history: History | None,
    out: Path | None = None,
    *,
    plan: dict[str, object] | None = None,
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
