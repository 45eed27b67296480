"""Cross-building manywheels for another architecture (aarch64) on this x86_64 machine.

Three parts, each made once in nightly's cache and keyed by what it holds:

    cross/<suite>-<debarch>-py<X.Y>-<rev>/root   the target's Python from Debian: the
        interpreter, its stdlib and headers, and the libraries they need, downloaded with a
        private apt configuration (`APT::Architecture "arm64"`: the host's apt untouched,
        nothing installed) and unpacked with `dpkg-deb -x`
    cross/<...>/sysconfig/   the target's `_sysconfigdata` module with its paths moved into
        that root: the build interpreter (the host's Python X.Y) reads it through
        `_PYTHON_SYSCONFIGDATA_NAME`, so setuptools names the extension for the target
        (`.cpython-311-aarch64-linux-gnu.so`) and compiles against the target's headers
    toolchains/zig-<version>-<arch>-<rev>/   zig's compiler with the target's libc headers,
        and cc/c++ wrappers for `zig cc -target aarch64-linux-gnu.2.17` (nightly's zig for
        x86_64 keeps only x86 headers)

`_PYTHON_HOST_PLATFORM=linux-aarch64` makes the wheel `linux_aarch64`, and the manywheel
recipe repairs it for `manylinux_<policy>_<arch>` with the architecture it is given
(NIGHTLY_ARCH), never the machine's. A wheel is tested by running the target's Python under
qemu-user (`qemu-aarch64 -L ROOT`; no binfmt_misc here, so no emulated containers).

The architecture and Python are plain parameters: the matrix's architecture axis passes the
build's. Build requirements are installed for the build interpreter (pip sees the target's
platform only for the wheel it builds): a project whose build needs compiled packages of
the target (numpy's headers...) needs crossenv or a native aarch64 machine.
"""

from __future__ import annotations

import fcntl
import functools
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nightly import procs
from nightly.config.timeouts import default_timeouts
from nightly.core.spec import ZIG_VERSION
from nightly.core.suites import SUITE_OTHER_PYTHONS, SUITE_PYTHON
from nightly.errors import NightlyError
from nightly.images import sysroot, transfer, zig
from nightly.workspace.archive import WHEEL_LIMITS, unpack_into

Log = Callable[[str], None]

REVISION = "3"  # of the cross folders' layout: a new one is a new cached folder
MARKER = ".nightly-complete"
ENV_CACHE = "NIGHTLY_CROSS_CACHE"
ENV_ARCH = "NIGHTLY_ARCH"  # the wheel's architecture: the recipe's auditwheel --plat


@dataclass(frozen=True, kw_only=True)
class Target:
    arch: str  # the wheel's (PEP 425) architecture: aarch64
    deb: str  # Debian's name of it: arm64
    triple: str  # GNU multiarch and zig's target triple
    qemu: str  # the qemu-user program that runs it
    zig_include: tuple[str, ...]  # zig's libc header folders it needs


TARGETS = {
    "aarch64": Target(arch="aarch64", deb="arm64", triple="aarch64-linux-gnu", qemu="qemu-aarch64",
                      zig_include=("aarch64-linux-gnu", "aarch64-linux-any", "generic-glibc",
                                   "any-linux-any")),
}


class CrossError(NightlyError):
    """A cross build's parts could not be made (an architecture or Python not had here)."""


_run = functools.partial(procs.run, error=CrossError, tail=10)


def target(arch: str) -> Target:
    if arch not in TARGETS:
        raise CrossError(f"nightly cannot cross-build for {arch} on this machine (it can for "
                         f"{', '.join(TARGETS)}); build it on a {arch} machine")
    return TARGETS[arch]


def suite_for(python: str) -> str:
    """The Debian suite that packages Python X.Y (bookworm 3.11, trixie 3.13, sid 3.14)."""
    for suite, default in SUITE_PYTHON.items():
        if default == python:
            return suite
    for suite, others in SUITE_OTHER_PYTHONS.items():
        if python in others:
            return suite
    raise CrossError(f"no Debian suite packages Python {python} for another architecture "
                     f"(these do: {', '.join(sorted(set(SUITE_PYTHON.values())))})")


def folder(cache: Path, arch: str, python: str) -> Path:
    return cache / "cross" / f"{suite_for(python)}-{target(arch).deb}-py{python}-{REVISION}"


def zig_folder(cache: Path, arch: str) -> Path:
    return cache / "toolchains" / f"zig-{ZIG_VERSION}-{arch}-{REVISION}"


def make_root(cache: Path, arch: str, python: str, mirror: str, log: Log) -> Path:
    """The target's Python and what it needs, unpacked (cached); returns the folder."""
    dest, t, suite = folder(cache, arch, python), target(arch), suite_for(python)
    if (dest / MARKER).exists():
        return dest
    env = sysroot.private_apt(cache / f"apt-{suite}-{t.deb}", suite, mirror, t.deb)
    log(f"cross: apt-get update ({suite} {t.deb}, private configuration)")
    _run(["apt-get", "-q", "update"], "apt-get update (private configuration)", env=env)
    debs = Path(env["APT_CONFIG"]).parent / "cache" / "archives"
    want = [f"python{python}", f"libpython{python}-dev", "libc6-dev"]
    log(f"cross: apt-get install --download-only {' '.join(want)} ({t.deb}, ~30 MB)")
    args = ["install", "-y", "--download-only", "--no-install-recommends", *want]
    # The bytes done of apt's total as they arrive (nightly.images.transfer).
    code, tail = transfer.run_filling(["apt-get", "-q", *args], debs,
                                      transfer.apt_total(args, debs, env=env) or None,
                                      f"cross: {t.deb} packages", log, env=env)
    if code != 0:
        raise CrossError(f"apt-get install --download-only failed (exit {code}): "
                         f"apt-get -q {' '.join(args)}\n{tail}")
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    (partial / "root").mkdir(parents=True)
    for deb in sorted(debs.glob(f"*_{t.deb}.deb")) + sorted(debs.glob("*_all.deb")):
        _run(["dpkg-deb", "-x", str(deb), str(partial / "root")], f"dpkg-deb -x {deb.name}")
    sysroot.relink(partial / "root")
    for top in ("bin", "lib", "sbin"):
        # Merged /usr (trixie on): /lib -> usr/lib is base-files', which no .deb here brings;
        # the loader is looked for at /lib/ld-linux-aarch64.so.1.
        if (partial / "root" / "usr" / top).is_dir() and not (partial / "root" / top).exists():
            (partial / "root" / top).symlink_to(f"usr/{top}")
    _sysconfig(partial, python, t, final=dest)
    (partial / "nightly-sources.txt").write_text(
        "\n".join(sorted(d.name for d in debs.glob("*.deb"))) + "\n")
    (partial / MARKER).write_text(f"{suite} {t.deb} python{python}\n")
    shutil.rmtree(dest, ignore_errors=True)
    partial.rename(dest)
    log(f"cross: {t.arch} Python {python} ({suite}) ready in {dest}")
    return dest


def _sysconfig(dest: Path, python: str, t: Target, *, final: Path | None = None) -> None:
    """The target's sysconfigdata with /usr/include and /usr/lib moved into the root (the
    host's own headers must never be what the target's extension compiles against); `final`:
    where `dest` will be once complete (the paths written are that folder's)."""
    name = f"_sysconfigdata__linux_{t.triple}"
    text = (dest / "root" / "usr" / "lib" / f"python{python}" / f"{name}.py").read_text()
    root = (final or dest).resolve() / "root"
    text = re.sub(r"(?<=['\" =IL])/usr/(include|lib)\b", lambda m: f"{root}/usr/{m.group(1)}", text)
    (dest / "sysconfig").mkdir()
    (dest / "sysconfig" / f"{name}.py").write_text(text)


def make_zig(cache: Path, arch: str, log: Log) -> Path:
    """zig with the target's libc headers and wrappers for it (cached; the wheel shared)."""
    dest, t = zig_folder(cache, arch), target(arch)
    if (dest / MARKER).exists():
        return dest
    wheel = zig.fetch_wheel(cache, log)
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    size = zig.unpack(wheel, partial, keep_include=t.zig_include)
    zig.write_wrappers(partial, t.triple)
    (partial / "cache").mkdir()
    (partial / MARKER).write_text(f"zig {ZIG_VERSION} {t.triple}\n")
    shutil.rmtree(dest, ignore_errors=True)
    partial.rename(dest)
    log(f"cross: zig {ZIG_VERSION} for {t.triple} ready in {dest} ({size / 1e6:.0f} MB)")
    return dest


def host_env(arch: str, python: str, policy_glibc: tuple[int, int], cache: Path) -> dict[str, str]:
    """The recipe environment that cross-builds a manywheel of Python X.Y for `arch` with
    the host's Python X.Y (`ensure` makes what it names; a dry run downloads nothing)."""
    t, where, bindir = target(arch), folder(cache, arch, python), zig_folder(cache, arch) / "bin"
    root = where / "root"
    return {
        **zig.toolchain_env(str(bindir), zig.target_glibc(policy_glibc)),
        "NIGHTLY_TOOLCHAIN": f"zig {ZIG_VERSION} ({t.triple}.{zig.target_glibc(policy_glibc)})",
        ENV_ARCH: t.arch, ENV_CACHE: str(cache), "NIGHTLY_CROSS_PYTHON": python,
        # How the smoke test runs the target's Python (smoke_scripts/common.sh).
        "NIGHTLY_CROSS_RUN": f"{t.qemu} -L {root} {root}/usr/bin/python{python}",
        "_PYTHON_HOST_PLATFORM": f"linux-{t.arch}",
        "_PYTHON_SYSCONFIGDATA_NAME": f"_sysconfigdata__linux_{t.triple}",
        "PYTHONPATH": str(where / "sysconfig"),
        # The target's Python headers first (setuptools may add the build interpreter's own
        # include folder: shadowed), and Debian's pyconfig.h includes
        # <aarch64-linux-gnu/python3.X/pyconfig.h>, found after zig's own libc headers, so no
        # glibc header of the root is ever used.
        "CPPFLAGS": f"-I{root}/usr/include/python{python} -idirafter {root}/usr/include",
    }


def ensure(env: Mapping[str, str], log: Log, mirror: str = "") -> None:
    """Make the parts a cross build's environment names (once per cache, under a lock)."""
    from nightly.images.cuda import host_mirror

    cache, arch, python = Path(env[ENV_CACHE]), env[ENV_ARCH], env["NIGHTLY_CROSS_PYTHON"]
    (cache / "toolchains").mkdir(parents=True, exist_ok=True)
    with (cache / "toolchains" / ".lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        make_zig(cache, arch, log)
        make_root(cache, arch, python, mirror or host_mirror(), log)


def qemu_command(cache: Path, arch: str, python: str, *args: str) -> list[str]:
    """The target's Python X.Y run under qemu-user (a made root; raises when qemu is
    missing)."""
    t, root = target(arch), folder(cache, arch, python) / "root"
    if shutil.which(t.qemu) is None:
        raise CrossError(f"{t.qemu} is not installed: apt-get install qemu-user (it runs "
                         f"{arch} programs on this machine, no binfmt_misc needed)")
    return [t.qemu, "-L", str(root), str(root / "usr" / "bin" / f"python{python}"), *args]


def unpack_wheel(wheel: Path, dest: Path) -> Path:
    """A wheel's files in `dest` (what pip would install; importable with PYTHONPATH)."""
    return unpack_into(wheel, dest, error=CrossError, limits=WHEEL_LIMITS)


def run_against(wheels: Sequence[Path], cache: Path, arch: str, python: str,
                args: Sequence[str], workdir: Path,
                timeout: float | None = None) -> procs.Finished:
    """The target's Python run under qemu-user with `args` (["-c", CODE], ["-m", "pytest"...])
    in `workdir`, the wheels' files importable (unpacked as pip would install them)."""
    site = workdir / "site"
    for wheel in wheels:
        unpack_wheel(wheel, site)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1",
           "HOME": str(workdir), "LANG": "C.UTF-8"}
    return procs.call(qemu_command(cache, arch, python, *args), env=env, cwd=workdir,
                      timeout=timeout or default_timeouts().qemu_run)
