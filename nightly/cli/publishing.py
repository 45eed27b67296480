"""Publishing commands: `nightly upload`, `index`, `prune`, `promote` and `validate`
(registered on the main group by nightly.cli.main). Like every command module here, the core
is imported inside the commands."""

from __future__ import annotations

import datetime as dt
import sys
from typing import TYPE_CHECKING

import click

from nightly.cli.context import Ctx, common_options, existing_day
from nightly.errors import BuildsFailed, NightlyError, UsageError
from nightly.format import shown

if TYPE_CHECKING:
    from nightly.config import Config


@click.command()
@common_options
@click.option("--force-partial", is_flag=True,
              help="Publish the good packages that [publish] atomic holds back.")
def upload(force_partial: bool) -> None:
    """Publish the day's succeeded packages that are not yet published (idempotent)."""
    from nightly.publish.upload import publish_day, record_publication
    from nightly.workspace import DayLock, State
    from nightly.workspace.summary import refresh

    ctx = Ctx()
    day = existing_day(ctx)
    if not ctx.config.publish.has_destination:
        raise UsageError(f"{ctx.config.path}: [publish] url is empty: nothing to publish to")
    with DayLock(day.lock_path).acquire("upload"):
        state = State(day.state_path)
        channel = state.meta.channel_name
        try:
            report = publish_day(ctx.config, day, state, channel=channel, log=click.echo,
                                 force_partial=force_partial)
        except NightlyError as e:
            state.set_meta(publish_error=str(e))
            refresh(day, state, by="nightly upload")
            raise
        # summary.json's failed uploads and publish error say what is true after this upload.
        record_publication(state, report)
        refresh(day, state, by="nightly upload")
    click.echo(
        f"{len(report.uploaded)} uploaded, {len(report.skipped)} already there, "
        f"{len(report.failed)} failed, {len(report.index_errors)} index errors"
        + (f", {len(report.held_back)} build(s) held back by [publish] atomic "
           "(--force-partial publishes them)" if report.held_back else "")
    )
    if not report.ok:
        raise BuildsFailed("some uploads or index pages failed", reported=True)


@click.command()
@common_options
@click.option("--full", is_flag=True, help="Rebuild every folder's pages from a listing.")
@click.option("--backfill-metadata", is_flag=True,
              help="First store <wheel>.metadata (PEP 658) for wheels without one; implies --full.")
def index(
    full: bool,
    backfill_metadata: bool,
) -> None:
    """Regenerate index pages (incremental: the day's folders; --full: every folder)."""
    from nightly.index.rebuild import rebuild_all
    from nightly.publish.upload import (
        UploadReport,
        index_options,
        open_destination,
        regenerate_index,
    )
    from nightly.workspace import State

    ctx = Ctx()
    if not ctx.config.publish.url:
        raise UsageError(f"{ctx.config.path}: [publish] url is empty: no index to regenerate")
    store = open_destination(ctx.config)
    if full or backfill_metadata:
        reports = rebuild_all(store, index_options(ctx.config), backfill=backfill_metadata,
                              log=click.echo)
        click.echo(f"{len(reports)} folder(s) regenerated in full")
        return
    day = existing_day(ctx)
    state = State(day.state_path)
    channel = state.meta.channel_name
    report = UploadReport()
    for entry in state.builds.values():
        for dest, sha in entry.published.items():
            if dest.startswith(store.url + "/"):
                folder, _, name = dest[len(store.url) + 1:].rpartition("/")
                report.folders.setdefault(folder, {})[name] = sha
    if not report.folders:
        click.echo("nothing published on this day: no folder to regenerate (try --full)")
        return
    regenerate_index(ctx.config, store, report, channel=channel, log=click.echo)
    if not report.ok:
        raise BuildsFailed("; ".join(report.index_errors) or "index pages failed",
                           reported=True)


@click.command()
@common_options
@click.option("--dry-run", is_flag=True, help="List what would be deleted.")
def prune(dry_run: bool) -> None:
    """Delete old day folders locally; apply retention to the nightly channel remotely."""
    from nightly.publish import retention
    from nightly.workspace import apply_local_prune, is_locked, plan_local_prune

    ctx = Ctx()
    cfg = ctx.config
    doomed = plan_local_prune(cfg.root, ctx.date, cfg.retention.local_days, is_locked)
    for p in doomed:
        click.echo(f"{'would delete' if dry_run else 'delete'} {p}")
    if doomed and not dry_run:
        click.echo(str(apply_local_prune(cfg.root, doomed, is_locked)))  # PruneResult.__str__
    if not doomed:
        click.echo(f"no day folder under {cfg.root} is older than {cfg.retention.local_days} days")
    _prune_history_and_locks(ctx.date, cfg, dry_run)
    rv, rd = cfg.retention.remote_versions, cfg.retention.remote_days
    if cfg.publish.url and (rv or rd):
        import datetime as _dt

        from nightly.publish.upload import open_destination

        store = open_destination(cfg)
        keys = retention.plan_remote_prune(  # remote_versions = 0: keep every version
            retention.list_nightly(store), rv or sys.maxsize, rd or None,
            _dt.datetime.now(_dt.timezone.utc),
        )
        for k in keys:
            click.echo(f"{'would delete' if dry_run else 'delete'} {store.url}/{shown(k)}")
        if keys and not dry_run:
            from nightly.publish.upload import index_options

            retention.apply_remote_prune(store, keys, options=index_options(cfg))


@click.command()
@common_options
@click.argument("version")
@click.option("--rc", type=click.IntRange(min=0), help="The release candidate to promote.")
@click.option("--allow-partial", metavar="GLOB", multiple=True,
              help="Promote although these builds are missing or failed.")
@click.option("--dry-run", is_flag=True, help="Show what would be copied and uploaded.")
def promote(
    version: str,
    rc: int | None,
    allow_partial: tuple[str, ...],
    dry_run: bool,
) -> None:
    """Copy exactly the test channel's files of VERSION to the release channel."""
    from nightly.publish.promote import promote as promote_candidate
    from nightly.workspace.candidate import check_version

    ctx = Ctx()
    check_version(version)
    if ctx.config.publish.pypi_url and not dry_run:
        from nightly.errors import require

        require("twine", what="[publish.pypi] repository_url")  # before anything is copied
    promote_candidate(ctx.config, version, rc, allow_partial=allow_partial, dry_run=dry_run,
                      log=click.echo, machine=_this_machine(ctx.config))


def _this_machine(config: Config) -> str:
    """The machine a promotion's report is named for: as a one-off build picks it, else this
    host's name."""
    import socket

    from nightly.night.pipeline import pick_machine

    try:
        return pick_machine(config, None, strict=False).name
    except UsageError:
        return socket.gethostname()


@click.command()
@common_options
@click.option("--channel", type=click.Choice(["nightly", "test", "release"]), default=None,
              help="The channel whose day it is (default: the day's own).")
def validate(channel: str | None) -> None:
    """Check what users get: each published package of the day resolved through the published
    index (pip, with the build's Python), compared with what was built, installed and
    imported. Exit status 1 when any is missing, unreachable, different or failing."""
    from nightly.publish.validate import validate_day
    from nightly.workspace import State

    ctx = Ctx()
    day = existing_day(ctx)
    state = State(day.state_path)
    if channel is not None and state.meta.channel_name != channel:
        raise UsageError(f"{day.path} is a {state.meta.channel_name} day, "
                         f"not {channel}: pass its --date (or no --channel)")
    checks = validate_day(ctx.config, day, state, log=click.echo)
    bad = [c for c in checks if not c.ok]
    click.echo(f"validate: {len(checks) - len(bad)} of {len(checks)} published package(s) as built")
    if bad:
        raise BuildsFailed(f"{len(bad)} published package(s) are not what users should get: "
                           + ", ".join(c.package for c in bad))


def _prune_history_and_locks(today: dt.date, cfg: Config, dry_run: bool) -> None:
    """The lock files of pruned days, and the history's nights before its window."""
    from nightly.history.retention import cutoff
    from nightly.night.retain import prune_history_step
    from nightly.workspace import is_locked
    from nightly.workspace.prune import prune_day_locks

    cut = cutoff(today, cfg.retention.history_days)
    if dry_run:
        if cut is not None:
            click.echo(f"would remove the history's nights before {cut} "
                       f"([retention] history_days = {cfg.retention.history_days})")
        return
    for lock in prune_day_locks(cfg.root, today, cfg.retention.local_days, is_locked):
        click.echo(f"removed {lock}")
    prune_history_step(cfg, today, click.echo)

