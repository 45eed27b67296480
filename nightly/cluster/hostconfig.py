"""A worker host's own settings: who builds on this host, and where.

The orchestrator sends the night's configuration with each task, but whether a host builds as
an unprivileged account, and in which folder, is the host's business: the submitting machine
may not even have that account. So a worker takes `[executor.local] user` and `build_dir`
from the file `$NIGHTLY_WORKER_CONFIG` names (set in the worker service's environment), never
from the night's configuration:

    # /etc/nightly/worker.toml
    [executor.local]
    user = "nightly-build"          # build as this account, in its build area
    build_dir = "/srv/nightly-area" # optional; default /var/tmp/nightly-<user>

Without the variable the host's builds run as the worker's own user. The builds then run as on
one machine with that setting (builds/userarea.py, builds/session.py; docs/cluster.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from nightly.config import Config
from nightly.config.reader import read_toml
from nightly.errors import ConfigError

ENV = "NIGHTLY_WORKER_CONFIG"
KEYS = ("user", "build_dir")


@dataclass(frozen=True, kw_only=True)
class HostSettings:
    user: str = ""  # "": the worker's own user
    build_dir: str = ""  # "": the build area's default (/var/tmp/nightly-<user>)
    file: Path | None = None  # where they were read (named by errors about them)


def host_settings(environ: Mapping[str, str] | None = None) -> HostSettings:
    """This host's settings, from the file $NIGHTLY_WORKER_CONFIG names (none: the defaults).
    ConfigError naming the file and the key for anything else in it."""
    env = os.environ if environ is None else environ
    name = env.get(ENV, "")
    if not name:
        return HostSettings()
    path = Path(name)
    if not path.is_file():
        raise ConfigError(f"no such file (${ENV} names it)", file=name,
                          hint=f"write the worker host's [executor.local] there, or unset {ENV} "
                          "in the worker's environment")
    data, _ = read_toml(path)
    executor = data.get("executor", {})
    if not isinstance(executor, dict):
        raise ConfigError("must be a table", file=name, key="executor")
    unknown = sorted(set(data) - {"executor"}) + [f"executor.{k}" for k in sorted(executor)
                                                  if k != "local"]
    if unknown:
        raise ConfigError(f"unknown setting for a worker host: {unknown[0]}", file=name,
                          hint="a worker host sets only [executor.local] user and build_dir "
                          "(docs/cluster.md)")
    local = executor.get("local", {})
    if not isinstance(local, dict):
        raise ConfigError("must be a table", file=name, key="executor.local")
    values: dict[str, str] = {}
    for key, value in local.items():
        if key not in KEYS:
            raise ConfigError(f"unknown key {key!r}", file=name, key="executor.local",
                              hint=f"a worker host sets only {' and '.join(KEYS)}")
        if not isinstance(value, str):
            raise ConfigError("must be a string", file=name, key=f"executor.local.{key}")
        values[key] = value
    build_dir = values.get("build_dir", "")
    if build_dir:  # relative to the file, as a nightly.toml's paths are
        build_dir = str(path.parent.absolute() / os.path.expanduser(build_dir))
    return HostSettings(user=values.get("user", ""), build_dir=build_dir, file=path)


def on_this_host(config: Config, host: HostSettings) -> Config:
    """The night's configuration with this host's build user and build area: the submitting
    machine's `[executor.local] user` and `build_dir` never decide them here."""
    local = replace(config.local, user=host.user, build_dir=host.build_dir)
    return replace(config, local=local, path=host.file or config.path)


__all__ = ["ENV", "HostSettings", "host_settings", "on_this_host"]
