"""Reproducible packages: the same source, recipe and image give the same bytes.

Two things make a package differ between two builds of one commit: the time (zip entries,
tar members and generated files carry it) and the build's own paths (debug info, RUNPATH).
nightly handles the first in two steps:

- every recipe gets `SOURCE_DATE_EPOCH` (the nightly commit's committer time; for a plain
  folder the newest file's mtime), which setuptools/wheel, auditwheel, CMake and
  rattler-build honour for the times they write;
- every zip nightly files (wheels, libtorch zips) is then rewritten in a canonical form:
  entries in a fixed order (a wheel's `.dist-info/` last, `RECORD` last of all, as the wheel
  spec asks), every time SOURCE_DATE_EPOCH, permissions 0644 or 0755 (links kept), one
  compression level. The entries' bytes are not touched, so a wheel's RECORD stays valid.

The second is the recipes' part (recipes/common/lib.sh maps the work and source folders
with `-ffile-prefix-map` and drops the interpreter's `-Wl,-rpath` from setuptools' link line).
"""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import tarfile
import time
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from nightly import procs
from nightly.config.timeouts import ExternalTimeouts, default_timeouts
from nightly.files import walk_tree
from nightly.jsonvalues import SMALL_FILE_BYTES, json_object

# A zip cannot hold a time before 1980.
ZIP_EPOCH_MIN = 315532800
SOURCE_MARKER = ".nightly-source.json"
_EPOCHS: dict[Path, SourceEpoch] = {}


@dataclass(frozen=True, kw_only=True)
class SourceEpoch:
    """The SOURCE_DATE_EPOCH of a source checkout and where it came from."""

    epoch: int
    origin: str  # "commit" (the committer time) or "mtime" (a plain folder's newest file)


def source_epoch(source_dir: Path, *, timeouts: ExternalTimeouts | None = None) -> SourceEpoch:
    """The commit's committer time for a git checkout, else the newest file's mtime (the
    day's copy of a plain folder keeps the files' times). Cached per folder."""
    key = source_dir.resolve()
    if key in _EPOCHS:
        return _EPOCHS[key]
    found = None
    if (source_dir / ".git").exists():
        try:
            got = procs.call(["git", "log", "-1", "--format=%ct", "HEAD"], cwd=source_dir,
                             timeout=(timeouts or default_timeouts()).source_date)
            if got.ok:
                found = SourceEpoch(epoch=int(got.stdout.strip()), origin="commit")
        except (OSError, subprocess.SubprocessError, ValueError):
            found = None
    if found is None:
        found = SourceEpoch(epoch=_newest_mtime(source_dir), origin="mtime")
    _EPOCHS[key] = found
    return found


def _newest_mtime(folder: Path) -> int:
    newest = 0.0
    for e in walk_tree(folder, skip=lambda rel: rel.rsplit("/", 1)[-1] == ".git"):
        # Files only, not SOURCE_MARKER (written by nightly when the day's copy was made).
        if not e.is_dir and e.name != SOURCE_MARKER:
            newest = max(newest, e.st.st_mtime)
    return int(newest) if newest else int(time.time())


def reproducible_env(source_dir: Path, *,
                     timeouts: ExternalTimeouts | None = None) -> dict[str, str]:
    """What every recipe environment gets for reproducible output."""
    se = source_epoch(source_dir, timeouts=timeouts)
    return {"SOURCE_DATE_EPOCH": str(se.epoch), "NIGHTLY_SOURCE_DATE_ORIGIN": se.origin}


# ------------------------------------------------------------------------ normalising zips


def _order(name: str) -> tuple[int, str]:
    """Wheels: everything, then `.dist-info/` (RECORD last). Zips: plain name order."""
    top = name.split("/", 1)[0]
    if top.endswith(".dist-info"):
        return (2 if name == f"{top}/RECORD" else 1, name)
    return (0, name)


def _mode(info: zipfile.ZipInfo) -> int:
    mode = (info.external_attr >> 16) & 0xFFFF
    if stat.S_ISLNK(mode):
        return stat.S_IFLNK | 0o777
    if info.is_dir():
        return stat.S_IFDIR | 0o755
    return stat.S_IFREG | (0o755 if mode & 0o111 else 0o644)


def normalise_zip(path: Path, epoch: int) -> bool:
    """Rewrite `path` in the canonical form; True when its bytes changed."""
    when = time.gmtime(max(epoch, ZIP_EPOCH_MIN))[:6]
    tmp = path.with_name(path.name + ".normalising")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w") as dst:
        infos = sorted(src.infolist(), key=lambda i: _order(i.filename))
        for info in infos:
            data = b"" if info.is_dir() else src.read(info)
            out = zipfile.ZipInfo(info.filename, date_time=when)
            out.create_system = 3  # Unix, so the mode bits below are read
            out.external_attr = (_mode(info) << 16) | (0x10 if info.is_dir() else 0)
            out.compress_type = zipfile.ZIP_STORED if info.is_dir() else zipfile.ZIP_DEFLATED
            dst.writestr(out, data, compresslevel=6)
    same = tmp.read_bytes() == path.read_bytes()
    if same:
        tmp.unlink()
    else:
        os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
        os.replace(tmp, path)
    return not same


def _zstd() -> ModuleType:
    import importlib

    try:
        return importlib.import_module("compression.zstd")  # Python >= 3.14
    except ImportError:
        return importlib.import_module("backports.zstd")


def _retar(data: bytes, epoch: int, rewrite: Callable[[str, bytes], bytes]) -> bytes:
    """A tar in canonical form: members in their order, mtime `epoch`, owner root, modes
    0644/0755 (links and folders kept), `rewrite(name, bytes)` applied to regular files."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(data)) as src, \
            tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst:
        for m in src.getmembers():
            body = None
            if m.isfile():
                f = src.extractfile(m)
                body = rewrite(m.name, f.read() if f else b"")
                m.size = len(body)
                m.mode = 0o755 if m.mode & 0o111 else 0o644
            elif m.isdir():
                m.mode = 0o755
            m.mtime, m.uid, m.gid, m.uname, m.gname = epoch, 0, 0, "", ""
            m.pax_headers = {}
            dst.addfile(m, io.BytesIO(body) if body is not None else None)
    return out.getvalue()


def normalise_conda(path: Path, epoch: int) -> bool:
    """A `.conda` in canonical form: its zip's entries at `epoch`, its two tars through
    `_retar` (recompressed at one zstd level), info/index.json's `timestamp` set to `epoch`
    (rattler-build writes the time of the build there). True when its bytes changed."""
    zstd = _zstd()

    def rewrite(name: str, body: bytes) -> bytes:
        if name != "info/index.json":
            return body
        index = json_object(body, max_bytes=SMALL_FILE_BYTES)
        if index is None:  # not what rattler-build writes: left as it is
            return body
        if "timestamp" in index:
            index["timestamp"] = epoch * 1000
        return json.dumps(index, indent=2, sort_keys=True).encode()

    when = time.gmtime(max(epoch, ZIP_EPOCH_MIN))[:6]
    tmp = path.with_name(path.name + ".normalising")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w") as dst:
        for info in src.infolist():  # metadata.json first: conda's order, kept
            data = src.read(info)
            if info.filename.endswith(".tar.zst"):
                data = zstd.compress(_retar(zstd.decompress(data), epoch, rewrite), 15)
            out = zipfile.ZipInfo(info.filename, date_time=when)
            out.create_system = 3
            out.external_attr = 0o100644 << 16
            dst.writestr(out, data, compress_type=zipfile.ZIP_STORED)
    same = tmp.read_bytes() == path.read_bytes()
    if same:
        tmp.unlink()
    else:
        os.replace(tmp, path)
    return not same


def normalise_packages(files: Iterable[Path], env: Mapping[str, str]) -> list[str]:
    """Normalise a build's packages (wheels and libtorch zips, `.conda` packages) with the
    build's SOURCE_DATE_EPOCH; notes for the log."""
    raw = env.get("SOURCE_DATE_EPOCH", "")
    if not raw.isdigit():
        return []
    notes = []
    for f in files:
        if f.suffix not in (".whl", ".zip", ".conda"):
            continue
        try:
            if f.suffix == ".conda" and normalise_conda(f, int(raw)):
                notes.append(f"reproducible: {f.name} rewritten in canonical form (times "
                             f"{raw}, owners, modes, index.json timestamp)")
            elif f.suffix != ".conda" and normalise_zip(f, int(raw)):
                notes.append(f"reproducible: {f.name} rewritten in canonical zip form "
                             f"(entry order, times {raw}, modes)")
        except ImportError as e:
            notes.append(f"reproducible: {f.name} left as built: no zstd module ({e})")
        except (OSError, ValueError, zipfile.BadZipFile, tarfile.TarError) as e:
            notes.append(f"reproducible: {f.name} left as built, not readable: {e}")
    return notes


__all__ = ["SourceEpoch", "normalise_conda", "normalise_packages", "normalise_zip",
           "reproducible_env", "source_epoch"]
