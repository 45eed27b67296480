"""The ROCm (HIP) image of a builder: Debian's HIP toolchain, checked by a self-test.

Debian packages AMD's HIP compiler and runtime (trixie: `hipcc`, `libamdhip64-dev` 5.7.1,
`rocm-device-libs-17`), so a builder that declares `rocms = ["5.7"]` gets them in its base
layer (debootstrap's --include: no apt inside an image build, no registry), and a
`<repository>:rocm5.7-<hash>` image on its cpu layer with the environment HIP builds read
and a self-test: a kernel compiled for every declared GPU target into a shared library that
must hold AMD GPU code objects (`.hip_fatbin`), and a program asking the runtime for devices,
which must answer "no device" cleanly on a machine without a GPU.

The HIP runtime (libamdhip64.so.N, linked against the suite's glibc 2.41 and its libstdc++)
cannot meet a manylinux policy, so ROCm wheels do not bundle it: the manywheel recipe repairs
them with `--exclude libamdhip64.so.N`, and the runtime is the machine's (as libcuda is for
CUDA wheels); the builder's runtime image has it (`ROCM_RUNTIME_DEBS`). docs/images.md, "ROCm".
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from nightly.core.spec import BuilderSpec

if TYPE_CHECKING:
    from docker import DockerClient

Log = Callable[[str], None]

LABEL_ROCM = "org.nightly.rocm"

SELFTEST = r"""set -e
cd "$(mktemp -d)"
cat > k.hip <<'EOF'
#include <hip/hip_runtime.h>
#include <stdio.h>
__global__ void add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + b[i]; }
extern "C" int device_count(void) { int n = 0; return hipGetDeviceCount(&n) == hipSuccess ? n : -1; }
EOF
cat > main.c <<'EOF'
#include <stdio.h>
int device_count(void);
int main(void) { printf("HIP devices: %d (-1: the runtime says none)\n", device_count()); return 0; }
EOF
hipcc --version
archs=""
for t in $PYTORCH_ROCM_ARCH_LIST; do archs="$archs --offload-arch=$t"; done
# shellcheck disable=SC2086
hipcc $archs -fPIC -shared -o libk.so k.hip
readelf -S --wide libk.so | grep -q '\.hip_fatbin' || { echo "no .hip_fatbin in libk.so" >&2; exit 1; }
cc main.c -o main -L. -lk -Wl,-rpath,"$PWD"
./main
echo "HIP self-test passed: code objects for $PYTORCH_ROCM_ARCH, runtime answers without a GPU"
"""


def image_env(spec: BuilderSpec, rocm: str) -> dict[str, str]:
    """What a HIP build reads in the image (PyTorch's names where it has them)."""
    return {
        # No ROCM_PATH: Debian's hipcc (under /usr) finds its device libraries itself, and
        # ROCM_PATH=/usr sends clang to look for them where they are not.
        "HIP_PLATFORM": "amd",
        "ROCM_VERSION": rocm,
        "PYTORCH_ROCM_ARCH": ";".join(spec.rocm_targets),
        "PYTORCH_ROCM_ARCH_LIST": " ".join(spec.rocm_targets),
    }


def dockerfile(parent: str, spec: BuilderSpec, rocm: str, labels: dict[str, str]) -> str:
    env = image_env(spec, rocm)
    return "\n".join([
        f"FROM {parent}",
        "ENV " + " ".join(f"{k}={json.dumps(v)}" for k, v in sorted(env.items())),
        "COPY selftest.sh /tmp/hip-selftest.sh",
        # The compilers the policy's toolchain set (CC) link the test program; hipcc is clang.
        "RUN bash /tmp/hip-selftest.sh && rm -f /tmp/hip-selftest.sh",
        "LABEL " + " ".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items())),
    ]) + "\n"


def ensure(client: DockerClient, spec: BuilderSpec, accelerator: str, cache: Path,
           log: Log) -> str:
    """Build (or find) the `rocmX.Y` image of `spec` (`accelerator` is "rocm5.7")."""
    from nightly.images import engine

    tag = spec.tag_for(accelerator)
    if engine.inspect(client, tag) is not None:
        log(f"{tag}: present")
        return tag
    parent = engine.ensure_cpu(client, spec, cache, log)
    rocm = accelerator.removeprefix("rocm")
    labels = {
        engine.LABEL_SPEC: spec.name, engine.LABEL_HASH: spec.hash_for(accelerator),
        engine.LABEL_CUDA: accelerator, LABEL_ROCM: rocm,
        engine.LABEL_MANYLINUX: spec.manylinux_tag(), engine.LABEL_POLICY: spec.manylinux or "-",
        engine.LABEL_TOOLCHAIN: spec.toolchain_text() + "; device code: hipcc",
        engine.LABEL_PYTHONS: " ".join(f"{p.version}={p.describe_in(spec.suite)}"
                                       for p in spec.pythons),
    }
    logfile = engine.log_file(cache, tag)
    engine.write_header(logfile, tag, spec, [
        f"parent:   {parent}", f"ROCm:     {rocm} (Debian {spec.suite}'s HIP under /usr)",
        f"targets:  {', '.join(spec.rocm_targets)}"])

    def write(ctx: Path) -> None:
        with tarfile.open(ctx, "w") as tar:
            for name, text in (("Dockerfile", dockerfile(parent, spec, rocm, labels)),
                               ("selftest.sh", SELFTEST)):
                data = text.encode()
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(data), 0o755
                tar.addfile(info, io.BytesIO(data))

    return engine.build_from_context(
        client, cache / "tmp" / f"ctx-{spec.hash_for(accelerator)}.tar", tag, logfile, log, write)
