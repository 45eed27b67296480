"""A build's folder handed to the build user for its recipe, and taken back when it ends
(docs/security.md, "Root's cron and a build account")."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from nightly.hardening import BuildUser


def give_to(folder: Path, user: BuildUser) -> None:
    """The build's folder (scratch, output, compiler cache tools) to the build user."""
    for root, dirs, files in os.walk(folder):
        for name in (root, *(os.path.join(root, n) for n in (*dirs, *files))):
            os.chown(name, user.uid, user.gid, follow_symlinks=False)


def take_back(folder: Path, *, keep: Path) -> None:
    """The build's folder back to nightly once its recipe ended (all but `keep`, its scratch):
    the output and the compiler cache's files, which nightly reads, hashes and publishes, can
    then be neither swapped for a symlink nor changed by the build user's other processes
    (the folder first, so no entry of it can be replaced meanwhile; links are not followed)."""
    def own(path: str) -> None:
        st = os.lstat(path)
        os.chown(path, os.geteuid(), os.getegid(), follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):  # its parent is nightly's now
            os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o7022)

    own(str(folder))
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if Path(root, d) != keep]
        for name in (*dirs, *files):
            own(os.path.join(root, name))


__all__ = ["give_to", "take_back"]
