"""What every command shares: --config, --root, --date and --debug; the loaded config and
the day. Only click here: `nightly --help` imports nothing of the core."""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Callable
from typing import Any, TypeVar

import click

from nightly.errors import UsageError

F = TypeVar("F", bound=Callable[..., Any])

_DATE_RE = re.compile(r"^(\d{4})_(\d{2})_(\d{2})$")


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


def common_options(f: F) -> F:
    """--config, --root, --date and --debug, which every command takes."""

    @click.option(
        "--config",
        "config_path",
        metavar="FILE",
        help="Configuration file (default ./nightly.toml, else $NIGHTLY_CONFIG).",
    )
    @click.option(
        "--root", metavar="DIR", help="Where dated day folders live (overrides the config)."
    )
    @click.option("--date", "date_text", metavar="YYYY_MM_DD", help="The day (default: today).")
    @click.option("--debug", is_flag=True, help="Show tracebacks.")
    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return f(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


class Ctx:
    """What every command needs: the loaded config and the day."""

    def __init__(self, config_path: str | None, root: str | None, date_text: str | None) -> None:
        from nightly import config as cfg

        self.date = parse_date(date_text)
        self.config = cfg.load(cfg.find_config_path(config_path), root_override=root)


def existing_day(ctx: Ctx) -> Any:
    from nightly.workspace import Day

    day = Day(ctx.config.root, ctx.date)
    if not day.state_path.exists():
        raise UsageError(
            f"no night in {day.path} (no state.json): run `nightly run` first, or pass --date"
        )
    return day


__all__ = ["Ctx", "common_options", "existing_day", "parse_date"]
