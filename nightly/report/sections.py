"""The sections of the HTML report (report.py): the timeline, the failures with their log
tails, the table of builds with sparklines. Every string from the day folder is escaped with
`esc`; links to logs are relative (`href`)."""

from __future__ import annotations

import datetime as dt
import html
import math
import statistics
import urllib.parse
from collections.abc import Sequence

from nightly.builds.cache.wiring import night_total
from nightly.core.manylinux import describe
from nightly.format import clock, human_size, shown, took
from nightly.report.view import (
    TREND_NIGHTS,
    BuildView,
    LostAttempt,
    NightView,
    axes_text,
    log_tail,
    lost_text,
    manual_text,
    outcome_text,
)
from nightly.workspace import FAILED, INTERRUPTED, LOST_GPU_TEST, RUNNING, SUCCEEDED
from nightly.workspace.pythontests import results_text


def esc(value: object) -> str:
    """HTML-escape text for an element or a quoted attribute. '://' is written ':&#47;&#47;'
    (the same text in a browser) so no URL-looking reference is ever in the page's source.
    What a build wrote is data first (nightly.format): html.escape keeps U+202E and the C1
    controls, which reorder or garble what a person reads."""
    return html.escape(shown(str(value)), quote=True).replace("://", ":&#47;&#47;")


def href(link_base: str, relative: str) -> str:
    """A relative link from the report to a file of the day folder, URL-quoted and escaped."""
    path = (link_base.rstrip("/") + "/" if link_base else "") + relative
    return esc(urllib.parse.quote(path, safe="/"))


_COLORS = {SUCCEEDED: "var(--ok)", FAILED: "var(--bad)", INTERRUPTED: "var(--int)",
           RUNNING: "var(--run)"}  # fmt: skip

def timeline(night: NightView, now: float) -> list[str]:
    ran = [b for b in night.builds if b.started is not None]
    out = ['<section id="timeline"><h2>Timeline</h2>']
    if not ran:
        out.append('<p class="muted">No build has started.</p></section>')
        return out
    lost = [(b, a) for b in ran for a in b.lost]
    t0 = min([*(b.started for b in ran if b.started is not None), *(a.started for _, a in lost)])
    t1 = max([*((b.ended if b.ended is not None and b.status != RUNNING else now) for b in ran),
              *(a.ended for _, a in lost)])
    span = max(t1 - t0, 1.0)
    tz = dt.datetime.fromtimestamp(t0).astimezone().tzname() or ""
    out.append('<div class="legend">')
    for st in (SUCCEEDED, FAILED, INTERRUPTED, RUNNING):
        out.append(f'<span><i class="swatch" style="background:{_COLORS[st]}"></i>{esc(st)}</span>')
    if lost:
        out.append('<span><i class="swatch" style="background:var(--int);border-right:3px dashed '
                   '#000"></i>lost with its worker</span>')
    out.append(
        '<span><i class="swatch" style="box-shadow:inset 0 0 0 2px var(--reg)"></i>regression</span>'
        f"<span>times: {esc(tz)}</span></div>"
    )
    ticks = _ticks(t0, t1)
    lanes: dict[tuple[str, int], list[BuildView]] = {}
    for b in ran:
        lanes.setdefault((b.machine, b.queue if b.queue is not None else -1), []).append(b)
    lost_on: dict[tuple[str, int], list[tuple[BuildView, LostAttempt]]] = {}
    for b, a in lost:  # on the lane of the worker that was lost
        lost_on.setdefault((a.worker, a.queue if a.queue is not None else -1), []).append((b, a))
        lanes.setdefault((a.worker, a.queue if a.queue is not None else -1), [])
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
                    f"{b.id}: {outcome_text(b)}\n{clock(start)} – {clock(end)} "
                    f"({took(end - start)})"
                )
                if b.estimate_s:
                    tip += f", estimated {took(b.estimate_s)}"
                if b.size:
                    tip += f"\n{human_size(b.size)}"
                if b.manual:
                    tip += f"\n{manual_text(b)}"
                    cls += " manual"
                out.append(
                    f'<div class="{esc(cls)}" data-build="{esc(b.id)}" data-status="{esc(b.status)}" '
                    f'style="left:{_pct(start - t0, span)};width:{_pct(end - start, span)}" '
                    f'title="{esc(tip)}">{esc(b.id)}</div>'
                )
            out.extend(_lost_bar(b, a, t0, span) for b, a in lost_on.get((m, q), []))
            out.append("</div></div>")
        out.append("</div></div>")
    out.append("</section>")
    return out


def _lost_bar(b: BuildView, a: LostAttempt, t0: float, span: float) -> str:
    """An attempt whose worker was lost (kill -9, a crash): an interrupted bar, cut off."""
    tip = (f"{b.id}: {a.what} lost with worker {a.worker} (ended without a result)"
           f"\n{clock(a.started)} – {clock(a.ended)} ({took(a.ended - a.started)})")
    label = f"{b.id}{' GPU test' if a.stage == LOST_GPU_TEST else ''} lost ({a.worker})"
    return (f'<div class="bar {INTERRUPTED} lost" data-build="{esc(b.id)}" data-status="lost" '
            f'data-worker="{esc(a.worker)}" data-stage="{esc(a.stage)}" '
            f'style="left:{_pct(a.started - t0, span)};width:{_pct(a.ended - a.started, span)}" '
            f'title="{esc(tip)}">{esc(label)}</div>')


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


def failures(night: NightView, link_base: str, tail: int) -> list[str]:
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
        if b.manual:
            why.append(f'<span class="manual">{esc(manual_text(b))}</span>')
        if b.upload_error:
            why.append(f"upload failed: <b>{esc(b.upload_error)}</b>")
        if b.exit_status is not None:
            why.append(f"exit status {esc(b.exit_status)}")
        if b.attempts:
            why.append(f"{b.attempts} attempt{'s' if b.attempts != 1 else ''}")
        if b.lost:
            why.append(esc(lost_text(b)))
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


def builds_table(night: NightView, link_base: str, with_history: bool) -> list[str]:
    out = ['<section id="builds">', "<h2>Builds</h2>"]
    if with_history:
        out += _regressions(night)
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
    with_cache = any(b.cache is not None for b in night.builds)
    if with_cache:
        out += cache_total(night)
        cols.append(("compiler cache", "num"))
    cols += [("files", ""), ("tries", "num"), ("log", "")]
    out.append('<div class="scroll"><table><thead><tr>')
    out += [f'<th class="{c}">{esc(name)}</th>' for name, c in cols]
    out.append("</tr></thead><tbody>")
    for b in night.builds:
        out += _row(b, night, link_base, with_history=with_history, with_estimates=with_estimates,
                    with_cache=with_cache)
    out.append("</tbody></table></div></section>")
    return out


def _regressions(night: NightView) -> list[str]:
    """The list of tonight's regressions above the table (nothing when there is none)."""
    out: list[str] = []
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
    return out


def cache_total(night: NightView) -> list[str]:
    """The night's compiler cache figures, above the table."""
    total = night_total([b.cache for b in night.builds])
    rate = total.hit_rate
    text = (f"Compiler cache: {total.hits} hits, {total.misses} misses of "
            f"{total.requests} compile requests"
            + (f" ({rate:.0%} hit rate)" if rate is not None else "")
            + (f"; {total.uncached} compiles not cached ({total.uncached_why})"
               if total.uncached else ""))
    return [f'<p id="cache-total" data-hits="{total.hits}" data-misses="{total.misses}">'
            f"{esc(text)}</p>"]


def _cache_cell(b: BuildView) -> str:
    c = b.cache
    if c is None:
        return '<td class="num">-</td>'
    if c.off:
        return f'<td class="num" data-cache="off" title="{esc(c.off)}">off</td>'
    hits, misses = c.hits, c.misses
    rate = f"{hits / (hits + misses):.0%}" if hits + misses else "-"
    return (f'<td class="num" data-cache="{hits}/{misses}" title="{esc(c.where)}">'
            f'{esc(rate)}<div class="small muted">{hits} of {hits + misses}</div></td>')


def _pythons_html(b: BuildView) -> str:
    """A limited-API build's test of its one wheel on each Python ("" for another build)."""
    text = esc(results_text(b.python_tests))
    return f'<div class="small muted" data-pythons="{text}">{text}</div>' if text else ""


def _publication_note(b: BuildView) -> str:
    """Never plain "succeeded": (published) or (not published), and why an upload failed."""
    out = ""
    if b.publication:
        out += (f' <span class="small{" worse" if b.upload_error or b.held_back else ""}" '
                f'data-publication="{esc(b.publication)}">({esc(b.publication)})</span>')
    if b.upload_error:
        out += f'<div class="small worse">upload failed: {esc(b.upload_error)}</div>'
    return out


def _row(
    b: BuildView, night: NightView, link_base: str, *, with_history: bool, with_estimates: bool,
    with_cache: bool = False,
) -> list[str]:
    """One build's row of the table."""
    out: list[str] = []
    reg = b.slower or b.larger
    out.append(f'<tr data-row="{esc(b.id)}"' + (' class="regression">' if reg else ">"))
    axes = axes_text(b)
    out.append(f'<td class="mono">{esc(b.id)}' + (
        f'<div class="small muted" data-axes="{esc(axes)}">{esc(axes)}</div>' if axes else "")
        + "</td>")
    outcome = f'<span class="st {esc(b.status)}">{esc(b.status)}</span>'
    if b.status == SUCCEEDED and b.tested not in ("passed", ""):
        # Untested is never plain "succeeded": [smoke] enabled = false, or a GPU part not run.
        outcome += f' <span class="small worse" data-tested="{esc(b.tested)}">({esc(b.tested)})</span>'
    if b.reason and b.status != SUCCEEDED:
        outcome += f'<div class="small muted">{esc(b.reason)}</div>'
    outcome += _publication_note(b)
    if b.lost:
        outcome += f'<div class="small worse" data-lost="{len(b.lost)}">{esc(lost_text(b))}</div>'
    if b.manual:
        outcome += (
            f'<div class="small manual" data-manual="{esc(b.manual.get("by", ""))}" '
            f'title="{esc(b.manual.get("command", ""))}">{esc(manual_text(b))}</div>'
        )
    compat = describe(b.manylinux)
    if compat:
        outcome += f'<div class="small mono" data-manylinux="{esc(compat)}">{esc(compat)}</div>'
    out.append(f'<td class="outcome">{outcome}{_pythons_html(b)}</td>')
    where = f"{b.machine or '-'} / {b.queue if b.queue is not None else '-'}"
    out.append(f'<td class="nowrap">{esc(where)}</td>')
    out.append(f'<td class="num">{esc(clock(b.started))}</td>')
    dur = esc(took(b.elapsed_s))
    if b.slower:
        dur = f'<span class="worse" data-slower="{b.slower:.3f}">{dur} ▲{b.slower:+.0%}</span>'
    if b.median_duration is not None:
        dur += f'<div class="small muted">median {esc(took(b.median_duration))}</div>'
    if b.test_s is not None:
        on = f" on {b.tested_on}" if b.tested_on and b.tested_on != b.machine else ""
        dur += (f'<div class="small muted" data-test-s="{b.test_s:g}">'
                f"test {esc(took(b.test_s))}{esc(on)}</div>")
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
    if with_cache:
        out.append(_cache_cell(b))
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
