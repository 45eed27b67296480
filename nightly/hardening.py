"""Keeping credentials out of a build's reach (docs/security.md).

- `make_undumpable`: prctl(PR_SET_DUMPABLE, 0) for this process. Other processes of the same
  user (a recipe, whatever it starts) can then read neither its /proc/<pid>/environ nor its
  memory; /proc/<pid>/ of a non-dumpable process belongs to root. Children started by exec
  are dumpable again (the kernel resets the flag), so this protects nightly only.
- `recipe_user`: who the local executor runs recipes as (`[executor.local] user`); when
  nightly runs as root with credentials around, running recipes as root must be asked for.
"""

from __future__ import annotations

import ctypes
import os
import pwd
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from nightly.errors import ConfigError

PR_SET_DUMPABLE = 4
USER_KEY = "executor.local.user"


def make_undumpable() -> bool:
    """True when the kernel took it (Linux); elsewhere nothing happens."""
    try:
        # The process's own symbols (libc's among them): find_library would run ldconfig.
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


@dataclass(frozen=True, kw_only=True)
class BuildUser:
    """The account recipes run as, when it is not nightly's own."""

    name: str
    uid: int
    gid: int
    home: str

    def setpriv(self) -> list[str]:
        """The command prefix that runs what follows as this user (util-linux's setpriv:
        real and effective ids, its groups, no capabilities kept)."""
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups", "--"]


# What this module reads of the configuration (nightly.config.Config, a layer above: named
# here by what it reads, so mypy checks each call with a Config against it).
class _Publish(Protocol):
    @property
    def url(self) -> str: ...
    @property
    def anaconda_user(self) -> str: ...
    @property
    def pypi_url(self) -> str: ...


class _Cache(Protocol):
    @property
    def enabled(self) -> bool: ...
    @property
    def url(self) -> str: ...


class _Notify(Protocol):
    @property
    def smtp_user(self) -> str: ...


class _Provenance(Protocol):
    @property
    def key(self) -> Path | None: ...


class _Project(Protocol):
    @property
    def source(self) -> str: ...


class _Local(Protocol):
    @property
    def user(self) -> str: ...


class HardeningConfig(Protocol):
    """The settings hardening reads: its credentials, the folders builds see, the build user."""

    @property
    def path(self) -> Path: ...
    @property
    def root(self) -> Path: ...
    @property
    def recipes(self) -> Path: ...
    @property
    def project(self) -> _Project: ...
    @property
    def local(self) -> _Local: ...
    @property
    def publish(self) -> _Publish: ...
    @property
    def cache(self) -> _Cache: ...
    @property
    def notify(self) -> _Notify: ...
    @property
    def provenance(self) -> _Provenance: ...


def credential_settings(config: HardeningConfig) -> list[str]:
    """The settings of `config` that make nightly hold credentials (publishing, the compiler
    cache's S3 store, SMTP)."""
    out = []
    pub, cache = config.publish, config.cache
    if pub.url.startswith("s3://"):
        out.append("publish.url")
    if pub.anaconda_user:
        out.append("publish.conda.anaconda_user")
    if pub.pypi_url:
        out.append("publish.pypi.repository_url")
    if cache.enabled and cache.url:
        out.append("cache.url")
    if config.notify.smtp_user:
        out.append("notify.smtp_user")
    if config.provenance.key is not None:
        out.append("provenance.key")  # whoever reads it signs anything as the site
    return out


KEY_KEY = "provenance.key"


def check_signing_key(config: HardeningConfig, user: BuildUser | None) -> None:
    """The signing key is a credential: a build must not be able to read it. ConfigError,
    naming the fix, when the key file is readable by anyone but its owner, belongs to the
    build user, or lies in a folder builds are given or mounted (the root with its day
    folders, the recipes, a local source)."""
    key = config.provenance.key
    if key is None:
        return
    file = str(config.path)
    path = Path(key)
    try:
        st = os.stat(path)
    except OSError as e:
        raise ConfigError(f"cannot read the provenance signing key {path}: {e.strerror}",
                          file=file, key=KEY_KEY,
                          hint="point it at the provenance.key `nightly provenance keygen` "
                          "wrote") from e
    if st.st_mode & 0o077:
        raise ConfigError(
            f"the provenance signing key {path} has mode {st.st_mode & 0o777:04o}: other users "
            "(a build among them) can read it", file=file, key=KEY_KEY,
            hint=f"chmod 600 {path}")
    if user is not None and st.st_uid == user.uid:
        raise ConfigError(
            f"the provenance signing key {path} belongs to the build user '{user.name}', "
            "whose recipes could read it", file=file, key=KEY_KEY,
            hint=f"chown {os.geteuid()} {path} (nightly's own user), then chmod 600 {path}")
    real = path.resolve()
    for setting, folder in _build_folders(config):
        if folder is not None and real.is_relative_to(folder):
            raise ConfigError(
                f"the provenance signing key {path} is inside {setting} ({folder}), which "
                "builds are given or mounted", file=file, key=KEY_KEY,
                hint="move the key to a folder of its own (e.g. /etc/nightly/keys, mode 0700)")


def _build_folders(config: HardeningConfig) -> list[tuple[str, Path | None]]:
    """(setting, resolved folder) of what a build can read: the root, recipes, local source."""
    out: list[tuple[str, Path | None]] = [
        ("root", config.root.resolve()), ("recipes", config.recipes.resolve())]
    source = config.project.source
    if source and "://" not in source and not source.startswith("git@"):
        base = config.path.parent
        out.append(("project.source", (base / source).resolve()))
    return out


def recipe_user(config: HardeningConfig) -> BuildUser | None:
    """The user recipes run as (None: nightly's own). Raises ConfigError when nightly is root,
    the configuration uses credentials and it does not say who builds."""
    name = config.local.user
    file = str(config.path)
    me = os.geteuid()
    if not name:
        needs = credential_settings(config)
        if me == 0 and needs:
            raise ConfigError(
                f"nightly runs as root with credentials ({', '.join(needs)}) that a recipe "
                "running as root could read", file=file, key=USER_KEY,
                hint='set user = "ACCOUNT" to build as an unprivileged account, or '
                'user = "root" to run recipes as root knowingly; or use the container executor',
            )
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError as e:
        raise ConfigError(f"no user '{name}' on this machine", file=file, key=USER_KEY,
                          hint="create the account or name an existing one") from e
    if entry.pw_uid == me:
        return None
    if me != 0:
        raise ConfigError(f"running recipes as '{name}' needs nightly to run as root",
                          file=file, key=USER_KEY,
                          hint="leave it empty to build as the user running nightly")
    return BuildUser(name=name, uid=entry.pw_uid, gid=entry.pw_gid, home=entry.pw_dir)


__all__ = ["KEY_KEY", "USER_KEY", "BuildUser", "HardeningConfig", "check_signing_key",
           "credential_settings",
           "make_undumpable", "recipe_user"]
