"""The compiler cache's store: written by nightly's own user only, one per project and toolchain.

A build's sccache server runs as the build (its account, or in its container): sccache's
server runs the compilers itself, so a server of nightly's user (root) would run whatever a
build names as root. So the server never writes the store. Instead:

    <[cache] dir>/<project>-<hash of ROOT>/<toolchain>/   the store: nightly's, 0700 folders,
                                                         entries written once and never rewritten
    <build folder>/sccache/                               the build's view: the store's entries
                                                         for this build (SCCACHE_DIR), the build's

Before a build, `fill_view` puts the store's entries into the view: copies (the build's own
inodes) where the build runs as another account or in a container, hard links for a host
build of nightly's own user (which could write the store anyway). After the build (its
recipe ended, its folder taken back), `take_in` copies into the store each entry the view
holds that the store does not: nightly reads the bytes (regular files only, no link
followed, bounded size) and writes a file of its own, linked in place only where no entry of
that name exists. An entry a build rewrote (in its view, or anywhere it can write) never
reaches the store, so it is never served to another build; an entry of the store is never
replaced. `evict` keeps the store under its size cap (least recently taken in goes first).

What this does not give: a build can add entries for keys no build stored yet (sccache trusts
its server's writes), so a malicious commit's night could pre-seed objects for sources the
store has not seen. Such an entry stays in its project's store (never another project's);
docs/cache.md says so.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from nightly.files import remove_tree, walk_tree

VIEW = "sccache"  # <build folder>/sccache: the build's SCCACHE_DIR
MAX_ENTRY = 2 << 30  # a larger file in a view is not a cache entry: never taken in
# sccache's layout: objects at a/b/<hash>, direct-mode entries at preprocessor/a/b/c/<hash>.
_NAME = re.compile(r"^(?:[0-9a-f]/[0-9a-f]|preprocessor/[0-9a-f]/[0-9a-f]/[0-9a-f])/[0-9a-f]{16,128}$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)


def namespace(project: str, root: Path | str) -> str:
    """The store's folder for one project (and nightlies root): another project's builds
    never receive its objects, nor write among them."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", project).strip("._") or "project"
    tag = hashlib.sha256(f"{project}\0{os.path.abspath(root)}".encode()).hexdigest()[:10]
    return f"{slug}-{tag}"


def size_bytes(size: str) -> int:
    m = _SIZE.match(size)
    if m is None:
        raise ValueError(f"cache size {size!r} is not a size")
    return int(float(m.group(1)) * 1024 ** " KMGT".index((m.group(2) or " ").upper()))


def ensure(store: Path, top: Path) -> None:
    """Make `store` (under `top`, the [cache] dir) with every level from `top` down a real
    folder of nightly's own user that no one else may write; raise OSError naming the first
    level that is not."""
    top.mkdir(mode=0o700, parents=True, exist_ok=True)
    level = top
    for part in (None, *store.relative_to(top).parts):
        if part is not None:
            level = level / part
            level.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(level)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise OSError(f"{level} is not a folder only nightly's user writes "
                          f"({stat.filemode(st.st_mode)}, uid {st.st_uid}): remove it")
        if part is not None:
            os.chmod(level, 0o700)


def entries(folder: Path) -> Iterator[tuple[str, os.stat_result]]:
    """(relative name, lstat) of each regular file of `folder` named like a cache entry; no
    link followed."""
    for entry in walk_tree(folder):
        if entry.is_file and _NAME.match(entry.rel):
            yield entry.rel, entry.st


def fill_view(store: Path, view: Path, *, copy: bool) -> int:
    """The build's view of `store` (made afresh): copies, or hard links with `copy` False.
    Returns the number of entries."""
    remove_tree(view)
    view.mkdir(mode=0o755)
    n = 0
    for rel, _st in entries(store):
        dest = view / rel
        dest.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        try:
            _put(store / rel, dest, copy=copy)
        except FileNotFoundError:  # evicted meanwhile (another build's end)
            continue
        n += 1
    return n


def _put(src: Path, dest: Path, *, copy: bool) -> None:
    if not copy:
        try:
            os.link(src, dest, follow_symlinks=False)
            return
        except FileNotFoundError:
            raise
        except OSError:  # another file system: a copy
            pass
    shutil.copyfile(src, dest, follow_symlinks=False)
    os.chmod(dest, 0o644)


def take_in(view: Path, store: Path) -> int:
    """Each entry of `view` the store lacks, as a file nightly writes; never replaces one.
    Returns the number taken in."""
    if not view.is_dir() or view.is_symlink():
        return 0
    n = 0
    for rel, st in entries(view):
        dest = store / rel
        if os.path.lexists(dest) or st.st_size > MAX_ENTRY:
            continue
        try:
            fd = os.open(view / rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as src:
            fst = os.fstat(src.fileno())
            if not stat.S_ISREG(fst.st_mode) or fst.st_size > MAX_ENTRY:
                continue
            dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.{secrets.token_hex(8)}.part")
            out_fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(out_fd, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
        try:
            os.link(tmp, dest)  # never over an entry of the same name
            n += 1
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
    return n


def evict(store: Path, cap: int) -> int:
    """Remove the store's oldest entries until it holds at most `cap` bytes; returns how
    many went."""
    found = sorted(((st.st_mtime, st.st_size, rel) for rel, st in entries(store)))
    total = sum(size for _t, size, _r in found)
    gone = 0
    for _t, size, rel in found:
        if total <= cap:
            break
        (store / rel).unlink(missing_ok=True)
        total -= size
        gone += 1
    return gone


__all__ = ["VIEW", "ensure", "entries", "evict", "fill_view", "namespace", "size_bytes",
           "take_in"]
