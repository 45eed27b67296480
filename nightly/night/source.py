"""The day's source: one checkout per day, of the last commit before midnight of the date.

Every machine computes the same commit from the date alone (`git rev-list -1 --before`), so
all machines build the same source without talking to each other. A plain folder (the demo,
or a tree without git) is copied; its commit is recorded as unknown.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path

from nightly.config import Project
from nightly.config.timeouts import ExternalTimeouts, default_timeouts
from nightly.errors import NightlyError, UsageError
from nightly.files.copy import copy_tree
from nightly.jsonvalues import as_str, read_json_object
from nightly.procs import git
from nightly.workspace import remove_tree, write_json

MARKER = ".nightly-source.json"
# What a plain folder's copy leaves out, at any level: caches and earlier builds' leftovers.
NOT_COPIED = ("__pycache__", "*.egg-info", "build", ".pytest_cache")


def _not_copied(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in NOT_COPIED)


@dataclass(frozen=True, kw_only=True)
class Checkout:
    path: Path
    commit: str  # "" when the source is a plain folder
    describe: str  # for the summary: "abc1234 (main, last commit before 2019-01-31 24:00)"


def _git(timeout_s: float, *args: str, cwd: Path | None = None) -> str:
    """A git command of the checkout: [external_timeouts] git_checkout is `timeout_s`."""
    return git(*args, cwd=cwd, timeout=timeout_s, purpose="check out the source")


def _is_url(source: str) -> bool:
    return "://" in source or source.startswith("git@")


def prepare(project: Project, dest: Path, date: dt.date, *, config_dir: Path,
            timeouts: ExternalTimeouts | None = None) -> Checkout:
    """Check out (once) the project's source for `date` into `dest`; reuse it if present."""
    wait = (timeouts or default_timeouts()).git_checkout
    marker = dest / MARKER
    if marker.exists():
        info = read_json_object(marker)
        return Checkout(path=dest, commit=as_str(info.get("commit")),
                        describe=as_str(info.get("describe")))

    source = project.source
    src_path = None if _is_url(source) else (config_dir / os.path.expanduser(source)).resolve()
    if src_path is not None and not src_path.exists():
        raise NightlyError(
            f"project.source '{source}' does not exist ({src_path}); fix project.source in the config"
        )
    tmp = dest.with_name(dest.name + ".partial")
    if tmp.exists():
        remove_tree(tmp)
    if src_path is not None and not (src_path / ".git").exists():
        # A plain folder: copy it. The copy is what every build of the day sees.
        # Any depth, links copied as links (nightly.files.copy).
        copy_tree(src_path, tmp, ignore=_not_copied)
        commit, describe = "", f"copy of {src_path} (not a git checkout)"
    else:
        url = source if src_path is None else str(src_path)
        # A local repository is cloned by copying its objects, never by hard-linking them: a
        # build that writes a file in place must never reach the original repository.
        local = [] if src_path is None else ["--no-hardlinks"]
        if project.ref:
            target = project.ref
            _git(wait, "clone", "--quiet", "--no-checkout", *local, url, str(tmp))
            commit = _git(wait, "rev-parse", f"{target}^{{commit}}", cwd=tmp)
            why = f"ref {project.ref}"
        else:
            try:
                _git(wait, "clone", "--quiet", "--no-checkout", *local, "--branch", project.branch,
                     url, str(tmp))
            except NightlyError:
                _no_such_branch(project.branch, url, wait)
                raise
            midnight = dt.datetime.combine(date + dt.timedelta(days=1), dt.time())
            commit = _git(
                wait, "rev-list", "-1", f"--before={midnight:%Y-%m-%d %H:%M:%S}",
                f"origin/{project.branch}", cwd=tmp,
            )
            if not commit:
                raise NightlyError(
                    f"branch {project.branch} of {url} has no commit before {midnight:%Y-%m-%d %H:%M}"
                )
            why = f"{project.branch}, last commit before {date:%Y-%m-%d} 24:00"
        _git(wait, "checkout", "--quiet", "--detach", commit, cwd=tmp)
        describe = f"{commit[:12]} ({why})"
    write_json(tmp / MARKER, {"commit": commit, "describe": describe})
    if dest.exists():
        remove_tree(dest)
    os.replace(tmp, dest)
    return Checkout(path=dest, commit=commit, describe=describe)


def _no_such_branch(branch: str, url: str, wait: float) -> None:
    """UsageError (one line, exit 2) when `url` has no branch `branch`, naming those it has."""
    try:
        heads = _git(wait, "ls-remote", "--heads", url)
    except NightlyError:
        return  # unreachable: git's own message says why
    names = sorted(line.split("refs/heads/", 1)[1] for line in heads.splitlines()
                   if "refs/heads/" in line)
    if branch not in names:
        raise UsageError(
            f"[project] branch = \"{branch}\" is not a branch of {url} (its branches: "
            f"{', '.join(names) or 'none'}): set branch in [project] to the one to build")
