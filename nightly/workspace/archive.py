"""The one way nightly unpacks an archive (a tar of any compression, a zip, a wheel), read as
untrusted whoever made it: an sdist for `nightly init`, the day's source and recipes staged
for a cluster worker, the wheels of a CUDA toolkit or of a cross build's test.

- every member's name passes `nightly.files.confined` (relative, no `..`, no backslash, no
  control character); with `top`, every member lies under that one top folder, which is
  stripped;
- only regular files and folders are written, created exclusively without following links
  (a member under a link is refused); with `links`, symbolic links whose target stays inside
  once everything is unpacked, and hard links to a file unpacked before; a device or a fifo
  refuses the archive; files get mode 0644 (0755 when executable), never set-id bits;
- at most `Limits.members` members and `Limits.total_bytes` unpacked, and never more than
  `Limits.ratio` times the archive's own size (`Limits.ratio_floor` allowed to any archive);
- `unpack` writes a fresh folder beside `dest` and renames it into place once complete (a
  refused archive leaves nothing behind); `unpack_into` adds to a folder that exists (wheels
  installed side by side), a file of the same name replaced.
"""

from __future__ import annotations

import os
import posixpath
import stat
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from nightly.errors import NightlyError
from nightly.files import confined, discard_tree

_CHUNK = 1 << 20


@dataclass(frozen=True)
class Limits:
    """How much an archive may unpack to."""

    members: int = 100_000
    total_bytes: int = 2 << 30
    ratio: int = 100
    ratio_floor: int = 64 << 20

    def bytes_for(self, archive: Path) -> int:
        return min(self.total_bytes, max(self.ratio_floor, self.ratio * archive.stat().st_size))


# Wheels nightly installs or takes apart (a CUDA toolkit's are gigabytes unpacked).
WHEEL_LIMITS = Limits(members=1_000_000, total_bytes=64 << 30, ratio=1000)


@dataclass(frozen=True, kw_only=True)
class Member:
    """One member as judged: its path (below `top`), what it is, its size, its mode."""

    name: str  # as in the archive, for messages
    rel: tuple[str, ...]
    kind: str  # "file" | "dir" | "symbolic link" | "hard link" | what else (refused)
    size: int
    executable: bool
    target: str = ""  # a link's


@dataclass
class _Run:
    archive: Path
    root: Path
    error: type[NightlyError]
    links: bool
    replace: bool
    keep: Callable[[tuple[str, ...]], bool] | None
    made: set[Path] = field(default_factory=set)  # folders known to be real folders
    symlinks: list[Path] = field(default_factory=list)

    def refuse(self, why: str) -> NightlyError:
        return self.error(f"{self.archive} is refused, nothing was unpacked: {why}")


def unpack(archive: Path, dest: Path, *, top: str | None = None,
           error: type[NightlyError] = NightlyError, links: bool = False,
           limits: Limits = Limits(),
           keep: Callable[[tuple[str, ...]], bool] | None = None) -> Path:
    """`archive` unpacked as the new folder `dest` (an error when it exists). `keep`: which
    members (by path) are written; the others are judged and skipped."""
    if dest.exists() or dest.is_symlink():
        raise error(f"cannot unpack {archive}: {dest} exists")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.unpacking-", dir=dest.parent))
    try:
        _unpack(_Run(archive, tmp, error, links, False, keep), top, limits)
        os.chmod(tmp, 0o755)
        os.rename(tmp, dest)
    except BaseException:
        discard_tree(tmp)
        raise
    return dest


def unpack_into(archive: Path, dest: Path, *, error: type[NightlyError] = NightlyError,
                limits: Limits = Limits()) -> Path:
    """`archive`'s files and folders added to the folder `dest` (made when missing), a file
    of the same name replaced: wheels unpacked side by side as pip installs them."""
    dest.mkdir(parents=True, exist_ok=True)
    _unpack(_Run(archive, dest, error, False, True, None), None, limits)
    return dest


def _unpack(run: _Run, top: str | None, limits: Limits) -> None:
    count, total = 0, 0
    try:
        limit = limits.bytes_for(run.archive)
        for member, stream in _members(run, top):
            count += 1
            if count > limits.members:
                raise run.refuse(f"more than {limits.members} members")
            total += member.size
            if total > limit:
                raise run.refuse(f"it unpacks to more than {limit >> 20} MiB (at most "
                                 f"{limits.ratio} times its size, {limits.total_bytes >> 20} "
                                 "MiB in all)")
            if run.keep is None or run.keep(member.rel):
                _write(run, member, stream)
        for link in run.symlinks:  # every link in place: where each one leads is final
            rel = link.relative_to(run.root).as_posix()
            if confined(rel, run.root) is None:
                raise run.refuse(f"the link {rel!r} leads out of the archive's folder")
    except NightlyError:
        raise
    except (OSError, EOFError, tarfile.TarError, zipfile.BadZipFile, ValueError) as e:
        raise run.error(f"cannot unpack {run.archive}: {e}") from e
    if count == 0:
        raise run.refuse("it is empty")


def _parent(run: _Run, rel: tuple[str, ...]) -> Path:
    """The member's folder, made as real folders (a link on the way refuses it)."""
    folder = run.root
    for part in rel[:-1]:
        folder = folder / part
        if folder in run.made:
            continue
        try:
            st = os.lstat(folder)
        except FileNotFoundError:
            os.mkdir(folder, 0o755)
        else:
            if not stat.S_ISDIR(st.st_mode):
                raise run.refuse(f"a member lies under {'/'.join(rel)!r}, which is no folder")
        run.made.add(folder)
    return folder


def _write(run: _Run, member: Member, stream: IO[bytes] | None) -> None:
    if not member.rel:
        if member.kind == "dir":
            return
        raise run.refuse(f"member {member.name!r} is a file where the top folder is")
    target = _parent(run, member.rel) / member.rel[-1]
    if member.kind == "dir":
        if not os.path.isdir(target) or os.path.islink(target):
            os.mkdir(target, 0o755)
        run.made.add(target)
        return
    if member.kind == "symbolic link" and run.links:
        os.symlink(member.target, target)
        run.symlinks.append(target)
        return
    if member.kind == "hard link" and run.links:
        source = run.root / member.target
        if not stat.S_ISREG(os.lstat(source).st_mode):
            raise run.refuse(f"the hard link {member.name!r} is not to a file")
        os.link(source, target, follow_symlinks=False)
        return
    if member.kind != "file":
        raise run.refuse(f"member {member.name!r} is a {member.kind}; only files and folders "
                         "are unpacked")
    if run.replace and os.path.lexists(target) and not os.path.isdir(target):
        os.unlink(target)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(target, flags, 0o755 if member.executable else 0o644)
    except FileExistsError as e:
        raise run.refuse(f"member {member.name!r} appears twice") from e
    written = 0
    with os.fdopen(fd, "wb") as out:
        while stream is not None:
            chunk = stream.read(_CHUNK)
            if not chunk:
                break
            written += len(chunk)
            if written > member.size:  # never more than its header said (and was counted)
                raise run.refuse(f"member {member.name!r} is larger than it says")
            out.write(chunk)


def _members(run: _Run, top: str | None) -> Iterator[tuple[Member, IO[bytes] | None]]:
    if zipfile.is_zipfile(run.archive):
        with zipfile.ZipFile(run.archive) as z:
            for zinfo in z.infolist():
                member = _zip_member(run, zinfo, top)
                if member.kind != "file":
                    yield member, None
                    continue
                with z.open(zinfo) as zstream:
                    yield member, zstream
        return
    # Streamed ("r|*"): each member is judged from its header before its data is read.
    with tarfile.open(run.archive, mode="r|*") as tar:
        for tinfo in tar:
            member = _tar_member(run, tinfo, top)
            if member.kind != "file":
                yield member, None
                continue
            stream = tar.extractfile(tinfo)
            yield member, stream
            if stream is not None:
                stream.close()


def _tar_member(run: _Run, info: tarfile.TarInfo, top: str | None) -> Member:
    if info.isreg():
        kind = "file"
    elif info.isdir():
        kind = "dir"
    else:
        kind = ("symbolic link" if info.issym() else "hard link" if info.islnk()
                else "device" if info.isdev() and not info.isfifo() else "fifo" if info.isfifo()
                else "special member")
    rel = _rel(run, info.name, top)
    target = ""
    if kind == "symbolic link" and run.links:
        joined = posixpath.normpath(posixpath.join(*rel[:-1], info.linkname)) if rel else ""
        if info.linkname.startswith("/") or confined(joined) is None:
            raise run.refuse(f"the link {info.name!r} leads out of the archive's folder")
        target = info.linkname
    elif kind == "hard link" and run.links:
        target = "/".join(_rel(run, info.linkname, top))
    return Member(name=info.name, rel=rel, kind=kind, target=target,
                  size=max(0, info.size) if kind == "file" else 0,
                  executable=bool(info.mode & 0o111))


def _zip_member(run: _Run, info: zipfile.ZipInfo, top: str | None) -> Member:
    mode = (info.external_attr >> 16) & 0xFFFF
    fmt = stat.S_IFMT(mode)
    if info.is_dir():
        kind = "dir" if fmt in (0, stat.S_IFDIR) else "special member"
    elif fmt in (0, stat.S_IFREG):
        kind = "file"
    else:
        kind = "symbolic link" if fmt == stat.S_IFLNK else "special member"
    return Member(name=info.filename, rel=_rel(run, info.filename, top), kind=kind,
                  size=info.file_size if kind == "file" else 0, executable=bool(mode & 0o111))


def _rel(run: _Run, name: str, top: str | None) -> tuple[str, ...]:
    """The member's path (below `top`); refuses any other place."""
    if "\\" in name or "\0" in name or name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise run.refuse(f"member {name!r} has an absolute or foreign path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if parts and confined("/".join(parts)) is None:
        raise run.refuse(f"member {name!r} leads out of its folder ('..')")
    if top is None:
        return tuple(parts)
    if not parts or parts[0] != top:
        raise run.refuse(f"member {name!r} is outside the top folder {top}/")
    return tuple(parts[1:])
