"""configs/demo-beyond-cuda.toml end to end, for real: `nightly images build` then `nightly run`
on this x86_64 machine, into a mirror of its own (a copy of the config with its root, source
and mirror in tmp).

One night on one machine builds both (the machine's `executors = { aarch64 = "local" }`):
- the demo's `+rocm5.7` manywheel in the ROCm builder image (Debian trixie's hipcc), by the
  container executor: its extension holds AMD GPU code objects for each declared target, it is
  manylinux-tagged under the `2_28` policy with the HIP runtime left to the machine, the
  night's smoke test passes in the runtime image, and there, without a GPU, the device query
  answers "no device" cleanly; and the libtorch-style zip of its C++ library with the HIP
  kernel (CMake, same image): code objects in libdemo.so, the HIP runtime not bundled;
- the demo's aarch64 manywheels (Pythons 3.11 and 3.13, cpu), cross-built on the host
  (nightly/images/cross.py): `auditwheel show` says manylinux_2_28_aarch64 or better, the
  night's smoke test ran them under qemu-user, and the target's Python under qemu imports
  each from the mirror and uses its aarch64 extension.
The index has whl/nightly/rocm5.7/ beside cpu/ (PyTorch's layout), and pip finds each wheel
there for its platform. (The ROCm images are cached under ~/.cache/nightly and in the engine:
warm, `images build` keeps them.)
"""

from __future__ import annotations

import io
import json
import re
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from nightly.config import load
from nightly.core.manylinux import check_packages
from nightly.images import cross, runtime
from nightly.images.engine import default_cache
from tests.integration import corpus
from tests.integration import recipe_env as renv
from tests.support.cli import run_nightly
from tests.support.engine import Engine

pytestmark = [pytest.mark.engine, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "demo-beyond-cuda.toml"
DATE = "2026_01_09"
VERSION = "0.1.0.dev20260109"
BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
LIBTORCH_ROCM = "libtorch_shared-with-deps_rocm5.7"
TARGETS = {"hipv4-amdgcn-amd-amdhsa--gfx90a", "hipv4-amdgcn-amd-amdhsa--gfx1100"}


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


def _check_rocm_zip(day: Path, repository: str) -> None:
    """The libtorch-style zip of the ROCm build: libdemo.so holds code objects for each
    target, needs the HIP runtime and does not bundle it (nor what the runtime loads); the
    night's smoke program linked and ran in the ROCm image."""
    (zipped,) = sorted((day / "packages").rglob("libtorch-shared-with-deps-*.zip"))
    assert zipped.name == f"libtorch-shared-with-deps-{VERSION}+rocm5.7.zip"
    with zipfile.ZipFile(zipped) as zf:
        names = zf.namelist()
        (lib,) = [n for n in names if re.fullmatch(r"libtorch/lib/libdemo\.so\.\d+\.\d+\.\d+", n)]
        so = zf.read(lib)
    assert set(offload_targets(so)) >= TARGETS
    assert not [n for n in names if re.search(r"lib(amdhip64|hsa-runtime64|drm|numa)", n)], names
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    needed = [getattr(t, "needed", "") for s in ELFFile(io.BytesIO(so)).iter_sections()
              if isinstance(s, DynamicSection) for t in s.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
    assert "libamdhip64.so.5" in needed, needed
    log = (day / "logs" / "succeeded" / f"{LIBTORCH_ROCM}.log").read_text()
    assert f"smoke: in image {repository}:rocm5.7-" in log
    assert f"libdemo {VERSION}+rocm5.7" in log


def _config_copy(tmp: Path) -> Path:
    """The demo's config with its root, source (read-only copy) and mirror under tmp."""
    text = CONFIG.read_text()
    source = renv.readonly_copy_of_demo(tmp / "src")
    for key, value in (("root", tmp / "nightlies"), ("source", source),
                       ("url", tmp / "mirror")):
        text, n = re.subn(rf'^{key} = ".*"$', f'{key} = "{value}"', text, count=1, flags=re.M)
        assert n == 1, key
    path = tmp / "beyond.toml"
    path.write_text(text)
    return path


def _pip_download(index: Path, dest: Path, python: str, *platforms: str) -> list[Path]:
    """What pip picks from an index folder for this Python and these platforms."""
    args = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--pre",
            "--only-binary=:all:", "--python-version", python, "--index-url",
            index.as_uri(), "-d", str(dest), "nightlydemo"]
    for p in platforms:
        args += ["--platform", p]
    ran = subprocess.run(args, capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin", "PIP_CONFIG_FILE": "/dev/null",
                              "HOME": str(dest)}, check=False)
    assert ran.returncode == 0, ran.stderr[-2000:]
    return sorted(dest.glob(f"*cp{python.replace('.', '')}*.whl"))


def _runtime_check(eng: Engine, image: str, wheels: Path, name: str) -> list[str]:
    """The ROCm wheel installed in the runtime image (the HIP runtime, no compiler, no GPU)."""
    script = ("set -e; /opt/python/cp313-cp313/bin/python -m venv /tmp/v; "
              "/tmp/v/bin/python -m pip install -q --no-index --disable-pip-version-check "
              f"/wheels/{name}; cd /tmp; /tmp/v/bin/python -c 'import json, nightlydemo; "
              "print(json.dumps([nightlydemo.hip_version(), nightlydemo.hip_device_query(), "
              "nightlydemo.add(2, 3)]))'; command -v hipcc gcc || echo no-compiler")
    container = eng.client.containers.run(
        image, ["bash", "-c", script], detach=True, network_disabled=True,
        volumes={str(wheels): {"bind": "/wheels", "mode": "ro"}})
    try:
        status = container.wait(timeout=1200)["StatusCode"]
        output = container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)
    assert status == 0, output[-6000:]
    return output.strip().splitlines()


def test_one_night_builds_the_rocm_and_aarch64_wheels_into_its_mirror(
    engine: Engine, tmp_path: Path
) -> None:
    config = _config_copy(tmp_path)
    env = engine.env()
    started = time.monotonic()
    code, _, err = run_nightly(["images", "build", "--config", str(config)], env=env,
                               timeout=3600)
    assert code == 0, err[-4000:]
    images_s = time.monotonic() - started
    code, listed, err = run_nightly(["images", "list", "--config", str(config)], env=env)
    assert code == 0, err
    assert "nightly-rocm:rocm5.7-" in listed
    # The aarch64 builds need no image; the ROCm libtorch zip is built in the same one.
    assert "    builds: manywheel_3.13_rocm5.7, libtorch_shared-with-deps_rocm5.7\n" in listed
    assert "    tests: manywheel_3.13_rocm5.7\n" in listed  # the runtime image
    code, out, err = run_nightly(["run", "--config", str(config), "--date", DATE], env=env,
                                 timeout=3600)
    night_s = time.monotonic() - started - images_s
    print(f"images build {images_s:.0f} s, nightly run {night_s:.0f} s")
    assert code == 0, (out[-3000:], err[-4000:])
    cfg = load(config)
    day = cfg.root / DATE
    state = json.loads((day / "state.json").read_text())["builds"]
    assert {b: e["status"] for b, e in state.items()} == {
        "manywheel_3.13_rocm5.7": "succeeded", "manywheel_3.11_cpu_aarch64": "succeeded",
        "manywheel_3.13_cpu_aarch64": "succeeded", LIBTORCH_ROCM: "succeeded"}
    # Each ran with its architecture's executor, and passed its smoke test.
    assert state["manywheel_3.13_rocm5.7"]["executor"] == "container"
    assert state["manywheel_3.11_cpu_aarch64"]["executor"] == "local"
    assert state[LIBTORCH_ROCM]["executor"] == "container"
    assert all(e["tested"]["result"] == "passed" for e in state.values())
    index = tmp_path / "mirror" / "whl" / "nightly"

    # ROCm: its own folder, beside cpu/.
    (rocm_wheel,) = _pip_download(index / "rocm5.7", tmp_path / "dl-rocm", "3.13",
                                  "manylinux_2_28_x86_64")
    assert rocm_wheel.name.startswith(f"nightlydemo-{VERSION}+rocm5.7-cp313-cp313-manylinux")
    verdict = check_packages("manywheel", "2_28", [rocm_wheel])
    assert verdict.reason is None, verdict.reason
    with zipfile.ZipFile(rocm_wheel) as zf:
        names = zf.namelist()
        (so_name,) = [n for n in names if n.startswith("nightlydemo/_native")]
        so = zf.read(so_name)
    assert not [n for n in names if "libamdhip64" in n]  # the machine's, not bundled
    targets = offload_targets(so)
    assert set(targets) >= TARGETS, targets
    rocm_log = (day / "logs" / "succeeded" / "manywheel_3.13_rocm5.7.log").read_text()
    assert f"in image {runtime.tag(cfg.builders['rocm'])}" in rocm_log  # the night's smoke test
    lines = _runtime_check(engine, runtime.tag(cfg.builders["rocm"]), rocm_wheel.parent,
                           rocm_wheel.name)
    print(f"{rocm_wheel.name}: offload targets {targets}; in the runtime image: {lines[-2]}")
    version, (count, why), added = json.loads(lines[-2])
    assert (version, count, added) == ("5.7", 0, 5), lines
    assert "100" in why or "no" in why.lower(), why
    assert lines[-1] == "no-compiler"
    _check_rocm_zip(day, cfg.builders["rocm"].repository)
    # Under the config's glibc policy for libtorch, as the manywheels are.
    record = state[LIBTORCH_ROCM]["manylinux"]
    assert record["policy"] == "2_28"
    assert tuple(int(x) for x in record["glibc"].split(".")) <= (2, 28), record

    # aarch64: in the cpu folder; pip takes them for aarch64 (which cannot be installed here).
    for python in ("3.11", "3.13"):
        nodot = python.replace(".", "")
        (wheel,) = _pip_download(index / "cpu", tmp_path / f"dl-{nodot}", python,
                                 "manylinux_2_28_aarch64", "manylinux_2_17_aarch64")
        assert f"-cp{nodot}-cp{nodot}-" in wheel.name
        assert "x86_64" not in wheel.name
        tag = re.match(r"manylinux_(\d+)_(\d+)_aarch64$", corpus.auditwheel_verdict(wheel))
        assert tag is not None, wheel.name
        assert (int(tag.group(1)), int(tag.group(2))) <= (2, 28), wheel.name
        log = (day / "logs" / "succeeded" / f"manywheel_{python}_cpu_aarch64.log").read_text()
        assert "smoke: the aarch64 wheel under emulation: qemu-aarch64" in log
        code_ = ("import platform, nightlydemo; print(platform.machine(), nightlydemo.add(2, 3),"
                 " nightlydemo.vector_sum([1.5, 2]), nightlydemo.built_with_cuda())")
        t0 = time.monotonic()
        ran = cross.run_against([wheel], default_cache(), "aarch64", python, ["-c", code_],
                                tmp_path / f"qemu-{nodot}")
        print(f"Python {python} under qemu-aarch64: {time.monotonic() - t0:.1f} s")
        assert ran.returncode == 0, ran.stderr[-3000:]
        assert ran.stdout.split() == ["aarch64", "5", "3.5", "False"], ran.stdout
        so_path = next((tmp_path / f"qemu-{nodot}" / "site" / "nightlydemo").glob("_native*.so"))
        assert so_path.name.endswith(f"-{nodot}-aarch64-linux-gnu.so"), so_path.name
        header = subprocess.run(["readelf", "-h", str(so_path)], capture_output=True, text=True,
                                check=True).stdout
        assert "AArch64" in header

    # The report and status name each build's architecture and accelerator.
    report = (day / "report.html").read_text()
    assert 'data-axes="aarch64 · cpu"' in report
    assert 'data-axes="x86_64 · rocm5.7"' in report
    code, status, err = run_nightly(["status", "--config", str(config), "--date", DATE],
                                    env={**env, "COLUMNS": "250"})  # no cell folded
    assert code == 0, err
    assert "aarch64 · cpu" in status
    assert "x86_64 · rocm5.7" in status
