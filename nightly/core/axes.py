"""The matrix's axes beside package and Python: architectures, accelerator families, Python
ABIs, and PyTorch's build names. Pure spellings: no I/O, no configuration.

- An architecture belongs to a platform; each platform has a default (`x86_64` on Linux,
  `arm64` on macOS) that build ids leave out, so 2019's ids (`manywheel_3.6m_cu90`) stay.
- An accelerator fills the old CUDA slot: `cpu`, `cuXYZ`, `rocmX.Y` or `xpu`. Its family
  (cpu, cuda, rocm, xpu) decides the recipe environment (ACCELERATOR), the local version
  suffix (`+cu130`, `+rocm7.2`, `+xpu`) and the `{accelerator}` image tag (`cuda13.0`).
- A Python spelling with a `t` is free-threaded (3.13 and newer): ABI `cp314t`, interpreter
  `/opt/python/cp314-cp314t/bin/python` in the manylinux layout.
"""

from __future__ import annotations

import re

from packaging.version import Version

# Platform -> the architectures nightly can build for it; the first is the default.
ARCHS = {"linux": ("x86_64", "aarch64"), "macos": ("arm64", "x86_64"), "windows": ("x86_64",)}
_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64"}

FAMILIES = ("cpu", "cuda", "rocm", "xpu")
_ROCM_RE = re.compile(r"^rocm([0-9]{1,2})\.([0-9]{1,2})$")
_CUDA_RE = re.compile(r"^cu([0-9]{2,4})$")
# Free-threaded CPython exists from 3.13 (PEP 703).
FREE_THREADED_SINCE = Version("3.13")


class AxisError(ValueError):
    """A malformed architecture or accelerator spelling (matrix.SpellingError derives)."""


def default_arch(platform: str) -> str:
    return ARCHS.get(platform, ("x86_64",))[0]


def normalize_arch(text: str, platform: str) -> str:
    """`x86_64`, `amd64`, `aarch64`, `arm64` -> the platform's own spelling (aarch64 on Linux,
    arm64 on macOS)."""
    s = str(text).strip().lower()
    s = _ARCH_ALIASES.get(s, s)
    if platform == "macos" and s == "aarch64":
        s = "arm64"
    known = ARCHS.get(platform, ())
    if s not in known:
        raise AxisError(f"'{text}' is not a {platform} architecture: write "
                        + " or ".join(known))
    return s


def family(accelerator: str) -> str:
    """`cu126` -> cuda, `rocm7.2` -> rocm, `xpu`, `cpu`."""
    if accelerator.startswith("rocm"):
        return "rocm"
    if _CUDA_RE.match(accelerator) or re.fullmatch(r"\d+(\.\d+)+", accelerator):
        return "cuda"  # cu126, or a bare CUDA version ("11.8") not yet spelt as an id
    return accelerator


def normalize_other(text: str) -> str | None:
    """`xpu`, `rocm7.2`, `ROCm 7.2` -> themselves; None when it is not a ROCm/XPU spelling."""
    s = str(text).strip().lower().replace(" ", "")
    if s == "xpu":
        return s
    if s.startswith("rocm"):
        m = _ROCM_RE.match(s)
        if not m:
            raise AxisError(f"'{text}' is not a ROCm version: write rocmX.Y (rocm7.2)")
        return f"rocm{int(m.group(1))}.{int(m.group(2))}"
    return None


def rocm_version(accelerator: str) -> str:
    return accelerator[4:] if family(accelerator) == "rocm" else ""


def local_suffix(accelerator: str) -> str:
    """The local version part of an accelerator's packages: `+cu130`, `+rocm7.2`, `+xpu`;
    none for cpu (PyTorch's default index is cpu-less)."""
    return "" if accelerator == "cpu" else f"+{accelerator}"


def image_tag(accelerator: str) -> str:
    """The `{accelerator}` of image templates, as PyTorch tags its builder images:
    cpu, cuda12.6, rocm7.2, xpu."""
    m = _CUDA_RE.match(accelerator)
    if m:
        digits = m.group(1)
        return f"cuda{int(digits[:-1])}.{digits[-1]}"
    return accelerator


def accepts(declared: tuple[str, ...], accelerator: str) -> bool:
    """Whether a machine's accelerators (families or exact spellings) take this one."""
    return accelerator in declared or family(accelerator) in declared


# ---------------------------------------------------------------------------- Python ABIs


def python_parts(python: str) -> tuple[int, int, str]:
    """`3.14t` -> (3, 14, "t"); `3.6m` -> (3, 6, "m")."""
    m = re.match(r"^([0-9])\.([0-9]{1,2})([a-z]*)$", python)
    if not m:
        raise AxisError(f"'{python}' is not a Python version")
    return int(m.group(1)), int(m.group(2)), m.group(3)


def is_free_threaded(python: str) -> bool:
    return python.endswith("t") and python[:1].isdigit()


def check_free_threaded(python: str) -> None:
    major, minor, _ = python_parts(python)
    if is_free_threaded(python) and Version(f"{major}.{minor}") < FREE_THREADED_SINCE:
        raise AxisError(f"'{python}': free-threaded CPython exists from 3.13; write "
                        f"{major}.{minor} or 3.13t and newer")


def python_abi(python: str) -> str:
    """The CPython ABI tag: `3.14t` -> cp314t, `3.6m` -> cp36m, `3.12` -> cp312."""
    major, minor, suffix = python_parts(python)
    return f"cp{major}{minor}{suffix}"


def manylinux_interpreter(python: str) -> str:
    """Where the manylinux layout keeps the interpreter of an ABI:
    /opt/python/cp314-cp314t/bin/python."""
    major, minor, _ = python_parts(python)
    return f"/opt/python/cp{major}{minor}-{python_abi(python)}/bin/python"


# ---------------------------------------------------------------------------- PyTorch's names


def _arch_type(accelerator: str, platform: str, arch: str) -> str:
    """The generator's gpu_arch_type+gpu_arch_version: cpu, cuda12.6, rocm7.2, xpu; on Linux
    aarch64 cpu-aarch64 and cuda-aarch6412.6-aarch64."""
    fam = family(accelerator)
    version = image_tag(accelerator)[len("cuda"):] if fam == "cuda" else rocm_version(accelerator)
    if platform == "linux" and arch == "aarch64" and fam in ("cpu", "cuda"):
        return f"{fam}-aarch64" + (f"{version}-aarch64" if version else "")
    return fam + version


def pytorch_label(
    *, package: str, python: str, accelerator: str, variant: str, platform: str, arch: str
) -> str:
    """PyTorch's build name for this build, by test-infra's generate_binary_build_matrix.py
    rules: `manywheel-py3_14t-rocm7_2` (Linux x86_64 wheels), `wheel-py3_10-cpu-aarch64`
    (every other wheel), `libtorch-cuda13_0-shared-with-deps-cxx11-abi` (Windows:
    `libtorch-cuda13_0-shared-with-deps-release`, its build configuration)."""
    kind = _arch_type(accelerator, platform, arch)
    if package == "libtorch":
        tail = "release" if platform == "windows" else "cxx11-abi"
        return f"libtorch-{kind}-{variant}-{tail}".replace(".", "_")
    prefix = package
    if package in ("manywheel", "wheel"):
        prefix = "manywheel" if platform == "linux" and arch == "x86_64" else "wheel"
    return f"{prefix}-py{python}-{kind}".replace(".", "_")


def libtorch_zip(*, variant: str, platform: str, arch: str, version: str) -> str:
    """The libtorch zip as PyTorch names it (version `latest`: the alias its install lines
    name): `libtorch-shared-with-deps-V.zip` (Linux), `libtorch-win-shared-with-deps-V.zip`,
    `libtorch-macos-arm64-V.zip`."""
    if platform == "windows":
        return f"libtorch-win-{variant}-{version}.zip"
    if platform == "macos":
        return f"libtorch-macos-{arch}-{version}.zip"
    return f"libtorch-{variant}-{version}.zip"
