"""Regenerate tests/data/pytorch-2026-matrix.json, the reference list that
tests/unit/test_pytorch_2026.py compares configs/pytorch-2026.toml with, by running PyTorch's
own matrix generator (pytorch/test-infra's tools/scripts/generate_binary_build_matrix.py)
as it is:

    python3 scripts/pytorch_matrix.py /path/to/test-infra/tools/scripts/generate_binary_build_matrix.py \
        > tests/data/pytorch-2026-matrix.json

It runs the generator for Linux x86_64, Linux aarch64, macOS arm64 and Windows x86_64, wheels
and libtorch
(the nightly channel, every accelerator, `--build-python-only disable`) and keeps, per
build, what nightly's config must reproduce: the build's name, its Python (as the generator
writes it: macOS pins point versions), accelerator (desired_cuda), architecture, libtorch
variant, package type, container image and, for a libtorch build, the zip its install line
names (`libtorch-win-shared-with-deps-latest.zip` on Windows). Standard library only.
"""

from __future__ import annotations

import json
import subprocess
import sys

# (generator --operating-system, nightly platform, architecture)
SYSTEMS = (("linux", "linux", "x86_64"), ("linux-aarch64", "linux", "aarch64"),
           ("macos-arm64", "macos", "arm64"), ("windows", "windows", "x86_64"))
PACKAGES = ("wheel", "libtorch")


def run(generator: str, system: str, package: str) -> list[dict[str, str]]:
    out = subprocess.run(
        [sys.executable, generator, "--operating-system", system, "--package-type", package,
         "--build-python-only", "disable"],
        check=True, capture_output=True, text=True, timeout=120,
    ).stdout
    return list(json.loads(out)["include"])


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    rows = []
    for system, platform, arch in SYSTEMS:
        for package in PACKAGES:
            for e in run(argv[1], system, package):
                rows.append({
                    "os": system,
                    "platform": platform,
                    "arch": arch,
                    "package_type": e["package_type"],
                    "name": e["build_name"],
                    "python": e.get("python_version", ""),
                    "desired_cuda": e["desired_cuda"],
                    "gpu_arch_type": e["gpu_arch_type"],
                    "libtorch_variant": e.get("libtorch_variant", ""),
                    "image": e.get("container_image", ""),
                    "zip": (e.get("installation", "").rsplit("/", 1)[-1]
                            if e["package_type"] == "libtorch" else ""),
                })
    json.dump({"generator": "generate_binary_build_matrix.py --build-python-only disable",
               "builds": rows}, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
