"""Taking a finished build's packages back: the bytes tested are the bytes signed and
published.

When a recipe (and everything it started: nightly.executors.confine) has ended, each package
in its OUTPUT_DIR is copied into a folder nightly creates and only nightly's user can write,
as a new file nightly writes itself: the inode a build account wrote (and that a process of
it may still hold open) is never kept. The copy is read without following a link, never
blocks on a FIFO, and is bounded (`MAX_PACKAGE_BYTES`). Those copies are normalised and
hashed once (as they are copied, or as normalising rewrote them); they are smoke- and
GPU-tested, filed, signed and published, and the hash is checked again right before filing,
signing and upload (nightly.files.check_sha256).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from nightly.builds.repro.reproducible import normalise_packages
from nightly.files import check_sha256, remove_tree, sha256_file

TAKEN = "taken"  # the folder, in the build's own folder, nightly copies the packages into
MAX_PACKAGE_BYTES = 64 << 30  # one package larger than this is not taken
_BLOCK = 1 << 20


class NotTaken(ValueError):
    """A package that could not be taken back (the message names it and why)."""


def taken_folder(build_folder: Path) -> Path:
    """A fresh folder of nightly's own (0755, nightly's user) for the taken packages."""
    folder = build_folder / TAKEN
    remove_tree(folder)  # whatever is there (a link is removed, never followed)
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    return folder


def take_one(src: Path, dest_dir: Path, limit: int = MAX_PACKAGE_BYTES) -> Path:
    """`src` copied into a new file of nightly's in `dest_dir` (bounded, no link followed,
    no FIFO waited on); the new file's path."""
    return take_hashed(src, dest_dir, limit)[0]


def take_hashed(src: Path, dest_dir: Path, limit: int = MAX_PACKAGE_BYTES) -> tuple[Path, str]:
    """take_one, and the sha256 of the bytes written, hashed as they were copied."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        raise NotTaken(f"{src.name}: cannot be taken from OUTPUT_DIR: {e.strerror}") from e
    dest = dest_dir / src.name
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotTaken(f"{src.name} in OUTPUT_DIR is not a regular file")
        if st.st_size > limit:
            raise NotTaken(f"{src.name} is {st.st_size} bytes, more than the {limit} a package "
                           "may have")
        out_fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        h = hashlib.sha256()
        with os.fdopen(out_fd, "wb") as out:
            copied = 0
            while chunk := f.read(_BLOCK):
                copied += len(chunk)
                if copied > limit:
                    out.close()
                    dest.unlink()
                    raise NotTaken(f"{src.name} grew past {limit} bytes while it was taken")
                h.update(chunk)
                out.write(chunk)
            os.fchmod(out_fd, 0o644)
    return dest, h.hexdigest()


def _identity(path: Path) -> tuple[int, int, int]:
    st = os.stat(path, follow_symlinks=False)
    return st.st_ino, st.st_size, st.st_mtime_ns


def take_packages(files: Sequence[Path], build_folder: Path) -> list[Path]:
    """Each of a build's packages copied into `build_folder/taken/` as nightly's own file
    (see the module's text); the copies, in the same order."""
    folder = taken_folder(build_folder)
    return [take_one(f, folder) for f in files]


def hash_taken(files: Sequence[Path]) -> dict[str, str]:
    """The one sha256 of each taken package, by name: what is tested, filed and signed."""
    return {f.name: sha256_file(f) for f in files}


def recheck(files: Sequence[Path], digests: Mapping[str, str], *, before: str) -> str | None:
    """None when every taken package still has its recorded sha256, else the reason (the
    first file that changed, named)."""
    for f in files:
        try:
            check_sha256(f, digests[f.name], before=before)
        except (ValueError, KeyError) as e:
            return str(e)
    return None



def take_build(
    produced: Sequence[Path], build_folder: Path, env: Mapping[str, str],
    sink: Callable[[bytes], None],
) -> tuple[list[Path], dict[str, str], str | None]:
    """A finished recipe's packages taken back, normalised (SOURCE_DATE_EPOCH) and hashed
    once: (the taken files, their sha256 by name, None) or ([], {}, the reason none is)."""
    try:
        folder = taken_folder(build_folder)
        pairs = [take_hashed(f, folder) for f in produced]
    except (NotTaken, OSError) as e:
        return [], {}, f"taking the packages back failed: {e}"
    taken = [p for p, _ in pairs]
    before = [_identity(p) for p in taken]
    for note in normalise_packages(taken, env):
        sink(f"[nightly] {note}\n".encode())
    # Hashed as copied; a package the normalising rewrote is hashed once, as rewritten.
    digests = {p.name: d if _identity(p) == was else sha256_file(p)
               for (p, d), was in zip(pairs, before, strict=True)}
    listed = ", ".join(f"{n} sha256 {d}" for n, d in digests.items())
    sink(f"[nightly] packages taken back as nightly's own files: {listed}\n".encode())
    return taken, digests, None


__all__ = [
    "MAX_PACKAGE_BYTES",
    "NotTaken",
    "hash_taken",
    "recheck",
    "take_build",
    "take_hashed",
    "take_one",
    "take_packages",
    "taken_folder",
]
