"""Which files of a build's OUTPUT_DIR are its packages, and that they are the project's.

A recipe runs the project's own build code, and that code can write anything into
`$OUTPUT_DIR`: a `numpy-99.0.0-py3-none-any.whl`, an `index.html`, a `.provenance.json` of
its own making. nightly signs and publishes what it files, so what it files is decided here,
never by the build:

- only regular files directly in OUTPUT_DIR (no folder, no link is followed), whose names end
  in the package kinds of the build's type (`KINDS`), are taken; anything else there is left
  out, named in the log, and never filed, signed, uploaded or listed;
- each taken package must be the project's: its distribution name, from its file name and
  from its own metadata (a wheel's METADATA `Name`, a conda package's info/index.json `name`),
  normalised as PEP 503 says, is `[project] name` or one of `[project] extra_names`; a
  libtorch zip is named `libtorch-…` (the recipe contract's name) or after the project. A
  package that is not fails the build, naming the file.

A source archive (`.tar.gz`) is kept with the build it came from, for any type, but it is
never signed nor published (nightly publishes no sdists): only `PUBLISHED_KINDS` are.
"""

from __future__ import annotations

import stat
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

# The package kinds each build type delivers (docs/recipes.md). A conda or libtorch build
# may also deliver the project's own wheel (the conda recipe builds one on its way); no
# wheel build delivers a conda package or a zip.
KINDS: dict[str, tuple[str, ...]] = {
    "manywheel": (".whl",),
    "wheel": (".whl",),
    "conda": (".conda", ".tar.bz2", ".whl"),
    "libtorch": (".zip", ".whl"),
}
KEPT = (".tar.gz",)  # kept with the build, never signed or published
PUBLISHED_KINDS = (".whl", ".conda", ".tar.bz2", ".zip")
LIBTORCH_NAME = "libtorch"
_METADATA_MAX = 1 << 20  # a METADATA or index.json larger than this is not a package's


class NotOurs(ValueError):
    """A package that is not the project's (the message names the file and why)."""


def kinds_of(package_type: str) -> tuple[str, ...]:
    return KINDS.get(package_type, PUBLISHED_KINDS)


def outputs(folder: Path, package_type: str) -> tuple[list[Path], list[str]]:
    """(the build's packages, what else is in `folder`): regular files directly in it whose
    names end in its type's kinds (or KEPT); everything else, by name ("sub/" for a folder)."""
    if not folder.is_dir():
        return [], []
    taken, other = [], []
    wanted = (*kinds_of(package_type), *KEPT)
    for entry in sorted(folder.iterdir()):
        st = entry.lstat()
        name = entry.name
        if stat.S_ISREG(st.st_mode) and name.endswith(wanted) and not name.startswith("."):
            taken.append(entry)
        else:
            other.append(name + ("/" if stat.S_ISDIR(st.st_mode) else ""))
    return taken, other


def owned_names(project: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The normalised distribution names a build of this project may deliver."""
    return frozenset(canonicalize_name(n) for n in (project, *extra) if n)


def check_owned(files: Sequence[Path], package_type: str, names: frozenset[str]) -> None:
    """NotOurs for the first file that is not a package of the build's type belonging to
    the project (`names` from `owned_names`)."""
    for f in files:
        if f.name.endswith(KEPT):
            continue
        if not f.name.endswith(kinds_of(package_type)):
            raise NotOurs(f"{f.name} is not a {package_type} package "
                          f"({' or '.join(kinds_of(package_type))})")
        for where, name in _names_of(f):
            if canonicalize_name(name) not in names:
                raise NotOurs(
                    f"{f.name} is not the project's package: its {where} names distribution "
                    f"'{name}', not {' or '.join(sorted(names))} (a package the project ships "
                    "under another name goes in [project] extra_names)")


def owned_by_name(filename: str, names: frozenset[str]) -> bool:
    """The file name alone names one of the project's distributions (for the steps after
    filing: signing and publishing never act on a file that fails this)."""
    try:
        found = _file_names(filename)
    except NotOurs:
        return False
    if filename.endswith(".zip") and found and found[0][1] == LIBTORCH_NAME:
        return True
    return bool(found) and all(canonicalize_name(n) in names for _, n in found)


def _file_names(filename: str) -> list[tuple[str, str]]:
    if filename.endswith(".whl"):
        try:
            return [("file name", str(parse_wheel_filename(filename)[0]))]
        except InvalidWheelFilename as e:
            raise NotOurs(f"{filename} is not a valid wheel name: {e}") from e
    if filename.endswith((".conda", ".tar.bz2")):
        stem = filename.removesuffix(".conda").removesuffix(".tar.bz2")
        parts = stem.rsplit("-", 2)
        if len(parts) != 3 or not all(parts):
            raise NotOurs(f"{filename} is not named NAME-VERSION-BUILD as a conda package is")
        return [("file name", parts[0])]
    if filename.endswith(".zip"):
        head = filename.split("-", 1)[0]
        # libtorch-<variant>-<version>.zip: the recipe contract's fixed name.
        return [("file name", LIBTORCH_NAME if head == LIBTORCH_NAME else
                 filename.removesuffix(".zip").rsplit("-", 1)[0])]
    return []


def _names_of(path: Path) -> list[tuple[str, str]]:
    """(where, distribution name) from the file name and the package's own metadata."""
    found = _file_names(path.name)
    if path.name.endswith(".whl"):
        found.append(("METADATA", _wheel_name(path)))
    elif path.name.endswith((".conda", ".tar.bz2")):
        found.append(("info/index.json", _conda_name(path)))
    if path.name.endswith(".zip") and found and found[0][1] == LIBTORCH_NAME:
        return []  # a libtorch zip is the build's by its fixed name; it has no metadata
    return found


def _wheel_name(path: Path) -> str:
    try:
        with zipfile.ZipFile(path) as z:
            metas = [i for i in z.infolist() if i.filename.count("/") == 1
                     and i.filename.endswith(".dist-info/METADATA")]
            if len(metas) != 1:
                raise NotOurs(f"{path.name} has {len(metas)} .dist-info/METADATA files, not one")
            if metas[0].file_size > _METADATA_MAX:
                raise NotOurs(f"{path.name}: its METADATA is larger than {_METADATA_MAX} bytes")
            with z.open(metas[0]) as f:
                text = f.read(_METADATA_MAX).decode("utf-8", "replace")
    except (OSError, zipfile.BadZipFile, RuntimeError) as e:
        raise NotOurs(f"{path.name} is not a readable wheel: {e}") from e
    for line in text.splitlines():
        if not line.strip():
            break  # the headers end at the first blank line
        key, _, value = line.partition(":")
        if key.strip().lower() == "name":
            return value.strip()
    raise NotOurs(f"{path.name}: its METADATA has no Name")


def _conda_name(path: Path) -> str:
    try:
        from rattler import IndexJson

        return str(IndexJson.from_package_archive(path).name.normalized)
    except ImportError as e:
        raise NotOurs(f"{path.name}: cannot read info/index.json without py-rattler "
                      "(pip install 'nightly[conda]')") from e
    except Exception as e:  # rattler raises its own exception types
        raise NotOurs(f"{path.name}: cannot read info/index.json: {e}") from None


__all__ = ["KEPT", "KINDS", "PUBLISHED_KINDS", "NotOurs", "check_owned", "kinds_of",
           "outputs", "owned_by_name", "owned_names"]
