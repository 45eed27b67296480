"""A build's folder handed to the build user for its recipe, and taken back when it ends
(docs/security.md, "Root's cron and a build account"). Both walk the tree without recursion
and never follow a link (nightly.files.walk_tree): a build may leave a tree of any depth."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from nightly.files import walk_tree
from nightly.hardening import BuildUser


def give_to(folder: Path, user: BuildUser) -> None:
    """The build's folder (scratch, output, compiler cache tools) to the build user."""
    os.chown(folder, user.uid, user.gid, follow_symlinks=False)
    for e in walk_tree(folder):
        os.chown(e.name, user.uid, user.gid, dir_fd=e.dir_fd, follow_symlinks=False)


def take_back(folder: Path, *, keep: Path) -> None:
    """The build's folder back to nightly once its recipe ended (all but `keep`, its scratch):
    the output and the compiler cache's files, which nightly reads, hashes and publishes, can
    then be neither swapped for a symlink nor changed by the build user's other processes
    (the folder first, so no entry of it can be replaced meanwhile; links are not followed)."""
    def own(name: str | Path, st: os.stat_result, dir_fd: int | None = None) -> None:
        os.chown(name, os.geteuid(), os.getegid(), dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):  # its parent is nightly's now
            os.chmod(name, stat.S_IMODE(st.st_mode) & ~0o7022, dir_fd=dir_fd)

    own(folder, os.lstat(folder))
    skip = str(keep.relative_to(folder)) if keep.is_relative_to(folder) else None
    for e in walk_tree(folder, skip=lambda rel: rel == skip):
        own(e.name, e.st, e.dir_fd)


__all__ = ["give_to", "take_back"]
