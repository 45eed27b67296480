"""What every command shares: --config, --root, --date and --debug, kept in one `Shared`
object on click's context (cli.main makes it and reads --debug from it after a failure);
the loaded config and the day. Only click here: `nightly --help` imports nothing of the core."""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import click

from nightly.errors import UsageError

if TYPE_CHECKING:
    from nightly.workspace import Day

F = TypeVar("F", bound=Callable[..., object])

_DATE_RE = re.compile(r"^(\d{4})_(\d{2})_(\d{2})$", re.ASCII)  # not "２０２４"


def parse_date(text: str | None) -> dt.date:
    if text is None:
        return dt.date.today()
    m = _DATE_RE.match(text.strip())
    if not m:
        raise UsageError(f"--date '{text}' is not a date: write YYYY_MM_DD, e.g. 2019_01_31")
    try:
        return dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError as e:
        raise UsageError(f"--date '{text}' is not a real date ({e})") from e


@dataclass
class Shared:
    """The options every command takes, as given on the command line."""

    config_path: str | None = None
    root: str | None = None
    date_text: str | None = None
    debug: bool = False


def _store(name: str) -> Callable[[click.Context, click.Parameter, object], object]:
    def callback(ctx: click.Context, _param: click.Parameter, value: object) -> object:
        if value is not None and value is not False:
            setattr(ctx.ensure_object(Shared), name, value)
        return value

    return callback


config_option = click.option(
    "--config", "config_path", metavar="FILE", expose_value=False,
    callback=_store("config_path"),
    help="Configuration file (default ./nightly.toml, else $NIGHTLY_CONFIG).",
)
debug_option = click.option("--debug", is_flag=True, expose_value=False, callback=_store("debug"),
                            help="Show tracebacks.")


def common_options(f: F) -> F:
    """--config, --root, --date and --debug, which every command takes (into `Shared`)."""
    options = [
        config_option,
        click.option("--root", metavar="DIR", expose_value=False, callback=_store("root"),
                     help="Where dated day folders live (overrides the config)."),
        click.option("--date", "date_text", metavar="YYYY_MM_DD", expose_value=False,
                     callback=_store("date_text"), help="The day (default: today)."),
        debug_option,
    ]
    for option in reversed(options):
        f = option(f)
    return f


def shared() -> Shared:
    """This command's shared options."""
    return click.get_current_context().ensure_object(Shared)


class Ctx:
    """What every command needs: the loaded config and the day (from the shared options)."""

    def __init__(self, *, builds: bool = False) -> None:
        from nightly import config as cfg
        from nightly.hardening import make_undumpable

        # Before any credential is read: a recipe, or anything else this user runs, cannot
        # read this process's environment or memory (docs/security.md).
        make_undumpable()
        opts = shared()
        self.date = parse_date(opts.date_text)
        self.config = cfg.load(cfg.find_config_path(opts.config_path), root_override=opts.root)
        check_root(self.config.root, given=opts.root is not None)
        if builds:
            # Commands that plan builds (plan, run, build, release) need every recipe of the
            # matrix: checked before anything of the night is created on disk.
            from nightly.config.recipes import check_recipes

            check_recipes(self.config)


# Kernel file systems: nothing nightly writes belongs there, and reading them as day folders
# only gives strange errors.
_NOT_ROOTS = ("/proc", "/sys", "/dev")


def check_root(root: str | os.PathLike[str], *, given: bool) -> None:
    """The root is a folder (or does not exist yet), outside the kernel's file systems."""
    what = f"--root {root}" if given else f"root ({root})"
    try:
        real = os.path.realpath(root)
        if os.path.exists(real) and not os.path.isdir(real):
            raise UsageError(f"{what} is not a folder: pass --root DIR, a folder for day folders")
    except (OSError, ValueError) as e:
        raise UsageError(f"{what} cannot be used: {e}") from e
    for kernel in _NOT_ROOTS:
        if real == kernel or real.startswith(kernel + "/"):
            raise UsageError(f"{what} is inside {kernel}: pass --root DIR, a folder for day "
                             "folders")


def existing_day(ctx: Ctx) -> Day:
    from nightly.workspace import Day

    day = Day(ctx.config.root, ctx.date)
    if not day.state_path.exists():
        raise UsageError(
            f"no night in {day.path} (no state.json): run `nightly run` first, or pass --date"
        )
    return day


def existing_candidate(ctx: Ctx, version: str, rc: int | None) -> Day:
    """The folder of release candidate VERSION[-rcN] (`nightly release`), which must exist."""
    from nightly.workspace.candidate import candidate_name, check_version, release_day

    day = release_day(ctx.config, check_version(version), rc)
    if not day.state_path.exists():
        rerun = f"nightly release {version}" + (f" --rc {rc}" if rc is not None else "")
        raise UsageError(f"no release candidate {candidate_name(version, rc)} under "
                         f"{ctx.config.root}: build it with `{rerun}` first")
    return day


__all__ = [
    "Ctx", "Shared", "common_options", "config_option", "debug_option", "existing_candidate",
    "existing_day",
    "parse_date", "shared",
]
