"""Where a build user's builds run (`[executor.local] user`, docs/security.md).

Root keeps the night in its own folders: the nightlies root, nightly's venv, its caches, the
credentials and the signing key, often under its 0700 home. The build user reaches none of
that, and must not. So its builds run in a folder of their own, the *build area*
(`[executor.local] build_dir`, default /var/tmp/nightly-<user>), which root owns and nobody
else may write:

    nights/<project>-<hash of ROOT>/DAY/ a night's folder (DAY: the day folder's name):
      source/, recipes/, wheelhouse/     the night's copies of what builds read (root's, a+rX),
      .nightly-smoke-scripts/            and of nightly's smoke scripts
      work/<build>/                      a build's scratch, output and cache tools (the user's)
    bin/sccache                          the compiler cache's binary, copied from nightly's
    images/                              the host toolchains (sysroot, zig), assembled here
    sccache/<project>-<hash>/<toolchain>/  the compiler cache's store (root's, 0700: a build
                                         gets copies in its own folder, builds/cache_store.py)
    zig-cache/<project>-<hash>/<build>/  zig's cache of each build (the user's, 0700; root's above)

A day's copies go when the day folder they came from is gone (`nightly prune`). Before the
first build, `preflight` checks every path a build needs against the user's uid and groups
(nightly/reach.py) and stops the night with one line naming the first it cannot reach.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import stat
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from nightly import procs
from nightly.builds.cache.wiring import CacheSettings
from nightly.core.matrix import python_number
from nightly.errors import ConfigError
from nightly.executors.base import Job
from nightly.executors.local import NotFound, find_cuda, find_python
from nightly.files import open_tree, remove_tree
from nightly.files.copy import copy_tree
from nightly.hardening import USER_KEY, BuildUser
from nightly.reach import Account, Denied, denied

SMOKE_SCRIPTS = ".nightly-smoke-scripts"  # DAY/: nightly's smoke scripts (builds/smoke.py)
DAY_MARK = ".nightly-area-day"  # a day folder of the area (only such folders are removed)
SOURCE_MARK = ".nightly-staged"  # in DAY/source: what it is a copy of


@dataclass(frozen=True, kw_only=True)
class BuildArea:
    """The build area of one night (paths only; `prepare` makes it)."""

    root: Path
    day_name: str
    user: BuildUser
    nights: str = "nights"  # nights/<project>-<hash of ROOT>: one folder per nightlies root
    # nightly's Python and its tools, staged in python/ (builds/toolstage.py); None: not yet.
    python: Path | None = None

    @property
    def days(self) -> Path:
        return self.root / "nights" / self.nights

    @property
    def day(self) -> Path:
        return self.days / self.day_name

    @property
    def source(self) -> Path:
        return self.day / "source"

    @property
    def recipes(self) -> Path:
        return self.day / "recipes"

    @property
    def wheelhouse(self) -> Path:
        return self.day / "wheelhouse"

    @property
    def work(self) -> Path:
        return self.day / "work"

    @property
    def images(self) -> Path:
        return self.root / "images"

    @property
    def sccache_bin(self) -> Path:
        return self.root / "bin" / "sccache"

    @property
    def sccache(self) -> Path:
        return self.root / "sccache"

    def zig_cache(self, build_id: str) -> Path:
        """zig's cache of one build of this project: its own (kept from night to night: zig
        builds its glibc stubs, compiler-rt and libc++ there once), never another build's: a
        cache shared by the account's builds would let one plant objects another links."""
        return self.root / "zig-cache" / self.nights / build_id

    def env(self, build_id: str) -> dict[str, str]:
        """What a build's environment gets for the area."""
        return {"ZIG_GLOBAL_CACHE_DIR": str(self.zig_cache(build_id)),
                "ZIG_LOCAL_CACHE_DIR": str(self.zig_cache(build_id)),
                **({"NIGHTLY_PYTHON": str(self.python)} if self.python else {})}

    def cache_settings(self, settings: CacheSettings) -> CacheSettings:
        """The compiler cache as the user's builds use it: the binary from the area, views
        of copies (the user never holds an inode of the store) and, for the default folder
        (root's ~/.cache), the area's cache folder."""
        if not settings.enabled:
            return settings
        out = replace(settings, copy_view=True)
        if self.sccache_bin.exists():
            out = replace(out, binary=self.sccache_bin)
        if not settings.url and settings.dir == CacheSettings().dir:
            out = replace(out, dir=self.sccache)
        return out


def default_dir(user: BuildUser) -> Path:
    return Path("/var/tmp") / f"nightly-{user.name}"


def area_for(build_dir: str, user: BuildUser, day_name: str, *, project: str,
             nightlies: Path) -> BuildArea:
    """The build area of a night of `project` kept in `nightlies` (two projects, or two roots,
    built by one account on one machine never share a day's folders)."""
    root = Path(os.path.abspath(os.path.expanduser(build_dir))) if build_dir else default_dir(user)
    tag = hashlib.sha256(str(Path(os.path.abspath(nightlies))).encode()).hexdigest()[:10]
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", project).strip("._") or "project"
    return BuildArea(root=root, day_name=day_name, user=user, nights=f"{slug}-{tag}")


def _fail(config_file: str | None, message: str, hint: str) -> ConfigError:
    return ConfigError(message, file=config_file, key=USER_KEY, hint=hint)


def make_root(area: BuildArea, config_file: str | None) -> None:
    """The area's own folder: made (0755, root's) or checked: a real folder that only root
    owns and writes, never a link another user could have planted."""
    hint = ("remove it, or set [executor.local] build_dir to a folder only root writes "
            f"(default {default_dir(area.user)})")
    try:
        area.root.mkdir(mode=0o755, parents=True, exist_ok=True)
        st = os.lstat(area.root)
    except OSError as e:
        raise _fail(config_file, f"cannot make the build area {area.root}: {e.strerror or e}",
                    hint) from e
    if not stat.S_ISDIR(st.st_mode):
        raise _fail(config_file, f"the build area {area.root} is not a folder", hint)
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise _fail(config_file, f"the build area {area.root} must be owned and written by "
                    f"{'root' if os.geteuid() == 0 else 'nightly'} only "
                    f"({stat.filemode(st.st_mode)}, uid {st.st_uid})", hint)
    os.chmod(area.root, 0o755)


def _copy_tree(src: Path, dest: Path) -> None:
    partial = dest.with_name(dest.name + ".partial")
    remove_tree(partial)
    copy_tree(src, partial)  # any depth, links as links (nightly.files.copy)
    open_tree(partial)
    remove_tree(dest)
    partial.rename(dest)


def _zig_caches(area: BuildArea) -> None:
    """zig-cache/ root's (one the user owned, of an earlier nightly that shared it between
    builds, is removed); each build's own is made when it runs (nightly.executors.box)."""
    top = area.root / "zig-cache"
    _root_dir(top)
    os.chmod(top, 0o755)
    (top / area.nights).mkdir(mode=0o755, exist_ok=True)


def _stage_sccache(area: BuildArea, binary: Path | None) -> None:
    if binary is None:
        return
    dest = area.sccache_bin
    src_st = binary.stat()
    try:
        same = dest.stat().st_size == src_st.st_size and dest.read_bytes() == binary.read_bytes()
    except OSError:
        same = False
    if not same:
        dest.parent.mkdir(mode=0o755, exist_ok=True)
        tmp = dest.with_name(f".sccache.tmp-{os.getpid()}")  # another night may copy too
        shutil.copyfile(binary, tmp)
        os.chmod(tmp, 0o755)
        os.replace(tmp, dest)


def forget_old_days(area: BuildArea, nightlies: Path) -> None:
    """The area's day folders whose day folder in ROOT is gone (pruned)."""
    _forget(area.days, Path(area.day_name), nightlies, Path())


def _forget(folder: Path, keep: Path, nightlies: Path, under: Path) -> None:
    """One level of the area's day folders; a folder without the mark (`release/`, whose
    day folders are the candidates: DAY is `release/1.2.0-rc1`) is looked into once."""
    for entry in sorted(folder.iterdir()) if folder.is_dir() else ():
        name = under / entry.name
        if name == keep or entry.is_symlink() or not entry.is_dir():
            continue
        if (entry / DAY_MARK).is_file():
            if not (nightlies / name).exists():
                with contextlib.suppress(OSError):  # tried again the next night
                    remove_tree(entry)
        elif under == Path() and entry.name == "release":
            _forget(entry, keep, nightlies, name)


def stage(area: BuildArea, *, source: Path, stamp: str, recipes: Path, wheelhouse: Path | None,
          sccache: Path | None, cache: CacheSettings, jobs: Sequence[Job]) -> None:
    """Copy what the night's builds read into the area and give the user what it writes."""
    day = area.day
    # A candidate's DAY is two folders deep (release/1.2.0-rc1: workspace/candidate.py).
    between = [area.days / p for p in reversed(day.relative_to(area.days).parents[:-1])]
    for folder in (area.root / "nights", area.days, *between, day):
        folder.mkdir(mode=0o755, exist_ok=True)
    (day / DAY_MARK).write_text(f"{day.name}\n")
    mark = area.source / SOURCE_MARK
    if not (mark.is_file() and mark.read_text() == stamp + "\n"):
        _copy_tree(source, area.source)
        mark.write_text(stamp + "\n")
    if recipes.is_dir():
        _copy_tree(recipes, area.recipes)
    _copy_tree(Path(__file__).parents[1] / "test" / "smoke_scripts", day / SMOKE_SCRIPTS)
    if wheelhouse is not None and wheelhouse.is_dir():
        _copy_tree(wheelhouse, area.wheelhouse)
    area.work.mkdir(mode=0o755, exist_ok=True)
    area.images.mkdir(mode=0o755, exist_ok=True)
    _stage_sccache(area, sccache)
    _zig_caches(area)
    (area.root / ".box").mkdir(mode=0o700, exist_ok=True)  # where boxes lay their views out
    if cache.enabled and not cache.url and cache.dir == area.sccache:
        _root_dir(area.sccache)


def _root_dir(path: Path) -> None:
    """The area's compiler cache store: root's alone (0700). One the build user owned (an
    earlier nightly gave it the folder) is removed: none of its entries is trusted."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid()):
        remove_tree(path)
    path.mkdir(mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)


_TOOLCHAINS_OPENED: set[Path] = set()


def open_toolchains(area: BuildArea) -> None:
    """After a host toolchain was assembled in the area: readable by the user whatever
    root's umask was (once per process and folder)."""
    top = area.images / "toolchains"
    if not top.is_dir():
        return
    for folder in sorted(top.iterdir()):
        if folder.is_dir() and not folder.is_symlink() and folder not in _TOOLCHAINS_OPENED \
                and (folder / ".nightly-complete").exists():
            open_tree(folder)
            _TOOLCHAINS_OPENED.add(folder)


# -- the preflight ------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Need:
    path: Path
    access: str  # "x", "rx", "wx", ...
    what: str  # "the interpreter of python 3.11"
    fix: str


def needs(job: Job, *, user: BuildUser, pythons: dict[str, str], cuda: dict[str, str],
          cache: CacheSettings, usable: Callable[[str], bool] | None = None) -> Iterable[Need]:
    """Every path `job` needs as the build user, with the access and the fix."""
    area_fix = ("set [executor.local] build_dir to a folder outside private homes that "
                f"{user.name} can search (default {default_dir(user)})")
    nightly_fix = (f"install nightly where {user.name} can read it, e.g. a venv in "
                   "/opt/nightly (crontab.example)")
    yield Need(path=job.work_dir.parent.parent, access="x", what="the build folder", fix=area_fix)
    yield Need(path=job.source_dir, access="rx", what="the source copy", fix=area_fix)
    yield Need(path=job.recipe, access="r", what="the recipe", fix=area_fix)
    if (job.recipes_dir / "common").is_dir():
        yield Need(path=job.recipes_dir / "common", access="rx", what="the recipes' common folder",
                   fix=area_fix)
    try:
        python = find_python(job.python, pythons, usable)
        yield Need(path=Path(python), access="x", what=f"the interpreter of python {job.python}",
                   fix=f'map "{job.python}" in [executor.local.pythons] to an interpreter '
                       f"{user.name} can run (e.g. /usr/bin/python{_number(job.python)}), "
                       "not one in a private home")
        if job.cuda != "cpu":
            root = find_cuda(job.cuda, cuda)
            yield Need(path=Path(root) / "bin" / "nvcc", access="x", what=f"nvcc of {job.cuda}",
                       fix=f'map "{job.cuda}" in [executor.local.cuda] to a toolkit '
                           f"{user.name} can read")
    except NotFound:
        pass  # the build fails on its own, with its log saying where nightly looked
    env = job.env
    if env.get("NIGHTLY_WHEELHOUSE"):
        yield Need(path=Path(env["NIGHTLY_WHEELHOUSE"]), access="rx", what="the wheelhouse",
                   fix=area_fix)
    for var in ("NIGHTLY_TOOLCHAIN_CACHE", "NIGHTLY_ZIG_CACHE"):
        if env.get(var):
            yield Need(path=Path(env[var]), access="x", what="the toolchains' folder", fix=area_fix)
    # In the area, zig's cache is the build's own, made for it when it runs (executors/box.py).
    zig = Path(env.get("ZIG_GLOBAL_CACHE_DIR") or "/")
    if zig != Path("/") and not (job.area and zig.is_relative_to(job.area)):
        yield Need(path=zig, access="wx", what="zig's cache", fix=area_fix)
    if job.package == "conda" or env.get("AUDITWHEEL_PLAT"):
        yield Need(path=Path(env.get("NIGHTLY_PYTHON") or sys.executable), access="x",
                   what="nightly's Python (NIGHTLY_PYTHON, auditwheel)", fix=nightly_fix)
    yield from _cache_needs(job, user, cache, nightly_fix)


def _number(python: str) -> str:
    return python if python == "3" else python_number(python)


def _cache_needs(job: Job, user: BuildUser, cache: CacheSettings, fix: str) -> Iterable[Need]:
    """The sccache binary; never the store, which is root's (the build gets a view)."""
    if cache.enabled and cache.binary is not None:
        yield Need(path=cache.binary, access="x", what="the compiler cache's sccache", fix=fix)


def _confirmed(user: BuildUser, path: Path, access: str) -> bool:
    """A real test as the user, for a path whose ACL the mode bits do not tell."""
    tests = [a for c in access for a in ("-a", f"-{c}", str(path))][1:]
    return procs.call([*user.setpriv(), "test", *tests]).returncode == 0


def first_denied(wanted: Iterable[Need], user: BuildUser) -> tuple[Need, Denied] | None:
    account = Account.of(user.name)
    seen: set[tuple[Path, str]] = set()
    for need in wanted:
        if (need.path, need.access) in seen:
            continue
        seen.add((need.path, need.access))
        why = denied(need.path, account, need.access)
        if why is not None and not (why.acl and _confirmed(user, need.path, need.access)):
            return need, why
    return None


def preflight(jobs: Sequence[Job], *, user: BuildUser, pythons: dict[str, str],
              cuda: dict[str, str], cache: CacheSettings, config_file: str | None,
              usable: Callable[[str], bool] | None = None) -> None:
    """Raise ConfigError (one line) naming the first path a build needs that the user
    cannot reach with the access it needs, what is missing and the fix. `usable`: how the
    executor picks interpreters (the same are checked)."""
    wanted = (n for job in jobs for n in needs(job, user=user, pythons=pythons, cuda=cuda,
                                               cache=cache, usable=usable))
    found = first_denied(wanted, user)
    if found is None:
        return
    need, why = found
    raise _fail(config_file, f"build user {user.name} cannot reach {need.what} {need.path}: "
                f"{why.sentence(user.name)}", need.fix)


__all__ = ["BuildArea", "area_for", "forget_old_days", "make_root", "open_toolchains",
           "preflight", "stage"]
