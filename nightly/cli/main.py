"""The `nightly` command: parse, call the core, map errors to exit codes. Thin on purpose.

The core (config, night, runner, executors, publish) and heavy libraries (rich, boto3,
docker, dask) are imported inside the commands, so `nightly --help` loads none of them
(tests/unit/test_cli_plan.py checks): the one place nightly's own modules are imported in
functions without a cycle to avoid.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from nightly.cli.context import (
    Ctx,
    Shared,
    common_options,
    config_option,
    debug_option,
    existing_candidate,
    existing_day,
    shared,
)
from nightly.errors import BuildsFailed, NightlyError, UsageError, missing_extra
from nightly.format import log_to_stderr, shown

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nightly.config import Config
    from nightly.core.matrix import Build


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="nightly-builds")
def cli() -> None:
    """Nightly and release builds of a project's compiled binaries.

    Exit codes: 0 success; 1 some builds or uploads failed; 2 bad usage or configuration;
    3 nothing selected; 4 another run holds this day's lock.
    """


@cli.command()
@common_options
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option("--machine", metavar="N", help="Only this machine (name or index).")
@click.option("--select", "selects", metavar="GLOB", multiple=True, help="Only builds matching.")
def plan(
    as_json: bool,
    machine: str | None,
    selects: tuple[str, ...],
) -> None:
    """The night's builds, their machines and queues, estimates and lower bound."""
    from nightly.core.matrix import nightly_version
    from nightly.history.feeds import estimates_note, planning_estimator
    from nightly.plan.schedule import plan_night

    ctx = Ctx(builds=True)
    result = plan_night(
        ctx.config, machine=machine, selects=selects, estimate=planning_estimator(ctx.config)
    )
    version = nightly_version(
        ctx.config.project.base_version, ctx.date, ctx.config.project.version_from
    )
    strategy, why = _version_strategy(ctx.config)
    note, from_history = estimates_note(ctx.config, [pb.build.id for pb in result.builds])
    if as_json:
        data = result.to_json(date=f"{ctx.date:%Y_%m_%d}", version=version)
        data["version_from"] = {"strategy": strategy, "reason": why}
        data["estimates"] = {"from_history": from_history, "note": note}
        click.echo(json.dumps(data, indent=2))
    else:
        from nightly.report import terminal as display

        display.print_plan(result, date=ctx.date, version=version)
        click.echo(note)
        click.echo(f"version strategy: {strategy} ({why})")


def _version_strategy(config: Config) -> tuple[str, str]:
    """The version strategy `nightly plan` shows: detected from a local source now; from a
    git URL only once the night has checked it out."""
    import os

    from nightly.config.detect import resolve_version_from
    from nightly.config.pyproject import read_pyproject

    source, configured = config.project.source, config.project.version_from
    if configured == "auto" and ("://" in source or source.startswith("git@")):
        return "auto", "decided from the night's checkout of the source"
    path = (config.path.resolve().parent / os.path.expanduser(source)).resolve()
    read_pyproject(path)  # of another shape than PEP 517/621 say: one line, exit 2
    choice = resolve_version_from(configured, path)
    return choice.strategy, choice.reason


@cli.command()
@click.argument("target", default=".", metavar="[PATH | SDIST]")
@config_option
@debug_option
def init(target: str) -> None:
    """Write a commented nightly.toml (or --config FILE) for the project in PATH (default:
    here), or for an sdist (unpacked beside the file): its name, version strategy, Pythons,
    builder image, smoke import and a local mirror. Never overwrites a file."""
    from pathlib import Path

    from nightly.cli.scaffold import init_project
    from nightly.config import find_config_path

    config_path = find_config_path(shared().config_path)
    for line in init_project(Path(target), config_path).lines():
        click.echo(shown(line))  # it quotes the project's own files


@cli.command()
@common_options
@click.argument("package")
@click.argument("pythons")
@click.argument("cudas")
@click.option("--executor", type=click.Choice(["local", "container"]), help="Override the machine's.")
@click.option("--machine", metavar="N", help="Take queues/executor from this machine.")
@click.option("--dry-run", is_flag=True, help="Show where and how each build would run.")
@click.option("--keep-container", is_flag=True, help="Keep build containers for debugging.")
@click.option("--no-upload", is_flag=True, help="Keep the packages here; `nightly upload` publishes them.")
@click.option("--check-reproducible", is_flag=True,
              help="Build each twice (other work folder and umask) and fail on any difference.")
@click.option("--arch", default="", metavar="ARCH",
              help="Target architecture (aarch64, x86_64; default: the platform's own).")
@click.option("--platform", "platform", type=click.Choice(["linux", "macos", "windows"]),
              default=None, help="The builds' platform (default: this machine's).")
def build(
    package: str,
    pythons: str,
    cudas: str,
    arch: str,
    platform: str | None,
    executor: str | None,
    machine: str | None,
    dry_run: bool,
    keep_container: bool,
    no_upload: bool,
    check_reproducible: bool,
) -> None:
    """Build PACKAGE for the PYTHONS x CUDAS listed (comma lists), now, on this machine: a
    one-off build of the day, published to the nightly channel unless --no-upload, recorded
    as manual with its own summary (the night's summary.json stays the night's).

    Example: nightly build manywheel 3.9,3.12 cpu,cu130
    """
    import shlex

    from nightly.night import pipeline as night
    from nightly.workspace.summary import manual_mark

    ctx = Ctx(builds=True)
    config = ctx.config
    if check_reproducible:
        import dataclasses

        config = dataclasses.replace(config, build=dataclasses.replace(
            config.build, check_reproducible="all"))
    builds = night.builds_from_cli(config, package, pythons, cudas, arch, platform or "")
    if not dry_run:
        _refuse_unrunnable(config, builds, machine, executor)
    opts = night.NightOptions(
        machine=machine, executor=executor, dry_run=dry_run, keep_container=keep_container,
        rebuild=tuple(b.id for b in builds), no_upload=no_upload,
        manual=manual_mark(shlex.join(["nightly", *sys.argv[1:]])),
    )
    night.run_local(config, ctx.date, builds, opts)


@cli.command()
@common_options
@click.option("--machine", metavar="N", help="This machine's name or index in the config.")
@click.option("--cluster", metavar="ADDRESS", help="Run the night on a Dask cluster.")
@click.option("--dry-run", is_flag=True, help="Show the night's builds; change nothing.")
@click.option("--no-upload", is_flag=True, help="Build only: no smoke test upload or index.")
@click.option("--rebuild", metavar="GLOB", multiple=True, help="Rebuild even if succeeded.")
@click.option("--select", "selects", metavar="GLOB", multiple=True, help="Only builds matching.")
@click.option("--keep-container", is_flag=True, help="Keep build containers for debugging.")
def run(
    machine: str | None,
    cluster: str | None,
    dry_run: bool,
    no_upload: bool,
    rebuild: tuple[str, ...],
    selects: tuple[str, ...],
    keep_container: bool,
) -> None:
    """The whole night for this machine: build, publish, index, prune, summarize. Resumable."""
    from nightly.night import pipeline as night
    from nightly.plan.schedule import check_globs

    ctx = Ctx(builds=True)
    check_globs(ctx.config, rebuild, "--rebuild")
    if cluster or (machine is None and ctx.config.cluster.address):
        night.run_cluster(ctx.config, ctx.date, night.ClusterOptions(
            address=cluster or "", machine=machine, dry_run=dry_run, no_upload=no_upload,
            rebuild=rebuild, selects=selects, keep_container=keep_container,
        ))
        return
    m = night.pick_machine(ctx.config, machine)
    share = night.plan_share(ctx.config, m, selects)
    if not dry_run:
        from nightly.builds.run.windows import refuse_here

        refuse_here(share.order)  # (a free-threaded build without its interpreter fails alone)
    opts = night.NightOptions(
        machine=m.name, dry_run=dry_run, no_upload=no_upload, rebuild=rebuild,
        keep_container=keep_container, notify=True, prune=True,
    )
    night.run_local(
        ctx.config, ctx.date, share.order, opts, queues=share.queues, plan_json=share.plan_json,
        estimate_s=share.makespan_s, estimates=share.estimates,
    )


def _refuse_unrunnable(config: Config, builds: Sequence[Build], machine: str | None,
                       executor: str | None) -> None:
    """Builds this host cannot run, refused in one line (exit 2) before anything starts:
    Windows builds anywhere but Windows; free-threaded ones with no such interpreter, when
    nothing else was asked for."""
    from nightly.builds.rules import freethreaded
    from nightly.builds.run import windows
    from nightly.night import pipeline as night

    windows.refuse_here(builds)
    m = night.pick_machine(config, machine, strict=False)
    freethreaded.refuse_missing(config, builds, {
        b.id: executor or m.executor_for(b.target_arch) for b in builds})


@cli.command()
@common_options
@click.argument("version")
@click.option("--rc", type=click.IntRange(min=0), help="Release candidate number (recorded).")
@click.option("--machine", metavar="N", help="This machine's name or index in the config.")
@click.option("--dry-run", is_flag=True, help="Show what would be built; change nothing.")
@click.option("--no-upload", is_flag=True, help="Build only; publish later with `nightly upload`.")
@click.option("--rebuild", metavar="GLOB", multiple=True, help="Rebuild even if succeeded.")
def release(
    version: str,
    rc: int | None,
    machine: str | None,
    dry_run: bool,
    no_upload: bool,
    rebuild: tuple[str, ...],
) -> None:
    """Build the whole matrix as VERSION and publish it to the test channel. Resumable."""
    from nightly.night.release import run_release
    from nightly.plan.schedule import check_globs

    ctx = Ctx(builds=True)
    check_globs(ctx.config, rebuild, "--rebuild")
    run_release(ctx.config, ctx.date, version, rc, machine=machine, dry_run=dry_run,
                no_upload=no_upload, rebuild=rebuild)


@cli.command()
@common_options
@click.option("--tail", default=15, show_default=True, metavar="N",
              help="Log lines shown per failed (or running) build.")
@click.option("--release", "version", metavar="VERSION",
              help="Show release candidate VERSION (with --rc N) instead of a dated night.")
@click.option("--rc", type=click.IntRange(min=0), help="The candidate of --release.")
def status(tail: int, version: str | None, rc: int | None) -> None:
    """The day in the terminal: each build's state, outcome, duration and size, failures
    first with the tail of their logs. Exit status 1 when a build failed."""
    from nightly.history.db import History, history_path
    from nightly.report import status as status_view

    if rc is not None and version is None:
        raise UsageError("--rc N names a candidate of --release VERSION: pass both, "
                         "e.g. `nightly status --release 1.2.0 --rc 1`")
    ctx = Ctx()
    day = existing_day(ctx) if version is None else existing_candidate(ctx, version, rc)
    hp = history_path(ctx.config.root)
    if version is None:
        from nightly.report.livestatus import show_live

        show_live(day)  # a night running on the day: what it does now
    if status_view.show(day, tail=tail, history=History(hp) if hp.exists() else None):
        raise BuildsFailed("a build failed, was interrupted or was not published", reported=True)


@cli.command(name="report")
@common_options
@click.option("--out", "out_path", metavar="FILE",
              help="Also write the page here (its log links made relative to FILE).")
def report_command(
    out_path: str | None,
) -> None:
    """The day as one static, self-contained HTML page: ROOT/DAY/report.html (and --out)."""
    from pathlib import Path

    from nightly.history.db import History, history_path
    from nightly.report import html as report

    ctx = Ctx()
    day = existing_day(ctx)
    hp = history_path(ctx.config.root)
    out = Path(out_path) if out_path else None
    if out is not None and out.is_dir():
        raise UsageError(f"--out {out} is a folder: pass --out FILE (e.g. {out / 'report.html'})")
    try:
        written = report.write_report(day, History(hp) if hp.exists() else None, out)
    except OSError as e:
        raise UsageError(f"cannot write the report to {e.filename or out}: {e.strerror or e} "
                         "(pass --out FILE in a folder you can write)") from e
    click.echo(str(written))
    if out is not None:
        click.echo(str(out))


@cli.group(name="cluster")
def cluster_group() -> None:
    """Cluster mode's set-up (docs/cluster.md)."""


@cluster_group.command(name="certs")
@click.argument("folder", metavar="DIR")
@click.option("--hosts", required=True, metavar="A,B,C", help="The build hosts (names or IPs).")
@click.option("--days", default=825, show_default=True, type=click.IntRange(min=1),
              help="How long the host certificates are valid.")
def cluster_certs(folder: str, hosts: str, days: int) -> None:
    """A CA for the cluster, and a certificate and key for each host and the orchestrator.

    DIR gets ca.pem, ca-key.pem (keep it off the build network) and HOST.pem, HOST-key.pem per
    host plus orchestrator.pem, orchestrator-key.pem. With a CA already in DIR, it issues
    certificates for the new hosts only. Keys are written mode 0600 and never printed."""
    from pathlib import Path

    from nightly.cluster import tls

    made = tls.make_certs(Path(folder), tls.parse_hosts(hosts), days=days)
    click.echo(f"{'created' if made.ca_created else 'reused'} the CA: {made.ca_cert} "
               f"(its key {made.ca_key}: keep it off the build hosts)")
    for i in made.issued:
        if i.name == tls.ORCHESTRATOR:
            click.echo(f"the orchestrator: [cluster] tls_ca_file = {str(made.ca_cert)!r}, "
                       f"tls_cert = {str(i.cert)!r}, tls_key = {str(i.key)!r}")
        else:
            click.echo(f"{i.name}: copy {made.ca_cert.name}, {i.cert.name} and {i.key.name} to it "
                       "(the key readable only by the user running dask there)")


@cluster_group.command(
    name="worker", context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                     "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def cluster_worker(args: tuple[str, ...]) -> None:
    """`dask worker ARGS` (the same arguments: ADDRESS, --tls-*, --name, --resources, ...),
    its address and TLS options checked first: a mistake is one line naming the fix."""
    from nightly.cluster.workerstart import exec_worker

    exec_worker(args)


def _register_groups() -> None:
    from nightly.cli.bisect import bisect_command
    from nightly.cli.images import images
    from nightly.cli.provenance import provenance_group, verify_command
    from nightly.cli.publishing import index, promote, prune, upload, validate

    cli.add_command(images)
    cli.add_command(bisect_command)
    cli.add_command(provenance_group)
    cli.add_command(verify_command)
    for command in (upload, index, prune, promote, validate):
        cli.add_command(command)


_register_groups()


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    opts = Shared()  # the command's --debug lands here (cli.context.common_options)
    # cron's `timeout`, systemd and kill send SIGTERM: stop like Ctrl-C (builds marked
    # interrupted, logs kept, containers removed) instead of dying mid-write.
    import signal

    def _term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _term)
    log_to_stderr()  # warnings of nightly's loggers and the libraries', through `shown`
    # A night that seems stuck: `kill -USR1 PID` prints every thread's stack to stderr (the
    # cron log) and the run goes on, so the release engineer sees where it waits.
    import faulthandler

    try:
        faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)
        stacks = True
    except (OSError, ValueError):  # stderr is no file (an in-process caller captures it)
        stacks = False
    try:
        _run(args, opts)
    finally:
        signal.signal(signal.SIGTERM, previous)  # a caller in-process gets its own back
        if stacks:
            faulthandler.unregister(signal.SIGUSR1)


def _run(args: list[str], opts: Shared) -> None:
    try:
        cli.main(args=args, prog_name="nightly", standalone_mode=False, obj=opts)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(2)
    except NightlyError as e:
        if opts.debug:
            import traceback

            traceback.print_exc()
        if not getattr(e, "reported", False):  # it may quote a remote, a file, a build
            click.echo(f"nightly: error: {shown(str(e))}", err=True)
        sys.exit(e.exit_code)
    except ModuleNotFoundError as e:
        # An optional library (an extra) imported where no command checked it first.
        missing = missing_extra(e)
        if missing is None:
            raise
        if opts.debug:
            import traceback

            traceback.print_exc()
        click.echo(f"nightly: error: {shown(str(missing))}", err=True)
        sys.exit(missing.exit_code)
    except KeyboardInterrupt:
        click.echo("nightly: interrupted", err=True)
        sys.exit(130)
    sys.exit(0)
