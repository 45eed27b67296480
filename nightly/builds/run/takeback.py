"""Taking a finished build's packages back: the bytes tested are the bytes signed and
published.

When a recipe (and everything it started: nightly.executors.confine) has ended, each package
in its OUTPUT_DIR is copied into a folder nightly creates and only nightly's user can write,
as a new file nightly writes itself: the inode a build account wrote (and that a process of
it may still hold open) is never kept. The copy is read without following a link, never
blocks on a FIFO, and is bounded (`MAX_PACKAGE_BYTES`). Those copies are normalised and
hashed once (as they are copied, or as normalising rewrote them): each is a `Taken`, its
sha256 carried from here to filing, signing and upload. Nothing re-reads them before that:
the folder and the files are nightly's own, nothing but nightly writes them (the smoke test
copies them), filing links the same inode, signing signs the carried sha256, and the
upload's own read, the copy it sends, is the check that they are still the bytes tested
(nightly.publish.sending). Only a copy made on the way (another file system) is hashed again.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nightly.builds.repro.reproducible import normalise_packages
from nightly.executors.base import ExecResult, Job
from nightly.files import remove_tree, sha256_file

TAKEN = "taken"  # the folder, in the build's own folder, nightly copies the packages into
MAX_PACKAGE_BYTES = 64 << 30  # one package larger than this is not taken
_BLOCK = 4 << 20  # the copy's buffer, reused for every block


class NotTaken(ValueError):
    """A package that could not be taken back (the message names it and why)."""


@dataclass(frozen=True, kw_only=True)
class Taken:
    """A package taken back: nightly's own file, and the sha256 and size of its bytes as
    they were hashed once (what is tested, filed, signed and uploaded)."""

    path: Path
    sha256: str
    size: int

    @property
    def name(self) -> str:
        return self.path.name


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
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotTaken(f"{src.name} in OUTPUT_DIR is not a regular file")
        if st.st_size > limit:
            raise NotTaken(f"{src.name} is {st.st_size} bytes, more than the {limit} a package "
                           "may have")
        out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            digest = _copy_hashing(fd, out, src.name, limit)
            os.fchmod(out, 0o644)
        except BaseException:
            dest.unlink(missing_ok=True)
            raise
        finally:
            os.close(out)
    finally:
        os.close(fd)
    return dest, digest


def _copy_hashing(fd: int, out: int, name: str, limit: int) -> str:
    """The bytes of `fd` written to `out` and hashed in the same pass, through one reused
    buffer (no bytes object per block: the copy costs little more than the hash alone)."""
    h = hashlib.sha256()
    buf = bytearray(_BLOCK)
    view = memoryview(buf)
    copied = 0
    while n := os.readv(fd, [buf]):
        copied += n
        if copied > limit:
            raise NotTaken(f"{name} grew past {limit} bytes while it was taken")
        h.update(view[:n])
        written = 0
        while written < n:
            written += os.write(out, view[written:n])
    return h.hexdigest()


def _identity(path: Path) -> tuple[int, int, int]:
    st = os.stat(path, follow_symlinks=False)
    return st.st_ino, st.st_size, st.st_mtime_ns


def take_build(
    produced: Sequence[Path], build_folder: Path, env: Mapping[str, str],
    sink: Callable[[bytes], None],
) -> tuple[list[Taken], str | None]:
    """A finished recipe's packages taken back, normalised (SOURCE_DATE_EPOCH) and hashed
    once: (the taken packages, None) or ([], the reason none is)."""
    try:
        folder = taken_folder(build_folder)
        pairs = [take_hashed(f, folder) for f in produced]
        before = [_identity(p) for p, _ in pairs]
        for note in normalise_packages([p for p, _ in pairs], env):
            sink(f"[nightly] {note}\n".encode())
        # Hashed as copied; a package the normalising rewrote is hashed once, as rewritten.
        taken = [Taken(path=p, sha256=d, size=os.stat(p).st_size) if _identity(p) == was
                 else Taken(path=p, sha256=sha256_file(p), size=os.stat(p).st_size)
                 for (p, d), was in zip(pairs, before, strict=True)]
    except (NotTaken, OSError) as e:
        return [], f"taking the packages back failed: {e}"
    listed = ", ".join(f"{t.name} sha256 {t.sha256}" for t in taken)
    sink(f"[nightly] packages taken back as nightly's own files: {listed}\n".encode())
    return taken, None


def take_result(produced: list[Path], job: Job, result: ExecResult, sink: Callable[[bytes], None],
                ) -> tuple[list[Path], list[Taken], ExecResult]:
    """A recipe that succeeded: its packages taken back as nightly's own files, hashed once
    (take_build); what is tested, filed, signed and published from here on, each with the
    sha256 it carries there. (the packages, the taken ones, the result: failed if not taken)"""
    if result.exit_status != 0 or not produced:
        return produced, [], result
    taken, why = take_build(produced, job.work_dir.parent, job.env, sink)
    if why is not None:
        return produced, [], ExecResult(exit_status=None, reason=why, notes=result.notes)
    return [t.path for t in taken], taken, result


__all__ = [
    "MAX_PACKAGE_BYTES",
    "NotTaken",
    "Taken",
    "take_build",
    "take_hashed",
    "take_one",
    "take_result",
    "taken_folder",
]
