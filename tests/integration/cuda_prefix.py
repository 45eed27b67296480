"""A CUDA 13.x toolkit (nvcc, headers, cudart, nvvm) from NVIDIA's PyPI wheels, laid out like
an installed toolkit, for tests that need a second CUDA version beside the host's.

13.x is all on PyPI (`cuda-toolkit[nvcc,cudart,cccl,crt,nvvm]==13.N.*` pins the component
wheels); the wheels' `nvidia/cu13/` tree is copied into PREFIX and given the names a toolkit
has (lib64, targets/x86_64-linux/{include,lib}, unversioned linker names), then checked by
compiling a kernel. Built into a staging folder and renamed, so a killed run leaves no half
toolkit. A failed download is an error, never a skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def make_cuda_prefix(version: str, prefix: Path) -> Path:
    if (prefix / "bin" / "nvcc").exists():
        return prefix
    major = version.split(".")[0]
    prefix.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{prefix.name}.", dir=prefix.parent))
    try:
        wheels = stage / "wheels"
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile",
             "--disable-pip-version-check", "--target", str(wheels),
             f"cuda-toolkit[nvcc,cudart,cccl,crt,nvvm]=={version}.*"],
            check=True,
        )
        tree = stage / "prefix"
        shutil.copytree(wheels / "nvidia" / f"cu{major}", tree, symlinks=True)
        for marker in tree.rglob("__init__.py"):
            marker.unlink()
        lib = tree / "lib"
        for so in sorted(lib.glob("lib*.so.*")):
            link = lib / (so.name.split(".so.")[0] + ".so")
            if not link.exists():
                link.symlink_to(so.name)
        (tree / "lib64").symlink_to("lib")
        nvvm64 = tree / "nvvm" / "lib64"
        nvvm64.mkdir(parents=True, exist_ok=True)
        for so in sorted(lib.glob("libnvvm.so*")):
            if not (nvvm64 / so.name).exists():
                (nvvm64 / so.name).symlink_to(f"../../lib/{so.name}")
        target = tree / "targets" / "x86_64-linux"
        target.mkdir(parents=True)
        (target / "include").symlink_to("../../include")
        (target / "lib").symlink_to("../../lib")
        (tree / "bin" / "nvcc.profile").write_text(PROFILE)
        for tool in (tree / "bin").iterdir():
            if tool.is_file() and tool.name != "nvcc.profile":
                tool.chmod(0o755)
        check(tree, version)
        os.replace(tree, prefix)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return prefix


def check(tree: Path, version: str) -> None:
    out = subprocess.run([str(tree / "bin" / "nvcc"), "--version"], check=True,
                         capture_output=True, text=True).stdout
    if f"release {version}," not in out:
        raise RuntimeError(f"{tree}/bin/nvcc is not CUDA {version}:\n{out}")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "k.cu").write_text("__global__ void k(int *x) { x[0] = 1; }\n")
        subprocess.run([str(tree / "bin" / "nvcc"), "-c", "k.cu", "-o", "k.o"], cwd=tmp,
                       check=True)


# NVIDIA's standard nvcc.profile ('+=' prepends, so the toolkit's own tools win).
PROFILE = """
TOP              = $(_HERE_)/..

CICC_PATH        = $(TOP)/nvvm/bin
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice

LD_LIBRARY_PATH += $(TOP)/lib:
PATH            += $(CICC_PATH):$(_HERE_):

INCLUDES        +=  "-I$(TOP)/$(_TARGET_DIR_)/include" $(_SPACE_)
SYSTEM_INCLUDES +=  "-isystem" "$(TOP)/$(_TARGET_DIR_)/include/cccl" $(_SPACE_)

LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/$(_TARGET_DIR_)/lib$(_TARGET_SIZE_)/stubs" \
"-L$(TOP)/$(_TARGET_DIR_)/lib$(_TARGET_SIZE_)"

CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
"""
