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
import ctypes.util
import os
import pwd
from dataclasses import dataclass

from nightly.errors import ConfigError

PR_SET_DUMPABLE = 4
USER_KEY = "executor.local.user"


def make_undumpable() -> bool:
    """True when the kernel took it (Linux); elsewhere nothing happens."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
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


def credential_settings(config: object) -> list[str]:
    """The settings of `config` that make nightly hold credentials (publishing, the compiler
    cache's S3 store, SMTP)."""
    out = []
    pub, cache, notify = (getattr(config, n, None) for n in ("publish", "cache", "notify"))
    if pub is not None:
        if pub.url.startswith("s3://"):
            out.append("publish.url")
        if pub.anaconda_user:
            out.append("publish.conda.anaconda_user")
        if pub.pypi_url:
            out.append("publish.pypi.repository_url")
    if cache is not None and cache.enabled and cache.url:
        out.append("cache.url")
    if notify is not None and notify.smtp_user:
        out.append("notify.smtp_user")
    return out


def recipe_user(config: object) -> BuildUser | None:
    """The user recipes run as (None: nightly's own). Raises ConfigError when nightly is root,
    the configuration uses credentials and it does not say who builds."""
    name = str(getattr(getattr(config, "local", None), "user", "") or "")
    file = str(getattr(config, "path", "") or "") or None
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


__all__ = ["USER_KEY", "BuildUser", "credential_settings", "make_undumpable", "recipe_user"]
