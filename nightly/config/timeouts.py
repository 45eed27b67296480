"""[external_timeouts]: how long nightly waits for outside work (a tool it runs, git, a
server) before giving up, one key per thing waited for, in seconds.

The numbers live in nightly/defaults.toml only; a project's nightly.toml may set any of them
(an unknown key is refused with the closest valid one, like every table). A Config carries
them (`config.external_timeouts`); code that has no configuration at hand takes the value as
an argument whose default is `default_timeouts()`, defaults.toml's. Not [timeouts], which
bounds a build. Waits inside nightly (a thread's join, a poll's interval) are not here: they
stay constants beside the code, each with its reason.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from nightly.config.reader import Table, defaults_table

SECTION = "external_timeouts"


@dataclass(frozen=True, kw_only=True)
class ExternalTimeouts:
    """Seconds per thing waited for; defaults.toml's [external_timeouts] says what each is."""

    git_checkout: float
    git_log: float
    git_branch: float
    bisect_git: float
    source_date: float
    diffoscope: float
    apt_listing: float
    debootstrap_listing: float
    ensurepip_version: float
    sccache_version: float
    page_fetch: float
    package_download: float
    venv: float
    import_check: float
    pip_install: float
    notify_command: float
    smtp: float
    engine_api: float
    engine_read: float
    s3_connect: float
    s3_read: float
    anaconda_upload: float
    anaconda_copy: float
    twine_upload: float
    qemu_run: float


KEYS = tuple(f.name for f in dataclasses.fields(ExternalTimeouts))


def parse_external_timeouts(top: Table) -> ExternalTimeouts:
    """[external_timeouts] of a configuration (laid over the defaults): every key a positive
    duration; an unknown key is a ConfigError naming the closest valid one."""
    t = top.table(SECTION)
    values = {key: t.duration(key) for key in KEYS}
    t.finish(valid=KEYS)
    return ExternalTimeouts(**values)


@functools.cache
def default_timeouts() -> ExternalTimeouts:
    """defaults.toml's [external_timeouts]: for code that no configuration reaches."""
    return parse_external_timeouts(defaults_table())
