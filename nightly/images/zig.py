"""zig as a glibc-targeting C/C++ toolchain: `zig cc -target x86_64-linux-gnu.2.17`.

zig (the `ziglang` wheel on PyPI: the compiler, clang inside it, and the headers and symbol
lists of every glibc release) links against stub libraries of exactly the glibc release it
is told, so a wheel it builds needs no glibc symbol newer than that: a C extension comes out
`manylinux_2_5` and a C++ one `manylinux_2_17` (zig links its libc++ statically; a few MB
per extension). It targets glibc 2.17 (manylinux2014) or the policy's, when older.

It cannot be nvcc's host compiler (CUDA's headers reject libc++ on x86), so CUDA builds
always use the sysroot toolchain (nightly.images.sysroot), which a zig builder's images
carry too.

The toolchain folder (in nightly's cache for host builds; /opt/nightly-zig in images):

    zig/zig, zig/lib/   the wheel's compiler and its lib folder, without the headers and
                        C libraries of other targets (411 MB unpacked, ~230 MB kept)
    bin/cc, bin/c++     wrappers: `zig cc|c++ -target x86_64-linux-gnu.<glibc>`, the glibc
                        from NIGHTLY_ZIG_GLIBC (default 2.17); gcc and g++ link to them
    cache/              zig's cache (ZIG_GLOBAL_CACHE_DIR unless set): the glibc stubs,
                        compiler-rt and libc++ zig builds on first use (minutes) are kept
"""

from __future__ import annotations

import os
import shutil
import tarfile
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

from nightly.core.spec import ZIG_GLIBC, ZIG_REVISION, ZIG_VERSION
from nightly.errors import NightlyError
from nightly.images import transfer
from nightly.workspace import archive

Log = Callable[[str], None]

MARKER = ".nightly-complete"
IMAGE_PATH = "/opt/nightly-zig"
ENV_GLIBC = "NIGHTLY_ZIG_GLIBC"  # the glibc the wrappers target (the policy's, at most 2.17)
ENV_CACHE = "NIGHTLY_ZIG_CACHE"  # set for host builds: nightly's cache to assemble it in
# The headers zig needs for x86_64-linux-gnu; every other target's are dropped.
MULTIARCH = "x86_64-linux-gnu"  # the host builds' target, and Debian's name for it
KEEP_INCLUDE = ("x86-linux-gnu", "x86-linux-any", "generic-glibc", "any-linux-any")
DROP_LIBC = ("musl", "mingw", "wasi", "darwin", "freebsd", "netbsd", "openbsd")

# `zig cc` takes the target as an option; build systems take CC as one program, so each
# driver is a script. The cache beside the wrappers keeps what zig builds on first use.
# Two of zig's defaults are not gcc's, and the wrapper undoes them: code compiled without -O
# gets UBSan (whose runtime an extension linked without it would miss at import), and a link
# without -O builds compiler-rt and libc++ in debug mode (setuptools' LDSHARED has no -O: each
# such link took minutes and made slow code); so no sanitizer unless asked for, and -O2 for
# links that name no optimisation level.
WRAPPER = r"""#!/bin/sh
# Written by nightly (nightly/images/zig.py): zig {zig_version} {driver}, linking against
# glibc ${{{env_glibc}:-{glibc}}}'s symbols only (zig's own stubs of that release).
here="$(cd "$(dirname "$0")" && pwd -P)"
if [ -z "${{ZIG_GLOBAL_CACHE_DIR:-}}" ]; then
    ZIG_GLOBAL_CACHE_DIR="$here/../cache"
    export ZIG_GLOBAL_CACHE_DIR
fi
: "${{ZIG_LOCAL_CACHE_DIR:=$ZIG_GLOBAL_CACHE_DIR}}"
export ZIG_LOCAL_CACHE_DIR
opt=0 san=0 link=1
for a in "$@"; do
    case "$a" in
        -O*) opt=1 ;;
        -fsanitize=*) san=1 ;;
        -c | -S | -E | -M | -MM | -fsyntax-only) link=0 ;;
    esac
done
[ "$san" = 1 ] || set -- -fno-sanitize=undefined "$@"
[ "$opt" = 1 ] || [ "$link" = 0 ] || set -- -O2 "$@"
exec "$here/../zig/zig" {driver} -target "{triple}.${{{env_glibc}:-{glibc}}}" "$@"
"""

# The image's self-test, which also fills zig's cache for the builds (the glibc stubs,
# compiler-rt, libc++ in the optimisation mode of -O2/-O3 builds): a threaded C extension-like
# shared object and a C++ program, built and run.
SELFTEST = (
    "printf '#include <pthread.h>\\nstatic void *f(void *a){return a;}\\nint main(void)"
    "{pthread_t t; pthread_create(&t,0,f,0); return pthread_join(t,0);}\\n' > /tmp/t.c"
    " && $CC -O2 -pthread /tmp/t.c -o /tmp/t && /tmp/t"
    " && $CC -O2 -fPIC -shared -pthread /tmp/t.c -o /tmp/t.so"
    " && printf '#include <thread>\\n#include <vector>\\nint main(){std::vector<int> v(3);"
    " std::thread t([&]{v[0]=0;}); t.join(); return v[0];}\\n' > /tmp/t.cpp"
    " && $CXX -O2 /tmp/t.cpp -o /tmp/t && /tmp/t && $CXX -O2 -fPIC -shared /tmp/t.cpp -o /tmp/t.so"
    " && rm -f /tmp/t /tmp/t.so /tmp/t.c /tmp/t.cpp"
)


class ZigError(NightlyError):
    """The zig toolchain could not be made (download, unpack)."""


def target_glibc(policy_glibc: tuple[int, int]) -> str:
    """The glibc zig targets for a policy: 2.17, or the policy's when it is older."""
    default = tuple(int(x) for x in ZIG_GLIBC.split("."))
    major, minor = min(policy_glibc, default)
    return f"{major}.{minor}"


def folder(cache: Path) -> Path:
    return cache / "toolchains" / f"zig-{ZIG_VERSION}-{ZIG_REVISION}"


def fetch_wheel(cache: Path, log: Log) -> Path:
    """The ziglang wheel, downloaded once with pip (the host's pip configuration)."""
    dest = cache / "wheels" / f"ziglang-{ZIG_VERSION}"
    found = sorted(dest.glob("ziglang-*.whl"))
    if (dest / MARKER).exists() and found:
        return found[0]
    dest.mkdir(parents=True, exist_ok=True)
    log(f"toolchain: pip download ziglang=={ZIG_VERSION} (~100 MB)")
    code, tail = transfer.pip_download(
        dest, ["--no-deps", "--platform", "manylinux_2_12_x86_64", f"ziglang=={ZIG_VERSION}"],
        f"toolchain: ziglang {ZIG_VERSION} download", log)
    found = sorted(dest.glob("ziglang-*.whl"))
    if code != 0 or not found:
        raise ZigError(f"pip download ziglang=={ZIG_VERSION} failed:\n{tail}")
    (dest / MARKER).write_text(found[0].name + "\n")
    return found[0]


def _kept(name: str, keep_include: tuple[str, ...] = KEEP_INCLUDE) -> bool:
    """Whether a path of the wheel goes into the toolchain (ziglang/... only, this target's)."""
    parts = name.split("/")
    if parts[0] != "ziglang" or len(parts) < 2 or parts[1] in ("__init__.py", "__main__.py"):
        return False
    if parts[1:4] == ["lib", "libc", "include"] and len(parts) > 4:
        return parts[4] in keep_include
    return not (parts[1:3] == ["lib", "libc"] and len(parts) > 3 and parts[3] in DROP_LIBC)


def unpack(wheel: Path, dest: Path, keep_include: tuple[str, ...] = KEEP_INCLUDE) -> int:
    """The wheel's ziglang/ folder as dest/zig (executables 0755, the rest 0644; through the
    one unpacker, nightly.workspace.archive); returns the bytes kept."""
    def kept(rel: tuple[str, ...]) -> bool:
        return _kept("/".join(rel), keep_include)

    with zipfile.ZipFile(wheel) as zf:
        total = sum(i.file_size for i in zf.infolist() if not i.is_dir() and kept(
            tuple(i.filename.split("/"))))
    dest.mkdir(parents=True, exist_ok=True)
    archive.unpack(wheel, dest / "wheel", error=ZigError, limits=archive.WHEEL_LIMITS, keep=kept)
    (dest / "wheel" / "ziglang").rename(dest / "zig")
    shutil.rmtree(dest / "wheel")
    (dest / "zig" / "zig").chmod(0o755)
    return total


def wrapper_text(driver: str, triple: str = "x86_64-linux-gnu") -> str:
    return WRAPPER.format(zig_version=ZIG_VERSION, driver=driver, glibc=ZIG_GLIBC,
                          env_glibc=ENV_GLIBC, triple=triple)


def write_wrappers(dest: Path, triple: str = "x86_64-linux-gnu") -> None:
    """bin/cc and bin/c++ (gcc and g++ link to them: projects that call those by name)."""
    bindir = dest / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    for name, driver in (("cc", "cc"), ("c++", "c++")):
        (bindir / name).write_text(wrapper_text(driver, triple))
        (bindir / name).chmod(0o755)
    for alias, name in (("gcc", "cc"), ("g++", "c++")):
        if not (bindir / alias).exists():
            (bindir / alias).symlink_to(name)


def assemble(cache: Path, *, log: Log = lambda _: None) -> Path:
    """The zig toolchain folder in the cache (compiler + wrappers), made once; returns it."""
    dest = folder(cache)
    if (dest / MARKER).exists():
        return dest
    wheel = fetch_wheel(cache, log)
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    size = unpack(wheel, partial)
    write_wrappers(partial)
    (partial / "cache").mkdir()
    (partial / "nightly-sources.txt").write_text(wheel.name + "\n")
    (partial / MARKER).write_text(f"zig {ZIG_VERSION}\n")
    shutil.rmtree(dest, ignore_errors=True)
    partial.rename(dest)
    log(f"toolchain: zig {ZIG_VERSION} ready in {dest} ({size / 1e6:.0f} MB)")
    return dest


def toolchain_env(bindir: str, glibc: str) -> dict[str, str]:
    """What makes setuptools (CC, CXX, LDSHARED, LDCXXSHARED), CMake, scikit-build-core and
    meson-python (CC, CXX) compile and link with the zig wrappers in `bindir`."""
    cc, cxx = f"{bindir}/cc", f"{bindir}/c++"
    return {
        "CC": cc, "CXX": cxx,
        "LDSHARED": f"{cc} -pthread -shared", "LDCXXSHARED": f"{cxx} -pthread -shared",
        ENV_GLIBC: glibc,
        "NIGHTLY_TOOLCHAIN": f"zig {ZIG_VERSION} (x86_64-linux-gnu.{glibc})",
    }


def host_env(policy_glibc: tuple[int, int], cache: Path) -> dict[str, str]:
    """A host build's variables for zig (assembled later by `ensure`: a dry run downloads
    nothing). zig's cache is the toolchain's, kept between builds. zig searches its own libc
    headers, never /usr/include, but a distro Python's pyconfig.h includes its multiarch copy
    (<x86_64-linux-gnu/python3.X/pyconfig.h>): CPATH names a folder holding only that
    multiarch folder (every build system passes CPATH through to the compiler), so no header
    of the machine's glibc is ever seen."""
    return {**toolchain_env(str(folder(cache) / "bin"), target_glibc(policy_glibc)),
            ENV_CACHE: str(cache), "CPATH": str(_multiarch_dir(cache))}


def _multiarch_dir(cache: Path) -> Path:
    return cache / "toolchains" / f"host-multiarch-{MULTIARCH}"


def _link_multiarch(cache: Path) -> None:
    """The folder CPATH names: one link to the machine's /usr/include/<multiarch> (made once)."""
    where = _multiarch_dir(cache)
    if (where / MULTIARCH).is_symlink():
        return
    tmp = Path(f"{where}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / MULTIARCH).symlink_to(f"/usr/include/{MULTIARCH}")
    try:
        tmp.rename(where)
    except OSError:  # made by another build meanwhile
        shutil.rmtree(tmp, ignore_errors=True)


def ensure(env: Mapping[str, str], log: Log) -> None:
    """Assemble the zig toolchain a host build's environment names (once per cache, under a
    lock shared with the sysroot's). Raises ZigError."""
    import fcntl

    cache = Path(env[ENV_CACHE])
    (cache / "toolchains").mkdir(parents=True, exist_ok=True)
    with (cache / "toolchains" / ".lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        assemble(cache, log=log)
        _link_multiarch(cache)


def image_env() -> dict[str, str]:
    """zig's cache in an image: the one its build filled, writable by any build user."""
    return {"ZIG_GLOBAL_CACHE_DIR": f"{IMAGE_PATH}/cache",
            "ZIG_LOCAL_CACHE_DIR": f"{IMAGE_PATH}/cache"}


def add_to_context(tar: tarfile.TarFile, cache: Path, log: Log) -> None:
    """The toolchain (assembled in the cache) as `zig/` of an image's build context, with an
    empty cache folder for the image's self-test to fill."""
    toolchain = assemble(cache, log=log)

    def owner(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    for part in ("zig", "bin"):
        tar.add(str(toolchain / part), arcname=f"zig/{part}", filter=owner)
    info = owner(tarfile.TarInfo("zig/cache"))
    info.type, info.mode = tarfile.DIRTYPE, 0o777
    tar.addfile(info)


def dockerfile_lines(glibc: str, env_line: Callable[[dict[str, str]], str]) -> list[str]:
    """The cpu layer's zig part: the toolchain, the build variables pointing at it, and the
    self-test that fills zig's cache (left writable for whatever user a build runs as)."""
    env = toolchain_env(f"{IMAGE_PATH}/bin", glibc) | image_env()
    return [
        f"COPY zig {IMAGE_PATH}",
        env_line(env),
        f"RUN set -e; {SELFTEST}; chmod -R a+rwX {IMAGE_PATH}/cache",
    ]
