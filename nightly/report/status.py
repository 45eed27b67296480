"""`nightly status`: the day's builds in the terminal, failures first, with the tail of each
failed (or running) build's log. Reads the day folder only (see nightview.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nightly.core.manylinux import describe
from nightly.format import human_size, shown, took
from nightly.report.view import (
    NightView,
    axes_text,
    load_night,
    log_tail,
    lost_text,
    manual_text,
    outcome_text,
)
from nightly.workspace import FAILED, INTERRUPTED, PENDING, RUNNING, SUCCEEDED, Day, publication
from nightly.workspace.cost import shown_status
from nightly.workspace.pythontests import results_text

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from nightly.history.db import History


def show(
    day: Day,
    *,
    tail: int = 15,
    history: History | None = None,
    console: Console | None = None,
) -> bool:
    """Print the day's builds (state, outcome, duration, size), failures first, every package
    in full (one a line, never cut to the terminal's width), then the tail of each failed (or
    running) build's log. Returns whether a build failed, was
    interrupted or was not published."""
    from nightly.report.terminal import wide_console

    con = console or wide_console()
    night = load_night(day, history)
    c = night.counts()
    con.print(_heading(night))
    con.print(_counts_line(c))
    con.print(_table(night))
    from nightly.history.triage import facts_for_day
    from nightly.report.triage import status_lines

    for line in status_lines(facts_for_day(day, history)):
        con.print(line, markup=False, highlight=False)
    from nightly.report.terminal import print_packages

    print_packages(con, [(b.id, name, size) for b in night.builds for name, size in b.files])
    _manual_builds(con, night)
    if tail > 0:
        _log_tails(con, night, tail)
    return bool(c[FAILED] or c[INTERRUPTED] or c["not_published"])


def _heading(night: NightView) -> str:
    from rich.markup import escape

    meta = night.meta
    facts = (("version", meta.version), ("channel", meta.channel), ("commit", meta.commit[:12]))
    return f"[bold]{escape(night.day.name)}[/bold]" + "".join(
        f"  {label} {escape(shown(value))}" for label, value in facts if value)


def _counts_line(c: dict[str, int]) -> str:
    parts = [f"{c['total']} builds",
             f"[green]{c[SUCCEEDED]} succeeded[/green]{publication.counts_text(c)}"]
    if c.get("untested"):
        parts.append(f"[yellow]{c['untested']} of them untested[/yellow]")
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
    if c["manual"]:
        parts.append(f"[cyan]{c['manual']} manual[/cyan]")
    return ", ".join(parts)


_STYLES = {SUCCEEDED: "green", FAILED: "red", INTERRUPTED: "red", RUNNING: "yellow"}


def _table(night: NightView) -> Table:
    from rich.markup import escape
    from rich.table import Table

    t = Table(title_justify="left")
    # Never cut or wrapped: an identifier split in two is no identifier; the reason folds.
    t.add_column("build", no_wrap=True)
    t.add_column("outcome", overflow="fold", min_width=12, ratio=1)
    t.add_column("queue", justify="right", no_wrap=True)
    t.add_column("duration", justify="right", no_wrap=True)
    t.add_column("size", justify="right", no_wrap=True)
    retried = any(b.attempts > 1 for b in night.builds)
    if retried:
        t.add_column("tries", justify="right", no_wrap=True)
    compat = any(b.manylinux is not None for b in night.builds)
    if compat:
        t.add_column("manylinux / glibc", overflow="fold")
    for b in night.builds:
        style = _STYLES.get(b.status, "dim")
        where = (f"{b.machine}/" if b.machine else "") + ("" if b.queue is None else str(b.queue))
        dur = took(b.elapsed_s) + (" (running)" if b.status == RUNNING else "")
        if b.slower:
            dur += f" [magenta]+{b.slower:.0%}[/magenta]"
        size = human_size(b.size)
        if b.larger:
            size += f" [magenta]+{b.larger:.0%}[/magenta]"
        if b.status == SUCCEEDED and b.tested not in ("passed", ""):
            style = "yellow"
        outcome = f"[{style}]{escape(shown_status(b.status, b.tested))}[/{style}]"
        if b.reason and b.status != SUCCEEDED:
            outcome += f": {escape(b.reason)}"
        if b.python_tests:  # a limited-API build: its one wheel on each Python
            outcome += f"\n[dim]{escape(results_text(b.python_tests))}[/dim]"
        if b.publication == publication.PUBLISHED:
            outcome += " [green](published)[/green]"
        elif b.publication:  # never plain "succeeded"
            why = f"upload failed: {b.upload_error}" if b.upload_error else "held back"
            outcome += f" [red](not published: {escape(why)})[/red]"
        if b.lost:  # a cluster worker killed under it: more than "2 tries"
            outcome += f" [red]({escape(lost_text(b))})[/red]"
        if b.manual:
            outcome += " [cyan](manual)[/cyan]"
        axes = axes_text(b)
        t.add_row(
            escape(b.id) + (f"\n[dim]{escape(axes)}[/dim]" if axes else ""),
            outcome,
            escape(where or "-"),
            dur,
            size,
            *([str(b.attempts or "-")] if retried else []),
            *([escape(describe(b.manylinux) or "-")] if compat else []),
        )
    return t


def _manual_builds(con: Console, night: NightView) -> None:
    """The one-off builds of the day: who ran each, when, and the command (one a line)."""
    from rich.markup import escape

    manual = [b for b in night.builds if b.manual]
    if not manual:
        return
    con.print(f"manual builds ({len(manual)}):")
    width = max(len(b.id) for b in manual)
    for b in manual:
        command = (b.manual or {}).get("command", "")
        con.print(
            f"  {escape(b.id.ljust(width))}  [cyan]{escape(manual_text(b))}[/cyan]"
            + (f": {escape(shown(command))}" if command else ""),
            soft_wrap=True,
            highlight=False,
        )


def _log_tails(con: Console, night: NightView, tail: int) -> None:
    """A panel per failed (or running) build with the last `tail` lines of its log."""
    from rich.panel import Panel
    from rich.text import Text

    for b in night.builds:
        if not (b.bad or b.status == RUNNING):
            continue
        lines = log_tail(b.log, tail)
        where = str(b.log.relative_to(night.day.path)) if b.log else "no log"
        title = f"{b.id}: {outcome_text(b)}"
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
