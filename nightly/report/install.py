"""The last lines of a night: how to install what it built. The command with the night's own
version (never a YYYYMMDD placeholder), an absolute index URL (the mirror's file:// URL, or
[publish] public_url: never $PWD, so it works from any folder), the index of the dependencies
([smoke] dependencies = "index"), and the Pythons the wheels serve. A Python whose venv ships
a pip that cannot install the wheel (pip < 23.1 and a metadata Name spelled with capitals,
docs/building.md) is named with the pip it needs."""

from __future__ import annotations

import shlex
import subprocess
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from nightly import procs
from nightly.config import Config
from nightly.config.timeouts import ExternalTimeouts, default_timeouts
from nightly.workspace import SUCCEEDED, Day, State

PYPI = "https://pypi.org/simple"
FIXED_PIP = Version("23.1")  # the first pip that compares a metadata Name case-insensitively


@dataclass(frozen=True)
class Served:
    """The wheels of one index folder: where users read it, and the Pythons they serve."""

    index: str  # an absolute URL ending in "/", or a --find-links folder
    find_links: bool  # not published: the day's own folder, with --find-links
    pythons: tuple[str, ...]
    wheel: Path  # one of its wheels in the day folder (its metadata name)
    accelerators: tuple[str, ...] = ()  # the builds' cpu, cu130, rocm7.2 ... (its heading)


def _index_of(config: Config, dest: str) -> str | None:
    """The index URL users read for a published file, None when it is not known (a store
    without a public URL)."""
    pub = config.publish
    url = pub.url.rstrip("/")
    if not url or not dest.startswith(url + "/"):
        return None
    base = pub.public_url or (url if url.startswith("file://") else "")
    return f"{base.rstrip('/')}/{dest[len(url) + 1:].rsplit('/', 1)[0]}/" if base else None


def served(config: Config, day: Day, state: State) -> list[Served]:
    """The night's wheels, grouped by the index folder a user installs them from."""
    groups: dict[tuple[str, bool], tuple[set[str], Path]] = {}
    accels: dict[tuple[str, bool], set[str]] = {}
    for _bid, e in sorted(state.builds.items()):
        if e.status != SUCCEEDED:
            continue
        for p in e.packages:
            if not p.name.endswith(".whl"):
                continue
            dest = next((d for d in e.published if d.rsplit("/", 1)[-1] == p.name), None)
            index = _index_of(config, dest) if dest else None
            key = (index, False) if index else (str((day.path / p.path).parent), True)
            pythons, _ = groups.setdefault(key, (set(), day.path / p.path))
            if e.cuda:
                accels.setdefault(key, set()).add(e.cuda)
            # A limited-API wheel serves each Python it passed its test on, not only the one
            # it was built with (issue 57: "(Python 3.9)" for a wheel tested on five).
            passed = [t.python for t in e.python_tests if t.result == "passed"]
            pythons.update(passed or ([e.python] if e.python else []))
    return [Served(index=k[0], find_links=k[1], pythons=tuple(sorted(v[0], key=_py_key)),
                   wheel=v[1], accelerators=tuple(sorted(accels.get(k, ()))))
            for k, v in sorted(groups.items())]


def accelerator_words(accelerators: tuple[str, ...]) -> str:
    """`CPU`, `CUDA 13.0`, `ROCm 7.2`, `XPU`: what a heading names its wheels for."""
    from nightly.core.matrix import cuda_version

    def one(a: str) -> str:
        if a == "cpu":
            return "CPU"
        if a.startswith("rocm"):
            return f"ROCm {a[4:]}"
        version = cuda_version(a)
        return f"CUDA {version}" if version else a.upper()

    return ", ".join(one(a) for a in accelerators)


def _py_key(xy: str) -> tuple[int, ...]:
    return tuple(int(x) for x in xy.rstrip("mut").split(".") if x.isdigit())


def dependency_index(config: Config) -> str | None:
    """Where the wheels' dependencies come from, None when the project declares it has none
    ([smoke] dependencies = "none", the wheel installed alone)."""
    sm, b = config.smoke, config.build
    if sm.dependencies != "index":
        return None
    return sm.index_url or (sm.extra_index_urls[0] if sm.extra_index_urls else "") \
        or b.index_url or PYPI


def command(project: str, version: str, index: str, deps: str | None, *,
            find_links: bool = False) -> str:
    """`pip install --index-url MIRROR [--extra-index-url DEPS] "name==version"`."""
    where = ["--find-links", index] if find_links else ["--index-url", index]
    if find_links and deps is None:
        where.append("--no-index")
    extra = ["--extra-index-url" if not find_links else "--index-url", deps] if deps else []
    return shlex.join(["pip", "install", *where, *extra, f"{canonicalize_name(project)}=={version}"])


def metadata_name(wheel: Path) -> str:
    """The Name of a wheel's METADATA ("" when unreadable): bounded, read from the zip."""
    try:
        with zipfile.ZipFile(wheel) as z:
            info = next((i for i in z.infolist() if i.filename.endswith(".dist-info/METADATA")
                         and i.filename.count("/") == 1), None)
            if info is None or info.file_size > 1 << 20:
                return ""
            text = z.read(info).decode("utf-8", "replace")
    except (OSError, zipfile.BadZipFile):
        return ""
    return str(HeaderParser().parsestr(text).get("Name") or "")


def bundled_pip(python: str, *, timeouts: ExternalTimeouts | None = None) -> Version | None:
    """The pip a fresh venv of `python` gets (its ensurepip's), None when not known."""
    try:
        p = procs.call([python, "-I", "-c", "import ensurepip; print(ensurepip.version())"],
                       timeout=(timeouts or default_timeouts()).ensurepip_version)
        return Version(p.stdout.strip()) if p.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, InvalidVersion):
        return None


def pip_notes(config: Config | None, group: Served, interpreters: Mapping[str, str]) -> list[str]:
    """Each Python of `group` whose venv's pip refuses the wheel, with the pip it needs."""
    name = metadata_name(group.wheel)
    if not name or name == canonicalize_name(name):
        return []
    notes = []
    for xy in group.pythons:
        python = interpreters.get(xy)
        pip = (bundled_pip(python, timeouts=config.external_timeouts if config else None)
               if python else None)
        if pip is not None and pip < FIXED_PIP:
            notes.append(
                f"  Python {xy}: a new venv's pip {pip} refuses this wheel (its metadata spells "
                f"the name {name!r}, and pip before {FIXED_PIP} compares it with "
                f"{canonicalize_name(name)!r} case by case): first `python -m pip install "
                f"'pip>={FIXED_PIP}'` in the venv")
    return notes


def install_lines(config: Config, day: Day, state: State, version: str) -> list[str]:
    """The night's closing lines: per index folder, the install command and its Pythons."""
    from nightly.executors.local import NotFound, find_python

    groups = served(config, day, state)
    if not groups:
        return []
    deps = dependency_index(config)
    out = []
    for g in groups:
        pythons = ", ".join(g.pythons) or "any"
        where = "from the day folder (not published)" if g.find_links else ""
        # Two groups (CPU and CUDA 13.0) would otherwise have the same heading.
        accel = accelerator_words(g.accelerators) if len(groups) > 1 else ""
        out.append(f"install tonight's {config.project.name} {version}"
                   f"{' for ' + accel if accel else ''} (Python {pythons})"
                   f"{' ' + where if where else ''}:")
        out.append("  " + command(config.project.name, version, g.index, deps,
                                  find_links=g.find_links))
        interpreters = {}
        for xy in g.pythons:
            try:
                interpreters[xy] = find_python(xy, config.local.pythons)
            except NotFound:
                continue
        out += pip_notes(config, g, interpreters)
    if config.publish.url.startswith("s3://") and not config.publish.public_url:
        out.append("  (set [publish] public_url for the https address users install from)")
    return out


def print_install(config: Config, day: Day, state: State, version: str) -> None:
    """Print the install lines (plain, whole: a command is copied, never cut)."""
    from nightly.report.terminal import wide_console

    con = wide_console()
    for line in install_lines(config, day, state, version):
        con.print(line, markup=False, highlight=False, soft_wrap=True)
