"""A glibc-targeting toolchain: the host's gcc/g++ compiling against Debian bullseye's glibc.

A wheel's manylinux tag is decided by the newest glibc symbol versions it uses, which come
from the glibc it was *linked* against, not from the compiler. So the suite's own gcc (12 on
bookworm) with a bullseye sysroot (glibc 2.31: libc6, libc6-dev, linux-libc-dev, libcrypt1,
libcrypt-dev, ~7 MB of .debs unpacked with `dpkg-deb -x`, nothing installed) links code that
needs only the symbol versions it really calls: a C extension starting a thread needs
GLIBC_2.2.5 (bookworm's libc would make it 2.34, when pthread moved into libc), and nvcc
with these wrappers as its host compiler gives libraries whose newest symbol is GLIBC_2.17.
Debian's mirror has no buster (2.28) any more; bullseye is the oldest glibc it serves, and
2.29-2.31-only functions are rare (auditwheel names any that a wheel uses).

The toolchain folder:

    sysroot/            the unpacked .debs (absolute symlinks made relative)
    lib/                the shim for what gcc's static libstdc++ needs beyond glibc 2.31
    bin/gcc, bin/g++    wrappers: --sysroot plus the library paths gcc does not take from
                        the sysroot; g++ also the suite's C++ headers and a static libstdc++ /
                        libgcc (gcc 12's libstdc++.so symbols are newer than the policies
                        allow); cc and c++ link to them
    gccN/gcc, gccN/g++  the same for each older gcc-N found (CUDA 11's nvcc needs gcc 11)

The wrappers find the sysroot beside themselves, so the folder can be copied into an image
(/opt/nightly-toolchain) or used in place from nightly's cache by the local executor.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from nightly import procs
from nightly.core.spec import SYSROOT_GLIBC, TOOLCHAIN_REVISION
from nightly.errors import NightlyError
from nightly.images import transfer
from nightly.procs import run

Log = Callable[[str], None]

SUITE = "bullseye"
GLIBC = SYSROOT_GLIBC
DEBS = ("libc6", "libc6-dev", "linux-libc-dev", "libcrypt1", "libcrypt-dev")
MARKER = ".nightly-complete"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
IMAGE_PATH = "/opt/nightly-toolchain"
MULTIARCH = "x86_64-linux-gnu"
REVISION = TOOLCHAIN_REVISION  # of the wrappers and shim: a new one is a new cached folder

# {real}: the compiler the wrapper stands for; {cxx}: g++'s extra flags (empty for gcc).
# A link (any input, none of -c -S -E -M -MM) also gets: the shim (what the suite's static
# libstdc++ calls that glibc {glibc} lacks), glibc < 2.34's separate libpthread, libdl and
# librt as needed (code written for a newer glibc omits -pthread / -ldl), and leave to
# the host's own libgcc_s its newer glibc (it is the running machine's, never the wheel's).
# The machine's own headers and libraries (a distro Python's multiarch pyconfig.h, a
# project's -dev packages) stay visible after the sysroot's: a library found there is
# bundled by auditwheel and checked against the policy like the wheel itself.
WRAPPER = r"""#!/bin/sh
# Written by nightly (nightly/images/sysroot.py): {real} linking against glibc {glibc}
# (Debian {suite}'s libc6-dev in the sysroot beside this folder).
here="$(cd "$(dirname "$0")" && pwd -P)"
s="$(cd "$here/../sysroot" && pwd -P)"
m={multiarch}
link=0
for a in "$@"; do
    case "$a" in
        -c | -S | -E | -M | -MM | -fsyntax-only) link=0; break ;;
        -*) ;;
        *) link=1 ;;
    esac
done
if [ "$link" = 1 ]; then
    set -- "$@" {cxxlink}"$here/../lib/{shim}" -Wl,--allow-shlib-undefined \
        -Wl,--push-state,--as-needed -lpthread -ldl -lrt -Wl,--pop-state \
        -L "/usr/lib/$m" -L /usr/lib
fi
{cxx}exec {real} --sysroot="$s" -B "$s/usr/lib/$m" -L "$s/usr/lib/$m" -L "$s/lib/$m" \
    {cxxflags}-idirafter "/usr/include/$m" -idirafter /usr/include "$@"
"""

SHIM = "nightly-glibc-shim.o"
# What the suite's static libstdc++ refers to that glibc 2.31 does not have, defined hidden
# (never exported, never interposing the running glibc): __libc_single_threaded (2.32; 0
# means "maybe threaded", the always-correct answer), arc4random (2.36; random_device), and
# the C23 strto* (2.38: a libstdc++ compiled against trixie's or sid's glibc calls them; the
# C17 ones differ only in not reading a "0b" prefix, which libstdc++ never parses).
SHIM_SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
#define NIGHTLY_C23(type, name) __attribute__((visibility("hidden"))) type __isoc23_##name( \
    const char *s, char **end, int base) { return name(s, end, base); }
NIGHTLY_C23(long, strtol)
NIGHTLY_C23(unsigned long, strtoul)
NIGHTLY_C23(long long, strtoll)
NIGHTLY_C23(unsigned long long, strtoull)
__attribute__((visibility("hidden"))) char __libc_single_threaded = 0;
__attribute__((visibility("hidden"))) uint32_t arc4random(void) {
    uint32_t v = 0;
    while (syscall(SYS_getrandom, &v, sizeof v, 0) != (long)sizeof v) {
    }
    return v;
}
"""

# g++'s own headers are not under the sysroot: name the suite's explicitly (the version is
# the real compiler's, read once per call; cheap next to a compile).
CXX_HEADERS = r"""v="$({real} -dumpversion)"
v="${{v%%.*}}"
"""
CXX_FLAGS = ('-isystem "/usr/include/c++/$v" -isystem "/usr/include/$m/c++/$v" '
             '-isystem "/usr/include/c++/$v/backward" ')
CXX_LINK = "-static-libstdc++ "  # links only: with no input it would make g++ -v link


class ToolchainError(NightlyError):
    """The glibc-targeting toolchain could not be made (download, unpack, self-test)."""


_run = functools.partial(run, error=ToolchainError, tail=10)


def private_apt(apt: Path, suite: str, mirror: str, arch: str = "") -> dict[str, str]:
    """The environment of apt-get with a private configuration in `apt`: the suite's main
    component from `mirror`, for `arch` (Debian's name, e.g. arm64; "" for this machine's),
    the system's sources and state untouched."""
    for sub in ("lists/partial", "cache/archives/partial", "parts", "prefs.d"):
        (apt / sub).mkdir(parents=True, exist_ok=True)
    (apt / "status").write_text("")
    (apt / "sources.list").write_text(f"deb [signed-by={KEYRING}] {mirror} {suite} main\n")
    archs = f'APT::Architecture "{arch}";\nAPT::Architectures {{ "{arch}"; }};\n' if arch else ""
    (apt / "apt.conf").write_text(
        f'Dir::Etc::SourceList "{apt}/sources.list";\nDir::Etc::SourceParts "{apt}/parts";\n'
        f'Dir::Etc::PreferencesParts "{apt}/prefs.d";\nDir::State::Lists "{apt}/lists";\n'
        f'Dir::State::status "{apt}/status";\nDir::Cache "{apt}/cache";\n'
        'APT::Sandbox::User "root";\n' + archs
    )
    return {**os.environ, "APT_CONFIG": str(apt / "apt.conf")}


def fetch_debs(cache: Path, mirror: str, log: Log) -> Path:
    """bullseye's glibc .debs in a cached folder, fetched through a private apt
    configuration (its own sources, lists and an empty dpkg status: the host's installed
    versions must not decide which version is fetched)."""
    debs = cache / "debs" / f"{SUITE}-glibc"
    if (debs / MARKER).exists():
        return debs
    if not Path(KEYRING).is_file():
        raise ToolchainError(f"{KEYRING} is missing (apt-get install debian-archive-keyring)")
    env = private_apt(cache / f"apt-{SUITE}", SUITE, mirror)
    log(f"toolchain: apt-get update (private configuration: {SUITE} main from {mirror})")
    _run(["apt-get", "-q", "update"], "apt-get update (private configuration)", env=env)
    partial = debs.with_name(debs.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    log(f"toolchain: apt-get download {' '.join(DEBS)} (~7 MB)")
    code, tail = transfer.apt_download(DEBS, partial, f"toolchain: glibc {SUITE} .debs download",
                                       log, env=env)
    if code != 0:
        raise ToolchainError(f"apt-get download failed (exit {code}): {' '.join(DEBS)}\n{tail}")
    (partial / MARKER).write_text(" ".join(DEBS) + "\n")
    shutil.rmtree(debs, ignore_errors=True)
    partial.rename(debs)
    return debs


def relink(root: Path) -> int:
    """Make the sysroot's absolute symlinks (lib64/ld-linux-x86-64.so.2, libm.so ...)
    relative, so they resolve inside it wherever it is; returns how many were changed."""
    changed = 0
    for link in root.rglob("*"):
        if not link.is_symlink():
            continue
        target = os.readlink(link)
        if target.startswith("/"):
            rel = os.path.relpath(root / target.lstrip("/"), link.parent)
            link.unlink()
            link.symlink_to(rel)
            changed += 1
    return changed


def wrapper_text(real: str, cxx: bool) -> str:
    return WRAPPER.format(
        real=real, glibc=GLIBC, suite=SUITE, multiarch=MULTIARCH, shim=SHIM,
        cxx=CXX_HEADERS.format(real=real) if cxx else "", cxxflags=CXX_FLAGS if cxx else "",
        cxxlink=CXX_LINK if cxx else "",
    )


def write_wrappers(toolchain: Path, gccs: Mapping[str, str] | None = None) -> None:
    """bin/{gcc,g++,cc,c++} for the default compilers, gccN/{gcc,g++} for older ones.
    `gccs`: folder name -> version suffix ("gcc11" -> "-11"); default: found on PATH."""
    folders = {"bin": ""} | dict(gccs if gccs is not None else older_gccs())
    for folder, suffix in folders.items():
        d = toolchain / folder
        d.mkdir(parents=True, exist_ok=True)
        for name, real, cxx in (("gcc", f"gcc{suffix}", False), ("g++", f"g++{suffix}", True)):
            path = d / name
            path.write_text(wrapper_text(real, cxx))
            path.chmod(0o755)
        for alias, name in (("cc", "gcc"), ("c++", "g++")):
            if not (d / alias).exists():
                (d / alias).symlink_to(name)


def older_gccs() -> dict[str, str]:
    """gcc-N/g++-N pairs on this machine (e.g. gcc-11 for CUDA 11's nvcc)."""
    out: dict[str, str] = {}
    default = procs.call(["gcc", "-dumpversion"]).stdout
    for n in range(7, 15):
        if str(n) == default.strip().split(".")[0]:
            continue
        if shutil.which(f"gcc-{n}") and shutil.which(f"g++-{n}"):
            out[f"gcc{n}"] = f"-{n}"
    return out


def build_shim(toolchain: Path) -> None:
    """lib/nightly-glibc-shim.o, compiled against the sysroot (position-independent: it goes
    into shared libraries and programs alike)."""
    lib = toolchain / "lib"
    lib.mkdir(exist_ok=True)
    (lib / "nightly-glibc-shim.c").write_text(SHIM_SOURCE)
    _run([str(toolchain / "bin" / "gcc"), "-O2", "-fPIC", "-c", str(lib / "nightly-glibc-shim.c"),
          "-o", str(lib / SHIM)], "compiling the glibc shim")


def unpack(debs: Path, dest: Path) -> None:
    root = dest / "sysroot"
    root.mkdir(parents=True)
    for deb in sorted(debs.glob("*.deb")):
        _run(["dpkg-deb", "-x", str(deb), str(root)], f"dpkg-deb -x {deb.name}")
    relink(root)
    # What no build needs: locales, docs, gconv modules, the loader's audit helpers.
    for junk in ("usr/share", "usr/lib/x86_64-linux-gnu/gconv", "usr/bin", "usr/sbin",
                 "sbin", "usr/lib/x86_64-linux-gnu/audit"):
        shutil.rmtree(root / junk, ignore_errors=True)


def assemble(cache: Path, *, mirror: str = "", log: Log = lambda _: None) -> Path:
    """The toolchain folder in the cache (sysroot + wrappers), made once; returns it."""
    from nightly.images.cuda import host_mirror

    dest = cache / "toolchains" / f"{SUITE}-glibc{GLIBC}-{REVISION}"
    if (dest / MARKER).exists():
        return dest
    debs = fetch_debs(cache, mirror or host_mirror(), log)
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    unpack(debs, partial)
    write_wrappers(partial)
    build_shim(partial)
    (partial / "nightly-sources.txt").write_text(
        "\n".join(sorted(p.name for p in debs.glob("*.deb"))) + "\n")
    (partial / MARKER).write_text(f"{SUITE} glibc {GLIBC}\n")
    shutil.rmtree(dest, ignore_errors=True)
    partial.rename(dest)
    log(f"toolchain: glibc {GLIBC} sysroot ({SUITE}) ready in {dest}")
    return dest


def toolchain_env(bindir: str, *, cuda_gcc: str | None = None) -> dict[str, str]:
    """The variables that make setuptools, CMake (C, C++ and CUDA's host compiler) and nvcc
    use the wrappers in `bindir` (the toolchain's bin/, on the host or in an image).
    `cuda_gcc`: the gcc version nvcc needs (11 for CUDA 11), whose wrappers are used for it."""
    cc, cxx = f"{bindir}/gcc", f"{bindir}/g++"
    host = f"{bindir}/../gcc{cuda_gcc}/g++" if cuda_gcc else cxx
    return {
        "CC": cc, "CXX": cxx,
        # setuptools links with LDSHARED (C) and LDCXXSHARED (C++); without them it keeps
        # the interpreter's own linker command, which links against the host's glibc.
        "LDSHARED": f"{cc} -pthread -shared", "LDCXXSHARED": f"{cxx} -pthread -shared",
        "CUDAHOSTCXX": host,  # CMake's CUDA host compiler
        "NVCC_CCBIN": host,  # nvcc's own default host compiler (-ccbin overrides it)
        "NIGHTLY_TOOLCHAIN": f"glibc {GLIBC} sysroot ({SUITE})",
    }


# -- the local executor: the toolchain from nightly's cache --------------------------------

ENV_CACHE = "NIGHTLY_TOOLCHAIN_CACHE"  # set by make_job: the cache to assemble it in


def host_glibc() -> tuple[int, int]:
    """This machine's glibc ((0, 0) where it is not glibc)."""
    text = os.confstr("CS_GNU_LIBC_VERSION") if "CS_GNU_LIBC_VERSION" in os.confstr_names else ""
    parts = (text or "").split()[-1:] or ["0.0"]
    try:
        major, minor = parts[0].split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return (0, 0)


def host_env(policy_glibc: tuple[int, int], cache: Path) -> dict[str, str]:
    """The variables a host build needs to meet a policy: none when this machine's glibc is
    not newer than the policy, else the toolchain's (assembled later, by `ensure`, so a dry
    run or a preflight downloads nothing)."""
    if host_glibc() <= policy_glibc:
        return {}
    toolchain = cache / "toolchains" / f"{SUITE}-glibc{GLIBC}-{REVISION}"
    return {**toolchain_env(str(toolchain / "bin")), ENV_CACHE: str(cache)}


def ensure(env: Mapping[str, str], log: Log) -> None:
    """Assemble the toolchain a host build's environment names (once per cache; a lock
    keeps parallel queues from assembling it twice). Raises ToolchainError."""
    import fcntl

    cache = Path(env[ENV_CACHE])
    (cache / "toolchains").mkdir(parents=True, exist_ok=True)
    with (cache / "toolchains" / ".lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        assemble(cache, log=log)
