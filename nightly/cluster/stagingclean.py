"""Empty folders a folder staging store keeps once a day's objects are deleted.

A folder store (nightly.stores.folder) deletes an object as its file and its metadata's file,
never the folders they were in: without this, every attempt of every night would leave its
`DAY/builds/BUILD/TOKEN/` folders (and their twins under `.nightly-store/meta/`) behind.
Folders are opened one component at a time without following a symlink (nightly.stores
.nofollow), and only empty ones are removed (rmdir), so a file a worker is still writing is
never lost: its folder is simply not empty.
"""

from __future__ import annotations

import contextlib
import os
import stat

from nightly.errors import UnsafeEntry
from nightly.stores import FileStore, Store

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_META = (".nightly-store", "meta")  # where a folder store keeps each object's metadata


def prune_empty(store: Store, prefix: str, *, itself: bool = True) -> None:
    """Remove the empty folders below `prefix` (a key prefix, `DAY/builds/BUILD/`), and the
    prefix's own folder when it ends up empty and `itself`; the same below the store's
    metadata. Only for a folder store (an object store has no folders); best effort."""
    if not isinstance(store, FileStore):
        return
    parts = [p for p in prefix.split("/") if p]
    if not parts:
        return
    for base in (parts, [*_META, *parts]):
        with contextlib.suppress(OSError, UnsafeEntry):
            with store.tree.folder(base) as fd:
                _prune_below(fd)
            if itself:
                with store.tree.folder(base[:-1]) as parent:
                    os.rmdir(base[-1], dir_fd=parent)


def _prune_below(fd: int) -> bool:
    """Remove the empty folders below the folder `fd`, deepest first. True when it is left
    empty."""
    with os.scandir(fd) as it:
        names = [e.name for e in it]
    empty = True
    for name in names:
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            empty = False  # a file (or a symlink, never followed) stays, and so does its folder
            continue
        try:
            sub = os.open(name, _DIR, dir_fd=fd)
        except OSError:
            empty = False
            continue
        try:
            sub_empty = _prune_below(sub)
        finally:
            os.close(sub)
        if sub_empty:
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError:
                empty = False  # written to meanwhile
        else:
            empty = False
    return empty


__all__ = ["prune_empty"]
