"""The build matrix: spellings, the Build value, expansion and selectors. Pure: no I/O."""

from __future__ import annotations

import datetime as dt
import difflib
import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import nightly.core.axes as axes

PACKAGES = ("conda", "manywheel", "wheel", "libtorch")
PLATFORMS = ("linux", "macos", "windows")
# The platforms of each package type (Windows: wheels and libtorch zips, as PyTorch builds).
PACKAGE_PLATFORMS = {
    "conda": ("linux", "macos"),
    "manywheel": ("linux",),
    "wheel": ("macos", "windows"),
    "libtorch": ("linux", "macos", "windows"),
}
LIBTORCH_VARIANTS = (
    "shared-with-deps",
    "shared-without-deps",
    "static-with-deps",
    "static-without-deps",
)
# `all` builds the four variants in one job, as the 2019 scripts did.
LIBTORCH_ALL = "all"

_PYTHON_RE = re.compile(r"^(2|3)\.([0-9]{1,2})(m|mu|dm|t)?$")  # not \d: it matches "７"
_CUDA_CU_RE = re.compile(r"^(?:cu|cuda)([0-9]{2,4})$")
_CUDA_DOT_RE = re.compile(r"^(?:cuda)?([0-9]{1,2})\.([0-9])$")


class SpellingError(axes.AxisError):
    """A malformed Python, CUDA, accelerator or architecture spelling; config/cli turn it
    into a located error."""


def normalize_cuda(text: str) -> str:
    """`cpu`, `cu100`, `10.0`, `cu126`, `12.6` -> `cpu` / `cuXY[Z]`."""
    s = str(text).strip().lower()
    if s == "cpu":
        return "cpu"
    m = _CUDA_DOT_RE.match(s)
    if m:
        return f"cu{int(m.group(1))}{m.group(2)}"
    m = _CUDA_CU_RE.match(s)
    if m and not m.group(1).startswith("0"):
        return f"cu{m.group(1)}"
    raise SpellingError(
        f"'{text}' is not a CUDA version: write cpu, cuXY[Z] (cu100, cu126) or X.Y (10.0, 12.6)"
    )


def normalize_accelerator(text: str) -> str:
    """An accelerator in the CUDA slot: `cpu`, a CUDA spelling (-> `cuXYZ`), `rocmX.Y`, `xpu`."""
    try:
        other = axes.normalize_other(text)
    except axes.AxisError as e:
        raise SpellingError(str(e)) from e
    if other is not None:
        return other
    try:
        return normalize_cuda(text)
    except SpellingError as e:
        raise SpellingError(
            f"'{text}' is not a CUDA version or other accelerator: write cpu, cuXY[Z] (cu100, "
            "cu126) or X.Y (10.0, 12.6), rocmX.Y (rocm7.2) or xpu"
        ) from e


def normalize_arch(text: str, platform: str) -> str:
    try:
        return axes.normalize_arch(text, platform)
    except axes.AxisError as e:
        raise SpellingError(str(e)) from e


def cuda_version(cuda: str) -> str:
    """`cu100` -> `10.0`, `cu126` -> `12.6`, `cu80` -> `8.0`, `cpu` (and ROCm, XPU) -> ``."""
    if axes.family(cuda) != "cuda":
        return ""
    digits = cuda[2:]
    return f"{int(digits[:-1])}.{digits[-1]}"


def normalize_python(text: str) -> str:
    """Validate a Python spelling with its ABI suffix: `2.7mu`, `3.6m`, `3.11`, `3.13t`."""
    s = str(text).strip()
    if not _PYTHON_RE.match(s):
        raise SpellingError(
            f"'{text}' is not a Python version: write X.Y with an optional ABI suffix "
            "(3.11, 3.6m, 2.7mu, 3.14t)"
        )
    try:
        axes.check_free_threaded(s)
    except axes.AxisError as e:
        raise SpellingError(str(e)) from e
    return s


def python_number(python: str) -> str:
    """`3.6m` -> `3.6`."""
    m = _PYTHON_RE.match(python)
    assert m, python
    return f"{m.group(1)}.{m.group(2)}"


def nightly_version(base: str, date: dt.date, version_from: str = "env") -> str:
    """The version tonight's packages carry: <base>.dev<YYYYMMDD>, or base itself for a
    project that keeps its own version ([project] version_from = "keep")."""
    if version_from == "keep":
        return base
    return f"{base}.dev{date:%Y%m%d}"


@dataclass(frozen=True, kw_only=True, order=True)
class Build:
    """One package build. Ordered for deterministic plans."""

    package: str
    python: str  # for libtorch: the interpreter the build uses (not part of the id)
    cuda: str
    variant: str = ""  # libtorch only
    platform: str = "linux"
    devtoolset: str = ""
    # The target architecture; "" is the platform's default (x86_64 on Linux, arm64 on
    # macOS), which ids leave out. Expansion writes "" for the default, so equal builds
    # compare equal.
    arch: str = ""
    # A limited-API build (nightly.core.limited): its wheel's floor (`cp310`) and the Pythons
    # the one wheel is tested on, lowest (its own) first; "" and () for any other build.
    limited_api: str = ""
    tests_on: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        middle = self.variant if self.package == "libtorch" else self.python
        ident = f"{self.package}_{middle}_{self.cuda}"
        if self.arch and self.arch != axes.default_arch(self.platform):
            ident += f"_{self.arch}"  # manywheel_3.12_cpu_aarch64
        # conda and libtorch exist on both platforms; the macOS ones carry a suffix so every
        # identifier in a plan is unique (a macOS wheel needs none); every Windows build does.
        if self.platform == "macos" and self.package != "wheel":
            ident += "_macos"
        elif self.platform == "windows":
            ident += "_windows"  # wheel_3.12_cu126_windows, libtorch_..._cpu_windows
        return ident

    @property
    def target_arch(self) -> str:
        """The architecture, the platform's default spelt out."""
        return self.arch or axes.default_arch(self.platform)

    @property
    def accelerator(self) -> str:
        """The CUDA slot under its 2026 name: cpu, cuXYZ, rocmX.Y or xpu."""
        return self.cuda

    @property
    def family(self) -> str:
        """cpu, cuda, rocm or xpu."""
        return axes.family(self.cuda)

    @property
    def is_cuda(self) -> bool:
        """A CUDA build (its tests want an NVIDIA GPU); not ROCm or XPU."""
        return self.family == "cuda"

    @property
    def local_suffix(self) -> str:
        """`+cu130`, `+rocm7.2`, `+xpu`; "" for cpu."""
        return axes.local_suffix(self.cuda)

    @property
    def label(self) -> str:
        """PyTorch's name for it (`manywheel-py3_14t-rocm7_2`, `wheel-py3_10-cpu-aarch64`)."""
        return axes.pytorch_label(package=self.package, python=self.python,
                                  accelerator=self.cuda, variant=self.variant,
                                  platform=self.platform, arch=self.target_arch)

    @property
    def python_abi(self) -> str:
        """cp314t for 3.14t ("" for libtorch's "3": any interpreter)."""
        return axes.python_abi(self.python) if _PYTHON_RE.match(self.python) else ""

    @property
    def cuda_version(self) -> str:
        return cuda_version(self.cuda)

    @property
    def variants(self) -> tuple[str, ...]:
        """The libtorch variants this build produces."""
        if self.package != "libtorch":
            return ()
        return LIBTORCH_VARIANTS if self.variant == LIBTORCH_ALL else (self.variant,)


@dataclass(frozen=True, kw_only=True)
class PackageMatrix:
    """One package type's axes on one platform, as configured."""

    package: str
    platform: str
    pythons: tuple[str, ...]
    cudas: tuple[str, ...]
    variants: tuple[str, ...] = ()  # libtorch
    python: str = ""  # libtorch's build interpreter
    devtoolset: str = ""
    manylinux: str = ""  # manywheel: the declared policy ("2_28", "off", "": none)
    toolchain: str = ""  # manywheel: the policy's C/C++ toolchain ("sysroot", "zig"; "": sysroot)
    archs: tuple[str, ...] = ()  # target architectures ("": the platform's default only)

    def expand(self) -> list[Build]:
        default = axes.default_arch(self.platform)
        archs = [("" if a == default else a) for a in self.archs] or [""]
        if self.package == "libtorch":
            return [
                Build(
                    package="libtorch",
                    python=self.python,
                    cuda=cuda,
                    variant=variant,
                    platform=self.platform,
                    devtoolset=self.devtoolset,
                    arch=arch,
                )
                for arch in archs
                for cuda in self.cudas
                for variant in self.variants
            ]
        return [
            Build(
                package=self.package,
                python=python,
                cuda=cuda,
                platform=self.platform,
                devtoolset=self.devtoolset,
                arch=arch,
            )
            for arch in archs
            for python in self.pythons
            for cuda in self.cudas
        ]


def expand(matrices: Iterable[PackageMatrix]) -> list[Build]:
    """All builds of the matrix, in configuration order, without duplicates."""
    seen: dict[str, Build] = {}
    for m in matrices:
        for b in m.expand():
            seen.setdefault(b.id, b)
    return list(seen.values())


def near_misses(pattern: str, ids: Iterable[str], n: int = 5) -> list[str]:
    """Identifiers close to a selector that matched nothing."""
    ids = list(ids)
    # Compare the pattern with its wildcards dropped, and also try each id's prefix so a
    # glob like `manywheel_3.8*` still suggests `manywheel_3.8m_cpu`.
    plain = pattern.replace("*", "").replace("?", "")
    close = difflib.get_close_matches(plain, ids, n=n, cutoff=0.6)
    if len(close) < n:
        for cand in difflib.get_close_matches(pattern, ids, n=n, cutoff=0.5):
            if cand not in close:
                close.append(cand)
    return close[:n]


def matches(build: Build, pattern: str) -> bool:
    """A selector glob matches a build's id or its PyTorch label."""
    return fnmatch.fnmatchcase(build.id, pattern) or fnmatch.fnmatchcase(build.label, pattern)


def select(
    builds: Sequence[Build], include: Sequence[str], exclude: Sequence[str]
) -> tuple[list[Build], list[str]]:
    """Apply include-then-exclude globs (on ids or labels).

    Returns the builds and the patterns that matched nothing.
    """
    unmatched = [p for p in (*include, *exclude) if not any(matches(b, p) for b in builds)]
    chosen = [
        b
        for b in builds
        if any(matches(b, p) for p in include) and not any(matches(b, p) for p in exclude)
    ]
    return chosen, unmatched


def parse_spec(
    package: str,
    pythons: str,
    cudas: str,
    *,
    platform: str,
    libtorch_python: str = "",
    libtorch_variants: Sequence[str] = LIBTORCH_VARIANTS,
    arch: str = "",
) -> list[Build]:
    """`manywheel 3.6m,3.7m cpu,cu100` -> builds, as on the command line and in explicit queues.

    For libtorch the middle field names variants (`shared-with-deps,all`) or Python versions;
    with Python versions, the configured variants are built with that interpreter.
    """
    if package not in PACKAGES:
        hint = difflib.get_close_matches(package, PACKAGES, n=1)
        more = f"; did you mean '{hint[0]}'?" if hint else ""
        raise SpellingError(
            f"unknown package type '{package}': choose from {', '.join(PACKAGES)}{more}"
        )
    if platform not in PACKAGE_PLATFORMS[package]:
        if package == "wheel":
            raise SpellingError("wheel builds are macOS and Windows builds; on Linux build "
                                "manywheel")
        names = {"linux": "Linux", "macos": "macOS", "windows": "Windows"}
        where = " and ".join(names[p] for p in PACKAGE_PLATFORMS[package])
        raise SpellingError(f"{package} builds are {where} builds; on {names[platform]} build "
                            "wheel")
    cuda_list = [normalize_accelerator(c) for c in _split(cudas)]
    arch = "" if not arch else normalize_arch(arch, platform)
    arch = "" if arch == axes.default_arch(platform) else arch
    if package == "libtorch":
        items = _split(pythons)
        valid = (*LIBTORCH_VARIANTS, LIBTORCH_ALL)
        if all(i in valid for i in items):
            variants, py = items, libtorch_python
        elif any(i in valid for i in items):
            raise SpellingError(f"'{pythons}' mixes libtorch variants and Python versions")
        elif len(items) == 1:
            variants, py = list(libtorch_variants), normalize_python(items[0])
        else:
            raise SpellingError(
                f"'{pythons}': libtorch takes variants ({', '.join(valid)}) or one Python version"
            )
        return [
            Build(package=package, python=py, cuda=c, variant=v, platform=platform, arch=arch)
            for c in cuda_list
            for v in variants
        ]
    py_list = [normalize_python(p) for p in _split(pythons)]
    return [
        Build(package=package, python=p, cuda=c, platform=platform, arch=arch)
        for p in py_list
        for c in cuda_list
    ]


def _split(text: str) -> list[str]:
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise SpellingError(f"'{text}' is an empty list")
    return items
