"""The `nightly bisect` command (registered by cli.py). Only click here: the core is imported
inside the command, so `nightly --help` stays fast."""

from __future__ import annotations

import click

from nightly.cli.context import Ctx, common_options, existing_day
from nightly.format import shown


@click.command(name="bisect")
@common_options
@click.argument("build_id")
@click.option("--good", metavar="COMMIT", help="A commit at which the build succeeded "
              "(default: the last good night's).")
@click.option("--bad", metavar="COMMIT", help="A commit at which it fails the night's way "
              "(default: the first bad night's).")
@click.option("--all-commits", is_flag=True, help="Walk every commit, not only first parents.")
@click.option("--machine", metavar="N", help="The machine whose name the step logs carry.")
@click.option("--dry-run", is_flag=True, help="Print the commits it would try; build nothing.")
def bisect_command(
    build_id: str, good: str | None, bad: str | None, all_commits: bool, machine: str | None,
    dry_run: bool,
) -> None:
    """The first commit at which BUILD_ID fails the way it failed on --date's night: rebuilds
    it at commits chosen by binary search, each under DAY/bisect/BUILD_ID/COMMIT/. Never
    publishes, never changes the night. Run again after an interruption: it goes on."""
    from nightly.bisect.run import BisectOptions, bisect, record

    ctx = Ctx()
    day = existing_day(ctx)
    opts = BisectOptions(good=good, bad=bad, all_commits=all_commits, dry_run=dry_run)
    # Its lines quote commit subjects, authors and failure signatures: the project's words.
    result = bisect(ctx.config, day, build_id, opts, say=lambda line: click.echo(shown(line)),
                    machine=machine)
    if result is not None:
        record(ctx.config, result)
