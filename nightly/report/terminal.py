"""Terminal output with rich: plans, build tables. rich is imported inside the functions, so
that importing the night's pipeline (and with it this module) does not load it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from nightly.core.limited import describe as describe_abi3
from nightly.format import hms, human_size, shown
from nightly.plan.schedule import Plan
from nightly.report.view import attempt_words
from nightly.workspace import publication
from nightly.workspace.cost import shown_status
from nightly.workspace.pythontests import results_text

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from nightly.workspace.summary import BuildSummary, Summary


console: Console | None = None  # made on first use; a test may put its own


def _console() -> Console:
    global console
    if console is None:

        console = wide_console()
    return console


def wide_console() -> Console:
    """A console for tables: the terminal's width, and when piped (cron's mail, `| less`) a
    width no row needs to be cut at, rather than rich's 80 columns."""
    import os

    from rich.console import Console

    con = Console()
    if not con.is_terminal and "COLUMNS" not in os.environ:
        con = Console(width=240)
    return con


def print_plan(plan: Plan, *, date: dt.date, version: str) -> None:
    from rich.markup import escape
    from rich.table import Table
    console = _console()

    console.print(f"[bold]Plan for {date:%Y_%m_%d}[/bold]  version {version}")
    for m in plan.machines:
        if not m.builds:
            continue
        # What it builds, not what it has: CUDA builds need no GPU on the machine.
        routes = f" {', '.join(m.archs)}; builds {', '.join(m.accelerators)}" if m.archs else ""
        t = Table(
            title=f"machine {m.name} ({m.platform}{routes}; {len(m.queues)} "
            f"queue{'' if len(m.queues) == 1 else 's'}, "
            f"{m.executors_text})",
            title_justify="left",
        )
        t.add_column("queue", justify="right")
        t.add_column("builds (estimate)")
        t.add_column("finish", justify="right")
        for q in m.queues:
            names = ", ".join(
                f"{pb.build.id} {escape('[' + pb.build.label + ']')} ({hms(pb.estimate_s)})"
                f"{'' if pb.explicit else '*'}"
                + (escape(f" [{describe_abi3(pb.build)}]") if pb.build.limited_api else "")
                for pb in q.builds
            )
            t.add_row(str(q.index), names or "-", hms(q.finish_s))
        console.print(t)
        console.print(
            f"  makespan {hms(m.makespan_s)}  lower bound {hms(m.lower_bound_s)}  "
            f"ratio {m.makespan_s / m.lower_bound_s if m.lower_bound_s else 1:.3f}"
        )
    n = len(plan.builds)
    console.print(
        f"[bold]{n} build{'' if n == 1 else 's'}[/bold]; estimated finish {hms(plan.makespan_s)} "
        f"after start; lower bound {hms(plan.lower_bound_s)}  (* placed automatically)"
    )


def print_summary(summary: Summary, *, path: Path | str = "summary.json") -> None:
    """The night's (or the build command's) outcome as a table, failures first, then every
    package in full, one per line (never cut to the terminal's width: a package's name is what
    a person looks for, and cron's mail has no width at all)."""
    from rich.markup import escape
    console = _console()

    t, elsewhere = _summary_table(summary, console.is_terminal)
    rows = sorted(summary.builds.items(), key=lambda kv: (kv[1].outcome == "succeeded", kv[0]))
    packages: list[tuple[str, str, int]] = []
    for bid, b in rows:
        pub = str(b.extra.get("publication") or "")  # never plain "succeeded" when not published
        style = ("red" if b.outcome != "succeeded" or pub == "not published"
                 else "green" if b.tested in ("passed", "") else "yellow")
        packages += [(bid, p.name, p.size) for p in b.packages]
        reason = shown(b.reason or "")  # a summary.json of an older nightly kept it raw
        # Long enough for a recipe's own ERROR line; the whole reason is in summary.json.
        if len(reason) > 240:
            reason = reason[:237] + "..."
        outcome = escape(shown_status(b.outcome, b.tested) + (f", {pub}" if pub else "")
                         + (f": {reason}" if reason else ""))
        each = results_text(b.python_tests)  # a limited-API build's Pythons
        outcome += escape(f" ({each})") if each else ""
        raw_lost = b.extra.get("lost")
        lost = [x for x in raw_lost if isinstance(x, dict)] if isinstance(raw_lost, list) else []
        if lost:  # a cluster worker killed under it: more than "2 attempts"
            outcome += escape(" (" + "; ".join(
                f"{attempt_words(x.get('attempt'), x.get('stage'))} lost with worker "
                f"{x.get('worker')}" for x in lost) + ")")
        t.add_row(
            escape(bid),
            f"[{style}]{outcome}[/{style}]",
            hms(b.duration_s) if b.duration_s is not None else "-",
            hms(b.test_s) if b.test_s is not None else "-",
            *([escape(_where(b))] if elsewhere else []),
            f"{len(b.packages)}, {human_size(sum(p.size for p in b.packages))}"
            if b.packages else "-",
        )
    console.print(t)
    print_packages(console, packages)
    c = summary.counts
    console.print(
        f"{c.get('succeeded', 0)} succeeded" + publication.counts_text(c, untested=True)
        + f", {c.get('failed', 0)} failed of {c.get('total', 0)}; "
        f"source {escape(summary.source or '-')}; "
        f"summary: {escape(str(path))}",
        soft_wrap=True,
    )
    _print_failed_logs(console, summary, Path(path))
    # Builds that succeeded but did not reach the store: the exit status alone would not say.
    uploads = summary.failed_uploads
    if uploads:
        console.print(
            f"[red]{len(uploads)} upload(s) failed[/red]: {escape(', '.join(uploads))} (the "
            f"packages stay; the reasons are in logs/master/run.log; retry with `nightly upload "
            f"--date {escape(summary.date or 'YYYY_MM_DD')}`)", soft_wrap=True)
    if summary.publish_error:
        console.print(f"[red]publishing failed[/red]: {escape(shown(summary.publish_error))}",
                      soft_wrap=True)
    gpu = summary.gpu_host_s
    if gpu.get("building") or gpu.get("testing"):
        console.print(f"GPU hosts: {hms(gpu.get('building') or 0.0)} building, "
                      f"{hms(gpu.get('testing') or 0.0)} testing", highlight=False)
    for bid, why in sorted(summary.held_back.items()):
        console.print(f"[yellow]held back[/yellow] {escape(bid)}: {escape(shown(why))} "
                      "(`nightly upload --force-partial` publishes it)", soft_wrap=True)


def _print_failed_logs(console: Console, summary: Summary, path: Path) -> None:
    """The failed builds' logs, whole paths, one a line: where the person looks next
    (issue 57: the night's end named summary.json and no log)."""
    from rich.markup import escape

    day = path.parent
    logs = [(bid, b.log) for bid, b in sorted(summary.builds.items())
            if b.outcome != "succeeded" and b.log]
    if not logs:
        return
    console.print(f"failed log{'s' if len(logs) > 1 else ''}:", highlight=False)
    for bid, log in logs:
        shown = Path(log) if Path(log).is_absolute() else day / log
        console.print(f"  {escape(bid)}: {escape(str(shown))}", soft_wrap=True, highlight=False)


def _summary_table(summary: Summary, terminal: bool) -> tuple[Table, bool]:
    """The summary's empty table, and whether it has a `where` column."""
    from rich.markup import escape
    from rich.table import Table

    title = f"{summary.date} on machine {summary.machine}"
    if isinstance(summary.manual, dict):  # a one-off build's own summary
        title += f", one-off build by {summary.manual.get('by', '?')}"
    t = Table(title=escape(title), title_justify="left")
    # Never cut or wrapped: an identifier split in two is no identifier; the reason folds.
    t.add_column("build", no_wrap=True)
    # A pipe's console is 240 wide (nothing cut): the reason folds within 64 columns there,
    # so cron's mail gets a table of ~150, not one as wide as the longest reason (issue 57).
    t.add_column("outcome", overflow="fold", min_width=12, ratio=1,
                 max_width=None if terminal else 64)
    t.add_column("build", justify="right", no_wrap=True)
    t.add_column("test", justify="right", no_wrap=True)
    # Where each build ran, only when some ran elsewhere than the title's machine (a
    # cluster night): a local night's column said the title's name again, and at 80
    # columns folded it in two. A name is never split: the column wraps between the two
    # names (built on -> tested on), never narrower than the longest one.
    wheres = [_where(b) for b in summary.builds.values()]
    elsewhere = any(w not in ("-", summary.machine) for w in wheres)
    if elsewhere:
        longest = max((len(n) for w in wheres for n in w.split()), default=5)
        t.add_column("where", overflow="fold", min_width=min(32, longest))
    t.add_column("packages", justify="right", no_wrap=True)
    return t, elsewhere


def _where(b: BuildSummary) -> str:
    """`built on` and, when elsewhere, `tested on`: builder -> tester."""
    built, tested = b.built_on, b.tested_on
    if not tested or tested == built:
        return built or "-"
    return f"{built or '?'} -> {tested}"


def print_packages(con: Console, packages: Sequence[tuple[str, str, int]]) -> None:
    """`build  package  size`, one package a line, whole: soft-wrapped (a terminal folds the
    line on screen, a copy of it is the whole name; a file gets it on one line)."""
    from rich.markup import escape

    if not packages:
        return
    con.print(f"packages ({len(packages)}):")
    width = max(len(bid) for bid, _, _ in packages)
    for bid, name, size in packages:
        con.print(
            f"  {escape(bid.ljust(width))}  {escape(name)}  [dim]{human_size(size)}[/dim]",
            soft_wrap=True,
            highlight=False,
        )


def print_destinations(summary: Summary, day_path: Path, *, not_published: str) -> None:
    """Where each package of the summary's builds went: its file in the day folder, and every
    destination it was published to, else why it was not (`not_published`, or the build's
    failure or failed upload)."""
    from rich.markup import escape
    console = _console()

    from nightly.workspace.summary import package_destinations

    rows = package_destinations(summary)
    if not rows:
        console.print("no package was made", highlight=False)
        return
    failed_uploads = set(summary.failed_uploads)
    console.print("where the packages went:", highlight=False)
    for bid, _name, path, dests in rows:
        console.print(f"  {escape(str(day_path / path))}", soft_wrap=True, highlight=False)
        for dest in dests:
            console.print(f"    published: {escape(dest)}", soft_wrap=True, highlight=False)
        if dests:
            continue
        built = summary.builds.get(bid)
        outcome = built.outcome if built is not None else None
        if outcome != "succeeded":
            why = f"the build {outcome}"
        elif bid in summary.held_back:
            why = f"held back: {summary.held_back[bid]} (`nightly upload --force-partial`)"
        elif bid in failed_uploads:
            why = "the upload failed (see `nightly status`; `nightly upload` retries)"
        else:
            why = not_published
        console.print(f"    not published: {escape(why)}", soft_wrap=True, highlight=False)
