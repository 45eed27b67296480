"""Small file and process helpers every layer uses (nothing of nightly's own below them).

One definition each: the confinement of a name to a folder, the sha256 of a file, a
time-stamped line appended to a log, the tail of a child's output, this boot's identity, and
a process's identity (pid, start time, boot) to tell the process that wrote a record from a
later one that reused its pid.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import hashlib
import os
import socket
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from nightly.format import shown


def confined(name: str, folder: Path | None = None) -> PurePosixPath | None:
    """`name` (a path written with "/") when it stays inside what it is relative to, else
    None: the one confinement check for names that come from outside (an object key, an
    archive member, a path recorded in a day folder's JSON, a staged package's name).

    It must be relative and plain: not empty, no empty, `.` or `..` part, no backslash, no
    control character. With `folder`, `folder/name` must also stay under `folder` once
    links are resolved (a link that points outside, or a link loop, is None)."""
    parts = name.split("/")
    if (not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts)
            or any(ord(c) < 32 or c == "\\" for c in name)):
        return None
    rel = PurePosixPath(name)
    if folder is not None:
        try:
            if not (folder / rel).resolve().is_relative_to(folder.resolve()):
                return None
        except (OSError, RuntimeError):  # a link loop
            return None
    return rel


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks (packages can be gigabytes)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def append_line(path: Path, line: str) -> None:
    """`<local time> line` at the end of a log file (its folder made if needed); what a build
    or a remote wrote in `line` is shown as data (nightly.format), never as terminal codes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().isoformat(timespec="seconds")
    with path.open("a", encoding="utf-8") as f:
        f.write(f"{stamp} {shown(line)}\n")


def tail(out: str, limit: int = 4000) -> str:
    """":\n<the last `limit` characters of a child's output>" for an error message, or ""."""
    out = out.strip()
    if not out:
        return ""
    if len(out) > limit:
        out = "..." + out[-limit:]
    return ":\n" + out


def boot_id() -> str:
    """This boot's id (Linux), "" elsewhere: a pid recorded under another boot is gone."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def proc_stat(pid: int) -> list[int] | None:
    """Fields 3.. of /proc/PID/stat as ints after the state (index 0 = ppid, 1 = pgrp,
    2 = session, 18 = starttime), or None for a process that is gone or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    try:
        return [int(x) for x in fields[1:21]]
    except ValueError:
        return None


def _start_time(pid: int) -> int | None:
    fields = proc_stat(pid)
    return None if fields is None else fields[18]


def process_identity() -> dict[str, object]:
    """Who this process is (pid, its start time, boot, host): recorded beside what it runs."""
    pid = os.getpid()
    return {"pid": pid, "start": _start_time(pid), "boot": boot_id(), "host": socket.gethostname()}


def process_alive(owner: Mapping[str, Any]) -> bool:
    """Is the process recorded in an owner.json still the one running? Unknown: yes."""
    if owner.get("host") != socket.gethostname():
        return True  # another host's folder (a shared disk): not ours to judge
    if owner.get("boot") and owner.get("boot") != boot_id():
        return False
    try:
        pid = int(owner["pid"])
    except (KeyError, TypeError, ValueError):
        return True
    start = _start_time(pid)
    if start is not None:
        return owner.get("start") in (None, start)
    if Path("/proc").is_dir():
        return False
    return pid_exists(pid)


def pid_exists(pid: int) -> bool:
    """Whether a process numbered `pid` exists (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---------------------------------------------------------------------------- trees
#
# Every tree nightly walks or deletes (a build's folder, the cache store, a day folder) was
# written, at least in part, by a build: any depth (a 1,500-level chain breaks a recursive
# walk with RecursionError, and a path-based one with ENAMETOOLONG), links where folders
# were, folders it cannot read, and a process of it that may still write there. So trees
# are walked without recursion, relative to an open folder (openat with O_NOFOLLOW: a link
# is never followed, whatever is swapped in meanwhile), holding one folder open at a time
# whatever the depth (the way back up is "..", checked to be the folder we came from).

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_REMOVE_PASSES = 20  # a folder found "not empty" again (a writer still at work) is retried
# this many times before remove_tree gives up (after `before_retry`, which kills it).


class TreeChanged(OSError):
    """A folder moved while it was walked (its ".." is no longer the folder above it)."""


@dataclass
class _Level:
    name: str  # in the folder above ("" for the top)
    ident: tuple[int, int]  # (st_dev, st_ino): the way back up must lead here
    pending: list[str]  # sub-folders not yet entered
    passes: int = 0  # how many times it was listed
    prefix: str = ""  # its path relative to the top (walk_tree)


def _open_dir(name: str, dir_fd: int, *, open_up: bool = True) -> int:
    """`name` in `dir_fd` opened as a folder, never through a link; with `open_up`, one the
    owner cannot read is opened up (u+rwx) first, as rm -rf by its owner or root would."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        if not open_up:
            raise
        _chmod_dir(name, dir_fd)
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def _chmod_dir(name: str, dir_fd: int) -> None:
    # fchmodat cannot refuse a link on Linux: pin the folder itself (O_PATH|O_NOFOLLOW) and
    # change it through its descriptor's /proc name.
    pin = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                  dir_fd=dir_fd)
    try:
        mode = stat.S_IMODE(os.fstat(pin).st_mode)
        os.chmod(f"/proc/self/fd/{pin}", mode | stat.S_IRWXU)
    finally:
        os.close(pin)


def _ident(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _up(fd: int, expected: tuple[int, int]) -> int:
    """The folder above `fd` (its ".."), which must be the one we came down from."""
    parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
    if _ident(parent) != expected:
        os.close(parent)
        raise TreeChanged(f"a folder moved while nightly walked it (its parent is no longer "
                          f"{expected})")
    return parent


def _listing(fd: int) -> list[tuple[str, os.stat_result | None]]:
    """(name, lstat or None when it went meanwhile) of each entry of folder `fd`."""
    out: list[tuple[str, os.stat_result | None]] = []
    with os.scandir(fd) as it:
        for e in it:
            try:
                out.append((e.name, e.stat(follow_symlinks=False)))
            except FileNotFoundError:
                out.append((e.name, None))
    return out


@dataclass(frozen=True)
class TreeEntry:
    """One entry met by walk_tree: its path relative to the top (written with "/"), its
    name, its lstat, and its folder's descriptor (open only until the walk goes on: for
    `os.chown(name, dir_fd=..., follow_symlinks=False)` and the like)."""

    rel: str
    name: str
    st: os.stat_result
    dir_fd: int

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.st.st_mode)

    @property
    def is_file(self) -> bool:
        return stat.S_ISREG(self.st.st_mode)


def walk_tree(top: Path | int, *, skip: Callable[[str], bool] | None = None,
              ordered: bool = False) -> Iterator[TreeEntry]:
    """Everything under the folder `top` (a path, or the descriptor of a folder the caller
    opened, left open), a folder before what it holds; links are listed, never followed;
    any depth. A folder whose relative path `skip` accepts is neither
    listed nor entered. `ordered`: each folder's entries in name order, its sub-folders
    entered in that order (the same tree walks the same way: a reproducible archive).
    Nothing when `top` is not a folder (or is a link). Raises OSError for a folder that
    cannot be read, TreeChanged for one moved while it was walked."""
    try:
        fd = os.dup(top) if isinstance(top, int) else os.open(top, _DIR_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as e:
        if e.errno == errno.ELOOP:  # `top` is a link
            return
        raise
    levels = [_Level("", _ident(fd), [])]
    try:
        while True:
            level = levels[-1]
            prefix = level.prefix
            if not level.pending and not level.passes:
                level.passes = 1
                listing = _listing(fd)
                for name, st in sorted(listing, key=lambda e: e[0]) if ordered else listing:
                    rel = f"{prefix}/{name}" if prefix else name
                    if st is None or (skip is not None and stat.S_ISDIR(st.st_mode)
                                      and skip(rel)):
                        continue
                    yield TreeEntry(rel, name, st, fd)
                    if stat.S_ISDIR(st.st_mode):
                        level.pending.append(name)
                if ordered:
                    level.pending.reverse()  # popped from the end: in name order
            if level.pending:
                name = level.pending.pop()
                try:
                    child = _open_dir(name, fd, open_up=False)
                except (FileNotFoundError, NotADirectoryError):
                    continue
                except OSError as e:
                    if e.errno == errno.ELOOP:  # replaced by a link meanwhile
                        continue
                    raise
                os.close(fd)
                fd = child
                levels.append(_Level(name, _ident(fd), [],
                                     prefix=f"{prefix}/{name}" if prefix else name))
                continue
            if len(levels) == 1:
                return
            levels.pop()
            up = _up(fd, levels[-1].ident)
            os.close(fd)
            fd = up
    finally:
        os.close(fd)


def open_tree(top: Path) -> None:
    """Everything under `top` readable by all (folders searchable, executables runnable),
    writable by its owner only; symlinks left as they are (nightly's own copies)."""
    os.chmod(top, 0o755)
    for e in walk_tree(top):
        if e.is_dir or e.is_file:
            os.chmod(e.name, 0o755 if e.is_dir or e.st.st_mode & 0o111 else 0o644,
                     dir_fd=e.dir_fd)


def remove_tree(path: Path, *, before_retry: Callable[[], object] | None = None) -> None:
    """Delete `path` and everything under it, any depth, without following a link (a link
    at `path` itself is removed, not what it points to); read-only and unreadable folders
    are opened up first. A folder still "not empty" once emptied (a leftover process still
    writing in it) is emptied again, after `before_retry` (which kills that process), up to
    _REMOVE_PASSES times; then OSError. Nothing there: nothing to do."""
    try:
        parent_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return  # nor its folder
    try:
        for attempt in range(_REMOVE_PASSES):
            try:
                st = os.stat(path.name, dir_fd=parent_fd, follow_symlinks=False)
            except FileNotFoundError:
                return
            if not stat.S_ISDIR(st.st_mode):
                _unlink(path.name, parent_fd)
                return
            try:
                _empty(path.name, parent_fd)
                os.rmdir(path.name, dir_fd=parent_fd)
                return
            except FileNotFoundError:
                return
            except OSError as e:
                if e.errno != errno.ENOTEMPTY or attempt == _REMOVE_PASSES - 1:
                    raise
            if before_retry is not None:
                before_retry()
            time.sleep(0.01 * (attempt + 1))
    finally:
        os.close(parent_fd)


def _unlink(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except PermissionError:
        os.fchmod(dir_fd, stat.S_IMODE(os.fstat(dir_fd).st_mode) | stat.S_IRWXU)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)


def _empty(name: str, parent_fd: int) -> None:
    """Everything inside folder `name` (of `parent_fd`) deleted, depth first, one folder
    open at a time. A sub-folder refilled meanwhile ("not empty") is entered again."""
    fd = _open_dir(name, parent_fd)
    levels = [_Level(name, _ident(fd), [])]
    refills = 0
    try:
        while True:
            level = levels[-1]
            if not level.pending:
                # Listed again once its sub-folders are gone: what a writer added meanwhile.
                level.passes += 1
                listing = _listing(fd)
                if listing and level.passes > _REMOVE_PASSES:
                    raise OSError(errno.ENOTEMPTY, "still written into while it was deleted",
                                  "/".join(lv.name for lv in levels))
                for entry, st in listing:
                    if st is not None and stat.S_ISDIR(st.st_mode):
                        level.pending.append(entry)
                    else:
                        _unlink(entry, fd)
            if level.pending:
                sub = level.pending.pop()
                try:
                    child = _open_dir(sub, fd)
                except (FileNotFoundError, NotADirectoryError):
                    continue
                except OSError as e:
                    if e.errno != errno.ELOOP:
                        raise
                    _unlink(sub, fd)  # a link swapped in meanwhile: the name goes
                    continue
                os.close(fd)
                fd = child
                levels.append(_Level(sub, _ident(fd), []))
                continue
            if len(levels) == 1:
                return
            done = levels.pop()
            up = _up(fd, levels[-1].ident)
            os.close(fd)
            fd = up
            try:
                os.rmdir(done.name, dir_fd=fd)
            except FileNotFoundError:
                pass
            except PermissionError:
                os.fchmod(fd, stat.S_IMODE(os.fstat(fd).st_mode) | stat.S_IRWXU)
                os.rmdir(done.name, dir_fd=fd)
            except OSError as e:
                if e.errno != errno.ENOTEMPTY or refills >= _REMOVE_PASSES:
                    raise
                refills += 1  # written into meanwhile: empty it again
                levels[-1].pending.append(done.name)
    finally:
        os.close(fd)


def discard_tree(path: Path) -> None:
    """remove_tree for a scratch folder whose removal may fail without harm (it is tried
    again, or it is in a temporary folder): an OSError is ignored."""
    with contextlib.suppress(OSError):
        remove_tree(path)


@contextlib.contextmanager
def scratch_folder(prefix: str, parent: Path | None = None) -> Iterator[Path]:
    """tempfile.TemporaryDirectory for a folder a build's code writes in (a smoke test's, a
    rebuild's): made 0700, deleted at the end with remove_tree (any depth, no link followed);
    what cannot be deleted then (a leftover still writing) stays for its build's clean-up."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield path
    finally:
        discard_tree(path)
