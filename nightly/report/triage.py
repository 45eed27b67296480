"""The report's and `nightly status`'s view of the failure facts (nightly.history.triage): failures
grouped by signature, largest group first, each build new or still failing since a night,
the last good and first bad commits, the commits between them and the bisect's result."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nightly.format import shown
from nightly.history.triage import FailureFacts, groups
from nightly.report.sections import esc, href

if TYPE_CHECKING:
    from nightly.history.db import History
    from nightly.report.view import NightView

CSS = """
.group { border: 1px solid #f0c7c7; border-radius: 6px; padding: 6px 12px; margin: 10px 0; }
.group h3 code { background: #fff0f0; padding: 1px 4px; }
.tag { display: inline-block; padding: 0 7px; border-radius: 9px; color: #fff; font-size: 12px; }
.tag.new { background: var(--bad); } .tag.old { background: var(--int); }
.bisect { color: var(--man); }
"""


def section(facts: Mapping[str, FailureFacts], link_base: str,
            logs: Mapping[str, str] | None = None) -> list[str]:
    """The "Failure groups" section (nothing when nothing failed)."""
    if not facts:
        return []
    new = sum(f.new for f in facts.values())
    out = [f"<style>{CSS}</style>", '<section id="failure-groups">',
           f'<h2>Failure groups <span class="muted small">{new} new, {len(facts) - new} still '
           "failing</span></h2>"]
    for sig, fs in groups(facts.values()):
        n = len(fs)
        out.append(f'<div class="group" data-signature="{esc(sig)}">')
        out.append(f"<h3>{n} build{'' if n == 1 else 's'}: <code>{esc(sig)}</code></h3><ul>")
        for f in fs:
            out.append(_item(f, link_base, (logs or {}).get(f.build_id)))
        out.append("</ul></div>")
    out.append("</section>")
    return out


def _item(f: FailureFacts, link_base: str, log: str | None) -> str:
    tag = ('<span class="tag new">new</span>' if f.new
           else f'<span class="tag old">{esc(f.headline())}</span>')
    link = f' <a href="{esc(href(link_base, log))}">log</a>' if log else ""
    good = (f"last good {esc(f.last_good)} <code>{esc((f.last_good_commit or '-')[:12])}</code>"
            if f.last_good else "no good night recorded")
    bad = f"first bad {esc(f.since)} <code>{esc(f.first_bad_commit[:12] or '-')}</code>"
    parts = [f'<li class="failed-build" data-build="{esc(f.build_id)}" '
             f'data-new="{str(f.new).lower()}"><b>{esc(f.build_id)}</b> {tag}{link}',
             f'<div class="small">{good} · {bad}</div>']
    if f.commits is None:
        parts.append('<div class="small muted">commits between them: unknown</div>')
    elif f.commits:
        more = f" (first {len(f.commits)} of {f.commits_total})" if f.commits_total > len(f.commits) else ""
        parts.append(f"<details><summary>{f.commits_total} commits between them{more}</summary>"
                     f"<pre>{esc(chr(10).join(f.commits))}</pre></details>")
    if f.bisect:
        parts.append(f'<div class="bisect small">bisect: {esc(bisect_line(f.bisect))}</div>')
    return "".join(parts) + "</li>"


def bisect_line(b: Mapping[str, Any]) -> str:
    steps = len(b.get("steps") or [])
    if b.get("first_bad"):
        return (f"first bad commit {str(b['first_bad'])[:12]} {b.get('subject', '')!r} by "
                f"{b.get('author', '')}, {b.get('date', '')} ({steps} builds)")
    rng = b.get("range") or []
    if rng:
        return (f"{b.get('status')}: narrowed to {len(rng)} commits {str(rng[0])[:12]}.."
                f"{str(rng[-1])[:12]} ({steps} builds)")
    return f"{b.get('status')} ({steps} builds)"


def status_lines(facts: Mapping[str, FailureFacts]) -> list[str]:
    """Plain lines for `nightly status` (one per group, one per build): signatures, headlines
    and commit subjects are what builds and a project wrote, shown as data (format.shown),
    whichever nightly recorded them in the history."""
    out = []
    for sig, fs in groups(facts.values()):
        out.append(f"{len(fs)} build{'' if len(fs) == 1 else 's'}: {sig}")
        for f in fs:
            good = (f"last good {f.last_good} {(f.last_good_commit or '-')[:12]}" if f.last_good
                    else "no good night")
            out.append(f"  {f.build_id}: {f.headline()}; {good}; first bad {f.since} "
                       f"{f.first_bad_commit[:12] or '-'}"
                       + ("" if f.commits is not None else "; commits unknown"))
            if f.bisect:
                out.append(f"    bisect: {bisect_line(f.bisect)}")
    return [shown(line, lines=False) for line in out]


def report_section(night: NightView, history: History | None, link_base: str) -> list[str]:
    """The section for a night as the report reads it (its logs relative to the day)."""
    from nightly.history.triage import facts_for_day

    logs = {b.id: b.log.relative_to(night.day.path).as_posix() for b in night.builds
            if b.log is not None}
    return section(facts_for_day(night.day, history), link_base, logs)
