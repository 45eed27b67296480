"""Builder images for real: `nightly images build` on the Podman engine, then a subset of the
demo CUDA night (Python 3.12 x cpu, CUDA 11.8, CUDA 13.0) in those images with no host
mounts; each wheel is installed on the host and reports the CUDA runtime it was compiled
against.

Images are tagged with their spec's content hash and nightly caches what they are made of
(~/.cache/nightly/images, or NIGHTLY_IMAGES_CACHE), so on a machine that built them before
this takes a couple of minutes; cold (debootstrap, downloads, three images) about ten.
"""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from nightly.config import load
from nightly.images import engine as images_engine
from nightly.images import runtime
from tests.support.cli import nightly_cmd
from tests.support.day import find_day
from tests.support.engine import Engine

pytestmark = [pytest.mark.engine, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
DEMO_CUDA = REPO / "configs" / "demo-cuda.toml"
SUBSET = ["manywheel_3.12_cpu", "manywheel_3.12_cu118", "manywheel_3.12_cu130"]
EXPECTED_CUDART = {"cpu": None, "cu118": 11080, "cu130": 13000}


def nightly(*args: str, env: dict[str, str], timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*nightly_cmd(), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def demo_config(tmp: Path, *, extra_package: str = "") -> Path:
    """configs/demo-cuda.toml with absolute paths and its day folders under tmp."""
    text = DEMO_CUDA.read_text()
    for old, new in (('root = "../nightlies-demo-cuda"', f'root = "{tmp}/nightlies"'),
                     ('source = "../examples/demo"', f'source = "{REPO}/examples/demo"')):
        assert old in text
        text = text.replace(old, new)
    if extra_package:
        text = text.replace('packages = ["make",', f'packages = ["{extra_package}", "make",')
    path = tmp / "demo-cuda.toml"
    path.write_text(text)
    return path


def test_a_missing_image_is_a_clear_error_naming_the_build_command(
    engine: Engine, tmp_path: Path
) -> None:
    # Another package in the base is another spec hash: an image nobody built.
    config = demo_config(tmp_path, extra_package="less")
    env = engine.env()
    checked = nightly("images", "check", "--config", str(config), env=env, timeout=120)
    assert checked.returncode == 1, checked.stderr
    assert "5 image(s) missing" in checked.stderr  # 4 builder images and the runtime image
    assert f"nightly images build --config {config} --cuda cpu,cu118,cu124,cu130" in checked.stderr
    # The night refuses before building anything, with the same fix.
    run = nightly("run", "--config", str(config), "--no-upload", "--select", SUBSET[0],
                  env=env, timeout=300)
    assert run.returncode == 1, run.stderr
    assert "nightly images build --config" in run.stderr
    assert not list((tmp_path / "nightlies").glob("*/logs/*/*.log"))


def _host_python(config: Path) -> str:
    spec = load(config).builders["demo"]
    source = next(p for p in spec.pythons if p.version == "3.12")
    return f"{source.path}/bin/python3.12"


def _report(python: str, wheel: Path, where: Path) -> dict[str, object]:
    """Install the wheel into a fresh venv on the host; what the package says about CUDA."""
    venv = where / f"venv-{wheel.name[:40]}"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=300)
    vpy = venv / "bin" / "python"
    subprocess.run([str(vpy), "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(wheel)],
                   check=True, timeout=300)
    code = ("import json, nightlydemo as d; print(json.dumps({'runtime': d.cuda_runtime_version(),"
            " 'version': d.cuda_version(), 'cuda': d.built_with_cuda(),"
            " 'devices': d.cuda_device_count()}))")
    out = subprocess.run([str(vpy), "-c", code], cwd=where, capture_output=True, text=True,
                         timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


def test_images_build_then_the_cuda_night_in_them(engine: Engine, tmp_path: Path) -> None:
    config = demo_config(tmp_path)
    env = engine.env()
    built = nightly("images", "build", "--config", str(config), "--cuda", "cpu,11.8,13.0",
                    env=env, timeout=3600)
    assert built.returncode == 0, built.stderr[-4000:]
    spec = load(config).builders["demo"]
    tags = {c: spec.tag_for(c) for c in ("cpu", "cu118", "cu130")}
    tested_in = runtime.tag(spec)  # where the manywheels are smoke-tested
    assert built.stdout.split() == [tags["cpu"], tested_in, tags["cu118"], tags["cu130"]]

    listed = json.loads(nightly("images", "list", "--config", str(config), "--json",
                                env=env).stdout)
    rows = {r["tag"]: r for r in listed}
    for tag in tags.values():
        assert rows[tag]["present"], tag
        # The policy, and what the image's toolchain guarantees: its glibc 2.31 sysroot.
        assert rows[tag]["policy"] == "2_28"
        assert rows[tag]["manylinux"] == "manylinux_2_31_x86_64"
        assert "glibc 2.31 sysroot" in rows[tag]["toolchain"]
        assert rows[tag]["spec_hash"] == tag.rsplit("-", 1)[1]
        assert "3.12=host:" in rows[tag]["pythons"]
    assert "release 11.8" in rows[tags["cu118"]]["nvcc"]
    assert rows[tested_in]["present"]
    assert rows[tested_in]["role"] == "runtime"
    assert rows[tested_in]["size"] < rows[tags["cpu"]]["size"]
    # The image's build log names what it is made of, nvcc --version in its header.
    log118 = images_engine.default_cache() / "logs" / f"nightly-builder_{tags['cu118'].split(':')[1]}.log"
    header = log118.read_text().split("=" * 78)[1]
    assert "Cuda compilation tools, release 11.8" in header
    assert "debian:nvidia-cuda-toolkit_11.8.89" in header

    selects = [a for b in SUBSET for a in ("--select", b)]
    run = nightly("run", "--config", str(config), "--no-upload", *selects, env=env, timeout=3600)
    # The night ran for today (no --date): the day folder nightly made, beside its lock file.
    day = find_day(tmp_path / "nightlies").path
    assert run.returncode == 0, run.stderr[-3000:] + "\n" + "\n".join(
        p.read_text()[-3000:] for p in day.glob("logs/failed/*.log"))
    summary = json.loads((day / "summary.json").read_text())
    assert sorted(summary["builds"]) == SUBSET
    python = _host_python(config)
    for build_id in SUBSET:
        cuda = build_id.rsplit("_", 1)[1]
        # Each build's log names the exact image (its spec hash) it ran in.
        log = (day / "logs" / "succeeded" / f"{build_id}.log").read_text()
        assert f"where:    {tags[cuda]}" in log
        # ... and the nvcc of that image, read from its label (none in the cpu image).
        head = log.split("environment:")[0]
        if cuda == "cpu":
            assert "toolkit:" not in head
        else:
            release = {"cu118": "11.8", "cu124": "12.4", "cu130": "13.0"}[cuda]
            assert f"Cuda compilation tools, release {release}" in head.split("toolkit:")[1], head
        assert "/usr/local/cuda" not in log.split("environment:")[0]  # no host toolkit mount
        # Tested in the runtime image (no toolkit there): the CUDA runtime is in the wheel.
        assert f"smoke: in image {tested_in}, the runtime image of builder demo" in log
        (wheel,) = (day / "packages" / "manywheel" / cuda).glob("*.whl")
        # Repaired by auditwheel in the image to the declared policy (manylinux_2_28 or
        # older: PyTorch's target), whatever the CUDA.
        assert "manylinux_2_28_x86_64" in wheel.name, wheel.name
        entry = json.loads((day / "state.json").read_text())["builds"][build_id]
        glibc = tuple(int(x) for x in entry["manylinux"]["glibc"].split("."))
        assert glibc <= (2, 28), (build_id, entry["manylinux"])
        names = zipfile.ZipFile(wheel).namelist()
        if cuda == "cu118":
            # No static runtime in PyPI's 11.8 wheels: libcudart.so is bundled by auditwheel.
            assert any(n.startswith("nightlydemo.libs/libcudart") for n in names), names
        report = _report(python, wheel, tmp_path)
        assert report["runtime"] == EXPECTED_CUDART[cuda], (build_id, report)
        assert report["cuda"] is (cuda != "cpu")
        assert report["devices"] == 0  # no GPU here; importing and asking never crash


def test_a_distro_interpreter_image_shares_the_base(engine: Engine, tmp_path: Path) -> None:
    """`"3.11" = "distro"`: the suite's python3 as /opt/python/cp311-cp311 with setuptools and
    wheel; the same base packages as the demo builder, so the base layer is the same image."""
    text = demo_config(tmp_path).read_text()
    start = text.index("[builders.demo.pythons]")
    end = text.index("[timeouts]")
    text = (text[:start] + '[builders.demo.pythons]\n"3.11" = "distro"\n\n' + text[end:])
    text = text.replace('pythons = ["3.10", "3.11", "3.12", "3.13"]', 'pythons = ["3.11"]')
    text = text.replace('cudas = ["cpu", "11.8", "12.4", "13.0"]\n\n[matrix.linux.conda]',
                        'cudas = ["cpu"]\n\n[matrix.linux.conda]')
    for table in ("[matrix.linux.conda]", "[matrix.linux.libtorch]"):
        block_end = text.index("\n\n", text.index(table))
        text = text[:text.index(table)] + text[block_end + 2:]
    config = tmp_path / "distro.toml"
    config.write_text(text)
    spec = load(config).builders["demo"]
    demo = load(demo_config(tmp_path)).builders["demo"]
    assert spec.base_tag() == demo.base_tag()
    built = nightly("images", "build", "--config", str(config), env=engine.env(), timeout=3600)
    assert built.returncode == 0, built.stderr[-4000:]
    assert built.stdout.split() == [spec.tag_for("cpu"), runtime.tag(spec)]
    for image in built.stdout.split():  # the runtime image has the suite's python3 for it too
        out = engine.client.containers.run(
            image, remove=True,
            command=["/opt/python/cp311-cp311/bin/python", "-c",
                     "import sys, ssl, setuptools, wheel; print(sys.version_info[:2], sys.base_prefix)"],
        )
        assert out.decode().strip() == "(3, 11) /usr"
