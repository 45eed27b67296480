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

The checks are nightly.workspace.archive's, the one unpacker of every archive nightly reads
(tarfile's `filter="data"` makes similar ones for tar members only); this module adds the
sdist's own: its top folder named like the archive, no `.git`, and the bounds below.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from nightly.errors import UsageError
from nightly.files import discard_tree
from nightly.workspace.archive import Limits, unpack

SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".zip")
# Bounds (docs/security.md). numpy's sdist: ~9,000 members, ~90 MB unpacked, ratio ~5.
MAX_MEMBERS = 100_000
MAX_TOTAL_BYTES = 2 << 30
MAX_RATIO = 100
RATIO_FLOOR_BYTES = 64 << 20


def sdist_stem(archive: Path) -> str:
    """`foo-1.0` of `foo-1.0.tar.gz`; a usage error for a name that is no sdist's."""
    for suffix in SUFFIXES:
        if archive.name.endswith(suffix):
            return archive.name[: -len(suffix)]
    raise UsageError(f"{archive} is neither a folder nor an sdist (.tar.gz, .zip)")


def unpack_sdist(archive: Path, dest_dir: Path) -> Path:
    """The sdist `archive` unpacked as `dest_dir/<name>-<version>` (its top folder), checked
    as the module doc says (nightly.workspace.archive does the unpacking). Refuses a
    destination that exists: nothing is ever reused."""
    stem = sdist_stem(archive)
    dest = dest_dir / stem
    if dest.exists() or dest.is_symlink():
        raise UsageError(
            f"{dest} exists (unpacked before?): run `nightly init {dest}` to use that folder, "
            f"or remove it to unpack {archive.name} again"
        )

    def no_git(rel: tuple[str, ...]) -> bool:
        if ".git" in rel:  # a repository's config and hooks run on the host (nightly clones it)
            raise UsageError(f"{archive} is refused, nothing was unpacked: member "
                             f"{'/'.join((stem, *rel))!r} is part of a git repository; an "
                             "sdist has none")
        return True

    limits = Limits(members=MAX_MEMBERS, total_bytes=MAX_TOTAL_BYTES, ratio=MAX_RATIO,
                    ratio_floor=RATIO_FLOOR_BYTES)
    try:
        return unpack(archive, dest, top=stem, error=UsageError, limits=limits, keep=no_git)
    except OSError as e:
        raise UsageError(f"cannot unpack {archive} into {dest_dir}: {e.strerror or e}") from e


@contextlib.contextmanager
def removed_on_failure(path: Path | None) -> Iterator[None]:
    """Remove `path` (a folder this command unpacked) when the block fails."""
    try:
        yield
    except BaseException:
        if path is not None:
            discard_tree(path)
        raise


__all__ = ["MAX_MEMBERS", "MAX_RATIO", "MAX_TOTAL_BYTES", "RATIO_FLOOR_BYTES", "SUFFIXES",
           "removed_on_failure", "sdist_stem", "unpack_sdist"]
