"""What Debian's suites give a builder image: each suite's glibc, Pythons and gcc, and the
CUDA and ROCm toolchains Debian packages. Facts checked on these machines (2026-11); sid
moves, so its entries say what it held then. Pure data: spec (and through it config) reads it.
"""

from __future__ import annotations

# glibc of each Debian suite: the newest manylinux tag a wheel built on it can carry.
# sid moves: its glibc and python3 are as of 2026-11 (its binary python3.14 is why a builder
# uses it: the toolchain, not the suite, decides a wheel's glibc).
SUITE_GLIBC = {"bullseye": "2.31", "bookworm": "2.36", "trixie": "2.41", "sid": "2.43"}

# The python3 of each suite (a `distro` interpreter must be this one).
SUITE_PYTHON = {"bullseye": "3.9", "bookworm": "3.11", "trixie": "3.13", "sid": "3.14"}
# Other Pythons a suite packages (pythonX.Y, -dev, -venv), installed when declared `distro`.
SUITE_OTHER_PYTHONS = {"sid": ("3.13", "3.15")}  # sid: 3.15.2 since 2026-11
# The suite's default gcc, and the newest gcc each CUDA major's nvcc accepts as its host
# compiler: a newer suite gcc needs a declared g++-N (gcc 16 on sid: g++-14 for CUDA 13).
SUITE_GCC = {"bullseye": 10, "bookworm": 12, "trixie": 14, "sid": 16}
CUDA_MAX_GCC = {"11": 11, "12": 13, "13": 15}
# ROCm (HIP) toolchains Debian packages: the release, its suite, the builder's packages and
# the runtime's (docs/images.md, "ROCm"). `rocms = ["5.7"]` gives a `rocm5.7` image.
DEBIAN_ROCM = {"5.7": "trixie"}
ROCM_DEBS = {"5.7": ("hipcc", "libamdhip64-dev", "rocm-device-libs-17")}
ROCM_RUNTIME_DEBS = {"5.7": ("libamdhip64-5",)}
ROCM_TARGETS = ("gfx90a", "gfx1100")  # the default --offload-arch list

# CUDA releases these machines can assemble a toolkit for (see docs/images.md): 13.x from
# PyPI alone; 11.8 and 12.4 from PyPI plus Debian non-free's nvcc of the same release.
DEBIAN_NVCC = {"11.8": "bookworm", "12.4": "trixie"}
