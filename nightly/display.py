"""Terminal output with rich: plans, build tables. Imported only by commands that print."""

from __future__ import annotations

import datetime as dt
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nightly.schedule import Plan

console = Console()


def hms(seconds: float) -> str:
    s = round(seconds)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def print_plan(plan: Plan, *, date: dt.date, version: str) -> None:
    console.print(f"[bold]Plan for {date:%Y_%m_%d}[/bold]  version {version}")
    for m in plan.machines:
        if not m.builds:
            continue
        t = Table(
            title=f"machine {m.name} ({m.platform}, {len(m.queues)} queues, {m.executor})",
            title_justify="left",
        )
        t.add_column("queue", justify="right")
        t.add_column("builds (estimate)")
        t.add_column("finish", justify="right")
        for q in m.queues:
            names = ", ".join(
                f"{pb.build.id} ({hms(pb.estimate_s)}){'' if pb.explicit else '*'}"
                for pb in q.builds
            )
            t.add_row(str(q.index), names or "-", hms(q.finish_s))
        console.print(t)
        console.print(
            f"  makespan {hms(m.makespan_s)}  lower bound {hms(m.lower_bound_s)}  "
            f"ratio {m.makespan_s / m.lower_bound_s if m.lower_bound_s else 1:.3f}"
        )
    console.print(
        f"[bold]{len(plan.builds)} builds[/bold]; estimated finish {hms(plan.makespan_s)} "
        f"after start; lower bound {hms(plan.lower_bound_s)}  (* placed automatically)"
    )


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def print_summary(summary: dict[str, Any]) -> None:
    """The night's (or the build command's) outcome as a table, failures first."""
    t = Table(title=f"{summary['date']} on machine {summary['machine']}", title_justify="left")
    t.add_column("build")
    t.add_column("outcome")
    t.add_column("duration", justify="right")
    t.add_column("packages")
    t.add_column("size", justify="right")
    rows = sorted(summary["builds"].items(), key=lambda kv: (kv[1]["outcome"] == "succeeded", kv[0]))
    for bid, b in rows:
        style = "green" if b["outcome"] == "succeeded" else "red"
        pk = b.get("packages") or []
        reason = str(b.get("reason") or "")
        if len(reason) > 90:  # the whole reason is in the log and summary.json
            reason = reason[:87] + "..."
        outcome = escape(b["outcome"] + (f": {reason}" if reason else ""))
        t.add_row(
            escape(bid),
            f"[{style}]{outcome}[/{style}]",
            hms(b["duration_s"]) if b.get("duration_s") is not None else "-",
            "\n".join(p["name"] for p in pk) or "-",
            "\n".join(_size(p["size"]) for p in pk) or "-",
        )
    console.print(t)
    c = summary["counts"]
    console.print(
        f"{c['succeeded']} succeeded, {c['failed']} failed of {c['total']}; "
        f"source {escape(str(summary.get('source', '-')))}; summary: {summary.get('path', 'summary.json')}"
    )
