"""An sdist unpacked for `nightly init`, as untrusted input.

An sdist is one folder `<name>-<version>/` (PyPA's sdist format); `nightly init SDIST` unpacks
it beside the config. The archive comes from anywhere, so it is read as hostile:

- every member must lie under that one top folder (named like the archive); a member outside
  it, an absolute name, a `..` part, a backslash or a `.git` folder (a repository nightly would
  clone from, its config and hooks run on the host) refuses the archive;
- only regular files and folders are written: a symbolic or hard link, a device, a fifo
  refuses the archive; files get mode 0644 (0755 when executable), never set-id bits;
- at most MAX_MEMBERS members and MAX_TOTAL_BYTES unpacked, and never more than MAX_RATIO
  times the archive's own size (with RATIO_FLOOR_BYTES allowed to any archive): a 1 MB
  archive does not fill a disk;
- it is written into a fresh folder made beside the destination, renamed into place only
  once complete and removed on any failure, so a refused archive leaves nothing behind and
  nothing half-unpacked is ever used. Files are created exclusively without following links.

tarfile's `filter="data"` makes similar checks for tar members; the ones here are nightly's
own so that a zip gets the same, and so that the top folder and the sizes are checked too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from nightly.errors import UsageError

SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".zip")
# Bounds (docs/security.md). numpy's sdist: ~9,000 members, ~90 MB unpacked, ratio ~5.
MAX_MEMBERS = 100_000
MAX_TOTAL_BYTES = 2 << 30
MAX_RATIO = 100
RATIO_FLOOR_BYTES = 64 << 20
_CHUNK = 1 << 20


@dataclass(frozen=True, kw_only=True)
class Member:
    """One archive member, as nightly judges it: its path below the top folder (empty for
    the top folder itself), what it is, its size, whether it is executable."""

    name: str  # as in the archive, for messages
    rel: tuple[str, ...]
    kind: str  # "file" | "dir" | what else it is (refused)
    size: int
    executable: bool


def sdist_stem(archive: Path) -> str:
    """`foo-1.0` of `foo-1.0.tar.gz`; a usage error for a name that is no sdist's."""
    for suffix in SUFFIXES:
        if archive.name.endswith(suffix):
            return archive.name[: -len(suffix)]
    raise UsageError(f"{archive} is neither a folder nor an sdist (.tar.gz, .zip)")


def unpack_sdist(archive: Path, dest_dir: Path) -> Path:
    """The sdist `archive` unpacked as `dest_dir/<name>-<version>` (its top folder), checked
    as the module doc says. Refuses a destination that exists: nothing is ever reused."""
    stem = sdist_stem(archive)
    dest = dest_dir / stem
    if dest.exists() or dest.is_symlink():
        raise UsageError(
            f"{dest} exists (unpacked before?): run `nightly init {dest}` to use that folder, "
            f"or remove it to unpack {archive.name} again"
        )
    try:
        limit = min(MAX_TOTAL_BYTES, max(RATIO_FLOOR_BYTES, MAX_RATIO * archive.stat().st_size))
        tmp = Path(tempfile.mkdtemp(prefix=f".{stem}.unpacking-", dir=dest_dir))
    except OSError as e:
        raise UsageError(f"cannot unpack {archive} into {dest_dir}: {e.strerror or e}") from e
    try:
        _unpack_into(archive, stem, tmp, limit)
        os.chmod(tmp, 0o755)
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def _unpack_into(archive: Path, stem: str, tmp: Path, limit: int) -> None:
    count, total = 0, 0
    try:
        for member, stream in _members(archive, stem):
            count += 1
            if count > MAX_MEMBERS:
                raise _refuse(archive, f"more than {MAX_MEMBERS} members")
            total += member.size
            if total > limit:
                raise _refuse(archive, f"it unpacks to more than {limit >> 20} MiB (at most "
                              f"{MAX_RATIO} times its size, {MAX_TOTAL_BYTES >> 30} GiB in all)")
            _write(tmp, member, stream, archive)
    except (OSError, EOFError, tarfile.TarError, zipfile.BadZipFile, ValueError) as e:
        # OSError here is the archive's (a truncated stream, a CRC error, a name twice):
        # the folder it was written into is removed by the caller.
        raise UsageError(f"cannot unpack {archive}: {e}") from e
    if count == 0:
        raise _refuse(archive, "it is empty")


def _refuse(archive: Path, why: str) -> UsageError:
    return UsageError(f"{archive} is refused, nothing was unpacked: {why}")


def _write(tmp: Path, member: Member, stream: IO[bytes] | None, archive: Path) -> None:
    if member.kind not in ("file", "dir"):
        raise _refuse(archive, f"member {member.name!r} is a {member.kind}; an sdist holds "
                      "only files and folders")
    target = tmp.joinpath(*member.rel)
    if member.kind == "dir":
        target.mkdir(mode=0o755, parents=True, exist_ok=True)
        return
    if not member.rel:
        raise _refuse(archive, f"member {member.name!r} is a file where the top folder is")
    target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(target, flags, 0o755 if member.executable else 0o644)
    except FileExistsError as e:
        raise _refuse(archive, f"member {member.name!r} appears twice") from e
    written = 0
    with os.fdopen(fd, "wb") as out:
        while stream is not None:
            chunk = stream.read(_CHUNK)
            if not chunk:
                break
            written += len(chunk)
            if written > member.size:  # never more than its header said (and was counted)
                raise _refuse(archive, f"member {member.name!r} is larger than it says")
            out.write(chunk)


def _members(archive: Path, stem: str) -> Iterator[tuple[Member, IO[bytes] | None]]:
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as z:
            for zinfo in z.infolist():
                member = _zip_member(zinfo, stem, archive)
                if member.kind != "file":
                    yield member, None
                    continue
                with z.open(zinfo) as zstream:
                    yield member, zstream
        return
    # Streamed ("r|*"): each member is judged from its header before its data is read.
    with tarfile.open(archive, mode="r|*") as tar:
        for tinfo in tar:
            member = _tar_member(tinfo, stem, archive)
            if member.kind != "file":
                yield member, None
                continue
            stream = tar.extractfile(tinfo)
            yield member, stream
            if stream is not None:
                stream.close()


def _tar_member(info: tarfile.TarInfo, stem: str, archive: Path) -> Member:
    if info.isreg():
        kind = "file"
    elif info.isdir():
        kind = "dir"
    else:
        kind = ("symbolic link" if info.issym() else "hard link" if info.islnk()
                else "device" if info.isdev() and not info.isfifo() else "fifo" if info.isfifo()
                else "special member")
    return Member(name=info.name, rel=_rel(info.name, stem, archive), kind=kind,
                  size=max(0, info.size) if kind == "file" else 0,
                  executable=bool(info.mode & 0o111))


def _zip_member(info: zipfile.ZipInfo, stem: str, archive: Path) -> Member:
    mode = (info.external_attr >> 16) & 0xFFFF
    fmt = stat.S_IFMT(mode)
    if info.is_dir():
        kind = "dir" if fmt in (0, stat.S_IFDIR) else "special member"
    elif fmt in (0, stat.S_IFREG):
        kind = "file"
    else:
        kind = "symbolic link" if fmt == stat.S_IFLNK else "special member"
    return Member(name=info.filename, rel=_rel(info.filename, stem, archive), kind=kind,
                  size=info.file_size if kind == "file" else 0, executable=bool(mode & 0o111))


def _rel(name: str, stem: str, archive: Path) -> tuple[str, ...]:
    """The member's path below the top folder; refuses any other place."""
    if "\\" in name or "\0" in name or name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise _refuse(archive, f"member {name!r} has an absolute or foreign path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise _refuse(archive, f"member {name!r} leads out of its folder ('..')")
    if not parts or parts[0] != stem:
        raise _refuse(archive, f"member {name!r} is outside the sdist's top folder {stem}/")
    if ".git" in parts:  # a repository's config and hooks run on the host (nightly clones it)
        raise _refuse(archive, f"member {name!r} is part of a git repository; an sdist has none")
    return tuple(parts[1:])


@contextlib.contextmanager
def removed_on_failure(path: Path | None) -> Iterator[None]:
    """Remove `path` (a folder this command unpacked) when the block fails."""
    try:
        yield
    except BaseException:
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
        raise


__all__ = ["MAX_MEMBERS", "MAX_RATIO", "MAX_TOTAL_BYTES", "RATIO_FLOOR_BYTES", "SUFFIXES",
           "removed_on_failure", "sdist_stem", "unpack_sdist"]
