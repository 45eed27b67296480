"""A self-contained CUDA toolkit folder (CUDA_HOME) from sources these machines reach.

- 13.x: NVIDIA's PyPI wheels alone (nvcc, runtime, cccl, crt, nvvm), pinned through the
  `cuda-toolkit==X.Y.*` meta-package; they unpack into one tree `nvidia/cu13/`.
- 11.8 / 12.4: the PyPI wheels (runtime, headers, ptxas, libnvvm, libdevice) plus the five
  compiler binaries PyPI lacks (nvcc, cicc, cudafe++, fatbinary, nvlink, and bin2c) from
  Debian non-free's `nvidia-cuda-toolkit` of the same release, unpacked with `dpkg-deb -x`
  (nothing is installed), fetched through a private apt configuration so the host's apt
  sources stay untouched. CUDA 11 gets `hostcc/{gcc,g++}` wrappers for gcc-11 that
  nvcc.profile puts on nvcc's PATH.

Facts behind this: docs/images.md. Everything downloaded is cached (wheels and .debs keyed
by version); a prefix is assembled in a `.partial` folder and renamed when complete, so an
interrupted run leaves nothing half-made behind.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from nightly.core.suites import DEBIAN_NVCC
from nightly.errors import NightlyError
from nightly.images import transfer
from nightly.procs import run
from nightly.workspace.archive import WHEEL_LIMITS, unpack_into

Log = Callable[[str], None]

KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
MARKER = ".nightly-complete"


class ToolkitError(NightlyError):
    """A CUDA toolkit could not be assembled (download, layout)."""


_run = functools.partial(run, error=ToolkitError)


def download_wheels(version: str, cache: Path, log: Log) -> Path:
    """The CUDA wheels of `version` (X.Y) in a cached folder (pip download once)."""
    dest = cache / "wheels" / f"cuda-{version}"
    if (dest / MARKER).exists():
        log(f"CUDA {version}: wheels cached in {dest}")
        return dest
    major = int(version.split(".")[0])
    extras = "nvcc,cudart,cccl" if major < 13 else "nvcc,cudart,cccl,crt,nvvm"
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    log(f"CUDA {version}: pip download cuda-toolkit[{extras}]=={version}.*")
    # Wheels only, for the image's platform whatever interpreter runs nightly.
    code, tail = transfer.pip_download(
        partial, ["--platform", "manylinux2014_x86_64", "--python-version", "3.11",
                  f"cuda-toolkit[{extras}]=={version}.*"],
        f"CUDA {version}: wheels download", log)
    if code != 0:
        raise ToolkitError(f"pip download cuda-toolkit[{extras}]=={version}.* failed:\n{tail}")
    (partial / MARKER).write_text(version + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    partial.rename(dest)
    return dest


def unzip_wheel(wheel: Path, dest: Path) -> None:
    """Unpack a wheel beside the others, executables 0755 (zipfile alone drops the bits)."""
    unpack_into(wheel, dest, error=ToolkitError, limits=WHEEL_LIMITS)


def _merge(src: Path, dst: Path) -> None:
    """Copy src/. into dst, dropping the Python package markers of the wheels."""
    if not src.is_dir():
        return
    shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))


def host_mirror() -> str:
    """The Debian mirror the host's apt uses, else deb.debian.org."""
    for path in (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")):
        try:
            text = path.read_text()
        except OSError:
            continue
        for word in text.split():
            if word.startswith(("http://", "https://")) and word.rstrip("/").endswith("/debian"):
                return word.rstrip("/")
    return DEFAULT_MIRROR


def fetch_debian_nvcc(version: str, nvcc_wheel_version: str, cache: Path, mirror: str,
                      log: Log) -> Path:
    """Debian non-free's nvidia-cuda-toolkit .deb of this release, cached."""
    debs = cache / "debs" / f"nvidia-cuda-toolkit-{version}"
    found = sorted(debs.glob("nvidia-cuda-toolkit_*.deb"))
    if found:
        log(f"CUDA {version}: Debian .deb cached: {found[0].name}")
        return found[0]
    if not Path(KEYRING).is_file():
        raise ToolkitError(f"{KEYRING} is missing (apt-get install debian-archive-keyring)")
    apt = cache / "apt"
    for sub in ("lists/partial", "cache/archives/partial", "parts", "prefs.d"):
        (apt / sub).mkdir(parents=True, exist_ok=True)
    suites = sorted(set(DEBIAN_NVCC.values()))
    (apt / "sources.list").write_text(
        "".join(f"deb [signed-by={KEYRING}] {mirror} {s} non-free\n" for s in suites)
    )
    (apt / "apt.conf").write_text(
        f'Dir::Etc::SourceList "{apt}/sources.list";\nDir::Etc::SourceParts "{apt}/parts";\n'
        f'Dir::Etc::PreferencesParts "{apt}/prefs.d";\nDir::State::Lists "{apt}/lists";\n'
        f'Dir::Cache "{apt}/cache";\nAPT::Sandbox::User "root";\n'
    )
    env = {**os.environ, "APT_CONFIG": str(apt / "apt.conf")}
    log(f"CUDA {version}: apt-get update (private config: {', '.join(suites)} non-free)")
    _run(["apt-get", "-q", "update"], "apt-get update (private configuration)", env=env)
    madison = _run(["apt-cache", "madison", "nvidia-cuda-toolkit"], "apt-cache madison", env=env)
    versions = [line.split("|")[1].strip() for line in madison.splitlines() if "|" in line]
    match = [v for v in versions if v.startswith(nvcc_wheel_version + "~")]
    if not match:
        raise ToolkitError(
            f"Debian has no nvidia-cuda-toolkit {nvcc_wheel_version} (has: {', '.join(versions)}); "
            f"CUDA {version} cannot be completed from PyPI and Debian"
        )
    partial = debs.with_name(debs.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    log(f"CUDA {version}: apt-get download nvidia-cuda-toolkit={match[0]} (~85 MB)")
    code, tail = transfer.apt_download([f"nvidia-cuda-toolkit={match[0]}"], partial,
                                       f"CUDA {version}: nvcc .deb download", log, env=env)
    if code != 0:
        raise ToolkitError(f"apt-get download nvidia-cuda-toolkit={match[0]} failed "
                           f"(exit {code}):\n{tail}")
    shutil.rmtree(debs, ignore_errors=True)
    partial.rename(debs)
    return sorted(debs.glob("nvidia-cuda-toolkit_*.deb"))[0]


NVCC_PROFILE = """
TOP              = $(_HERE_)/..

NVVMIR_LIBRARY_DIR = $(TOP)/$(_NVVM_BRANCH_)/libdevice

LD_LIBRARY_PATH += $(TOP)/lib:
PATH            += {hostcc}$(TOP)/$(_NVVM_BRANCH_)/bin:$(_HERE_):

INCLUDES        +=  "-I$(TOP)/$(_TARGET_DIR_)/include" $(_SPACE_)

LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/$(_TARGET_DIR_)/lib$(_TARGET_SIZE_)/stubs" \
"-L$(TOP)/$(_TARGET_DIR_)/lib$(_TARGET_SIZE_)"

CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
"""


def _layout_13(w: Path, prefix: Path, major: int) -> None:
    _merge(w / "nvidia" / f"cu{major}", prefix)
    libs = sorted((prefix / "lib").glob("libnvvm.so.*"))
    if libs:
        nvvm = prefix / "nvvm" / "lib64"
        nvvm.mkdir(parents=True, exist_ok=True)
        for f in libs:
            (nvvm / f.name).symlink_to(f"../../lib/{f.name}")
        (nvvm / "libnvvm.so").symlink_to(libs[0].name)


def _layout_legacy(w: Path, prefix: Path, deb: Path, version: str, gcc: str | None) -> None:
    for comp in ("cuda_runtime", "cuda_nvcc", "cuda_cccl"):
        _merge(w / "nvidia" / comp / "include", prefix / "include")
        _merge(w / "nvidia" / comp / "lib", prefix / "lib")
    _merge(w / "nvidia" / "cuda_nvcc" / "bin", prefix / "bin")
    for d in ("lib64", "libdevice", "include"):
        _merge(w / "nvidia" / "cuda_nvcc" / "nvvm" / d, prefix / "nvvm" / d)
    with tempfile.TemporaryDirectory(prefix="nightly-deb-") as t:
        _run(["dpkg-deb", "-x", str(deb), t], f"dpkg-deb -x {deb.name}")
        x = Path(t) / "usr"
        real = x / "lib" / "nvidia-cuda-toolkit" / "bin"  # usr/bin/nvcc is Debian's wrapper
        (prefix / "nvvm" / "bin").mkdir(parents=True, exist_ok=True)
        shutil.copy2(real / "nvcc", prefix / "bin" / "nvcc")
        _merge(real / "crt", prefix / "bin" / "crt")
        shutil.copy2(real / "cicc", prefix / "nvvm" / "bin" / "cicc")
        for tool in ("cudafe++", "fatbinary", "nvlink", "bin2c", "cuobjdump", "nvprune"):
            if (x / "bin" / tool).exists():
                shutil.copy2(x / "bin" / tool, prefix / "bin" / tool)
        if not (prefix / "bin" / "ptxas").exists():
            shutil.copy2(x / "bin" / "ptxas", prefix / "bin" / "ptxas")
        if not (prefix / "nvvm" / "libdevice" / "libdevice.10.bc").exists():
            _merge(real.parent / "libdevice", prefix / "nvvm" / "libdevice")
    hostcc = ""
    if gcc:
        # nvcc of CUDA 11 refuses gcc > 11: wrappers named gcc/g++ that run gcc-11, first on
        # the PATH nvcc.profile gives nvcc (-ccbin still overrides them).
        (prefix / "hostcc").mkdir()
        for tool in ("gcc", "g++"):
            wrapper = prefix / "hostcc" / tool
            wrapper.write_text(f'#!/bin/sh\nexec {tool}-{gcc} "$@"\n')
            wrapper.chmod(0o755)
        hostcc = "$(TOP)/hostcc:"
    (prefix / "bin" / "nvcc.profile").write_text(NVCC_PROFILE.format(hostcc=hostcc))


def _common_links(prefix: Path) -> None:
    lib = prefix / "lib"
    for f in sorted(lib.glob("lib*.so.*")):
        linker_name = lib / (f.name.split(".so.")[0] + ".so")
        if not linker_name.exists() and not linker_name.is_symlink():
            linker_name.symlink_to(f.name)  # wheels ship only the SONAME files
    if not (prefix / "lib64").exists():
        (prefix / "lib64").symlink_to("lib")
    targets = prefix / "targets" / "x86_64-linux"
    targets.mkdir(parents=True, exist_ok=True)
    for d in ("include", "lib"):
        if not (targets / d).exists():
            (targets / d).symlink_to(f"../../{d}")
    for f in (prefix / "bin").iterdir():
        if f.is_file() and f.name != "nvcc.profile":
            f.chmod(f.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def assemble(version: str, cache: Path, *, mirror: str = "", host_gcc: str | None = None,
             log: Log = lambda _: None) -> Path:
    """The prefix of CUDA `version` (X.Y) in the cache, assembled once; returns its path."""
    major = int(version.split(".")[0])
    prefix = cache / "cuda" / (f"cuda-{version}" + (f"-gcc{host_gcc}" if host_gcc else ""))
    if (prefix / MARKER).exists():
        log(f"CUDA {version}: toolkit cached in {prefix}")
        return prefix
    wheels = download_wheels(version, cache, log)
    partial = prefix.with_name(prefix.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    sources = sorted(w.name for w in wheels.glob("*.whl"))
    with tempfile.TemporaryDirectory(prefix="nightly-cuda-", dir=cache) as t:
        w = Path(t)
        for wheel in wheels.glob("nvidia_*.whl"):
            unzip_wheel(wheel, w)
        if major >= 13:
            _layout_13(w, partial, major)
        else:
            nvcc_whl = next(wheels.glob(f"nvidia_cuda_nvcc_cu{major}-*.whl"), None)
            if nvcc_whl is None:
                raise ToolkitError(f"no nvidia-cuda-nvcc-cu{major} wheel in {wheels}")
            nvcc_version = nvcc_whl.name.split("-")[1]
            deb = fetch_debian_nvcc(version, nvcc_version, cache, mirror or host_mirror(), log)
            sources.append(f"debian:{deb.name}")
            _layout_legacy(w, partial, deb, version, host_gcc)
    for must in ("bin/nvcc", "nvvm/bin/cicc"):
        if not (partial / must).exists():
            raise ToolkitError(f"CUDA {version}: the assembled toolkit has no {must}")
    _common_links(partial)
    (partial / "nightly-sources.txt").write_text("\n".join(sources) + "\n")
    (partial / MARKER).write_text(version + "\n")
    shutil.rmtree(prefix, ignore_errors=True)
    partial.rename(prefix)
    log(f"CUDA {version}: toolkit assembled in {prefix}")
    return prefix
