"""The demo's ROCm manywheel, for real: built by the manywheel recipe in the `rocm5.7` image of
configs/demo-beyond-cuda.toml (Debian trixie's hipcc and HIP runtime), its extension holding
AMD GPU code objects for each declared target, manylinux-tagged under the `2_28` policy with
the HIP runtime left to the machine (not bundled), and smoke-tested in the builder's runtime
image, which has the HIP runtime and no GPU: it imports, and the device query answers "no
device" cleanly.

The recipe runs in the image as the container executor runs it (recipes and source mounted
read-only, the recipe environment with DESIRED_CUDA=rocm5.7), because the matrix gains its
accelerator axis separately; once a build can say `rocm5.7`, `nightly run` does the same.
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
from pathlib import Path

import pytest

from nightly.config import load
from nightly.executors.container_engine import CA_ENV, CA_MOUNT, host_ca_bundle
from nightly.images import runtime
from nightly.manylinux import check_packages
from tests.support.cli import run_nightly
from tests.support.engine import Engine

pytestmark = [pytest.mark.engine, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "demo-beyond-cuda.toml"
VERSION = "0.1.0.dev20260109"
BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"


def offload_targets(so: bytes) -> list[str]:
    """The targets of the clang offload bundle in an ELF's .hip_fatbin section."""
    from elftools.elf.elffile import ELFFile

    section = ELFFile(io.BytesIO(so)).get_section_by_name(".hip_fatbin")
    assert section is not None, "no .hip_fatbin section"
    data = section.data()
    start = data.find(BUNDLE_MAGIC)
    assert start >= 0, "the section holds no clang offload bundle"
    pos = start + len(BUNDLE_MAGIC)
    (count,) = struct.unpack_from("<Q", data, pos)
    pos += 8
    targets = []
    for _ in range(count):
        _offset, size, length = struct.unpack_from("<QQQ", data, pos)
        pos += 24
        targets.append(data[pos:pos + length].decode())
        pos += length
        assert size > 0 or targets[-1].startswith("host-"), targets[-1]
    return targets


def _run(engine: Engine, image: str, script: str, volumes: dict[str, dict[str, str]], *,
         network: bool = False) -> str:
    container = engine.client.containers.run(image, ["bash", "-c", script], detach=True,
                                             volumes=volumes, network_disabled=not network)
    try:
        status = container.wait(timeout=1200)["StatusCode"]
        output = container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)
    assert status == 0, output[-6000:]
    return output


def test_the_demos_rocm_wheel_holds_amd_code_objects_and_runs_without_a_gpu(
    engine: Engine, tmp_path: Path
) -> None:
    env = engine.env()
    code, _, err = run_nightly(["images", "build", "--config", str(CONFIG), "--cuda", "rocm5.7"],
                               env=env, timeout=3600)
    assert code == 0, err[-4000:]
    spec = load(CONFIG).builders["rocm"]
    out = tmp_path / "out"
    out.mkdir()
    recipe_env = {
        "PACKAGE_TYPE": "manywheel", "DESIRED_PYTHON": "3.13", "DESIRED_CUDA": "rocm5.7",
        "BUILD_VERSION": VERSION, "PACKAGE_VERSION": f"{VERSION}+rocm5.7", "BUILD_NUMBER": "1",
        "SOURCE_DIR": "/source", "OUTPUT_DIR": "/out", "NIGHTLY_MANYLINUX": "2_28",
    }
    # As the container executor does: the host's CA bundle, so pip trusts what the host does.
    ca = host_ca_bundle()
    assert ca is not None
    recipe_env |= {var: CA_MOUNT for var in CA_ENV}
    exports = " ".join(f"{k}={v}" for k, v in recipe_env.items())
    log = _run(engine, spec.tag_for("rocm5.7"), f"export {exports}; bash /recipes/manywheel/build.sh",
               {str(REPO / "recipes"): {"bind": "/recipes", "mode": "ro"},
                str(REPO / "examples" / "demo"): {"bind": "/source", "mode": "ro"},
                str(out): {"bind": "/out", "mode": "rw"}, ca: {"bind": CA_MOUNT, "mode": "ro"}},
               network=True)  # pip's isolated build fetches setuptools, as in a night
    assert "--offload-arch=gfx90a --offload-arch=gfx1100" in log
    assert "--exclude libamdhip64.so.5" in log
    (wheel,) = out.glob("*.whl")
    assert wheel.name.startswith(f"nightlydemo-{VERSION}+rocm5.7-cp313-cp313-manylinux")
    verdict = check_packages("manywheel", "2_28", [wheel])
    assert verdict.reason is None, verdict.reason
    assert tuple(int(x) for x in verdict.record["glibc"].split(".")) <= (2, 28)
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (so_name,) = [n for n in names if n.startswith("nightlydemo/_native")]
        so = zf.read(so_name)
    assert not [n for n in names if "libamdhip64" in n]  # the machine's, not bundled
    targets = offload_targets(so)
    assert {"hipv4-amdgcn-amd-amdhsa--gfx90a", "hipv4-amdgcn-amd-amdhsa--gfx1100"} <= set(
        targets), targets

    # Installed in the runtime image (the HIP runtime, no compiler, no GPU): it imports, and
    # the device query says there is no device, cleanly.
    script = ("set -e; /opt/python/cp313-cp313/bin/python -m venv /tmp/v; "
              "/tmp/v/bin/python -m pip install -q --no-index --disable-pip-version-check "
              f"/wheels/{wheel.name}; cd /tmp; /tmp/v/bin/python -c 'import json, nightlydemo; "
              "print(json.dumps([nightlydemo.hip_version(), nightlydemo.hip_device_query(), "
              "nightlydemo.add(2, 3)]))'; command -v hipcc gcc || echo no-compiler")
    output = _run(engine, runtime.tag(spec), script,
                  {str(out): {"bind": "/wheels", "mode": "ro"}})
    lines = output.strip().splitlines()
    print(f"{wheel.name}: {verdict.record}; offload targets {targets}; in the runtime image: "
          f"{lines[-2]}")
    version, (count, why), added = json.loads(lines[-2])
    assert (version, count, added) == ("5.7", 0, 5), lines
    assert "100" in why or "no" in why.lower(), why
    assert lines[-1] == "no-compiler"
