"""Python 3.14 for real: the demo's cp314 manywheels (cpu and CUDA 13.0) built in the builder
image of configs/demo-py314.toml (Debian sid's binary python3.14, nightly's glibc 2.31
sysroot toolchain, nvcc with sid's gcc-14), manylinux_2_28 or better by auditwheel, published
to a folder mirror, then installed from the mirror's index pages and used in the builder's
runtime image (sid minbase + the same interpreter; no compiler, no toolkit).

Cold this builds the sid base (a debootstrap with gcc, g++-14 and python3-dev), the cpu and
cu130 layers and the sid runtime base: see docs/images.md for the figures. Warm (images
present) it is one small night.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nightly.config import load
from nightly.images import runtime
from tests.integration import corpus
from tests.support.cli import run_nightly
from tests.support.engine import Engine

pytestmark = [pytest.mark.engine, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
DATE = "2026_01_08"


def _config(tmp: Path) -> Path:
    """configs/demo-py314.toml with its folders in tmp (the builder table as shipped, so the
    images are the ones `nightly images build --config configs/demo-py314.toml` makes)."""
    text = (REPO / "configs" / "demo-py314.toml").read_text()
    text = text.replace('root = "../nightlies-demo-py314"',
                        f'root = "{tmp}/nightlies"\nrecipes = "{REPO}/recipes"')
    text = text.replace('source = "../examples/demo"', f'source = "{REPO}/examples/demo"')
    text = text.replace('url = "../mirror-demo-py314"', f'url = "{tmp}/mirror"')
    assert str(tmp) in text
    assert "../" not in text.split("[project]")[1]
    config = tmp / "nightly.toml"
    config.write_text(text)
    return config


def test_the_demos_cp314_wheels_are_built_published_and_used_in_the_runtime_image(
    engine: Engine, tmp_path: Path
) -> None:
    env = engine.env()
    config = _config(tmp_path)
    spec = load(config).builders["py314"]
    code, out, err = run_nightly(["images", "build", "--config", str(config)], env=env,
                                 timeout=3600)
    assert code == 0, err[-4000:]
    rows = json.loads(run_nightly(["images", "list", "--config", str(config), "--json"],
                                  env=env)[1])
    assert {r["tag"] for r in rows} == {spec.tag_for("cpu"), spec.tag_for("cu130"),
                                        runtime.tag(spec)}
    assert all(r["present"] and r["pythons"] == "3.14=distro:sid/python3.14" for r in rows)

    code, out, err = run_nightly(["run", "--config", str(config), "--date", DATE], env=env,
                                 timeout=3600)
    day = tmp_path / "nightlies" / DATE
    logs = "\n".join(p.read_text()[-3000:] for p in day.glob("logs/failed/*.log"))
    assert code == 0, (out[-2000:], err[-2000:], logs)
    builds = json.loads((day / "state.json").read_text())["builds"]
    assert set(builds) == {"manywheel_3.14_cpu", "manywheel_3.14_cu130"}
    for build_id, entry in builds.items():
        assert entry["status"] == "succeeded", build_id
        glibc = tuple(int(x) for x in entry["manylinux"]["glibc"].split("."))
        assert glibc <= (2, 28), entry["manylinux"]
        log = (day / "logs" / "succeeded" / f"{build_id}.log").read_text()
        assert f"smoke: in image {runtime.tag(spec)}" in log  # tested in the runtime image
    wheels = sorted((tmp_path / "mirror").rglob("*.whl"))
    assert len(wheels) == 2
    for wheel in wheels:
        assert "-cp314-cp314-" in wheel.name
        found = re.match(r"manylinux_(\d+)_(\d+)_x86_64$", corpus.auditwheel_verdict(wheel))
        assert found, wheel.name
        assert (int(found.group(1)), int(found.group(2))) <= (2, 28)

    # From the mirror's own index pages, into a fresh venv of the runtime image's 3.14.
    for wheel in wheels:
        # The PEP 503 index of the wheel's folder (whl/nightly/cpu/nightlydemo/index.html).
        index = next(d for d in (wheel.parent, *wheel.parents)
                     if (d / "nightlydemo" / "index.html").is_file())
        assert (tmp_path / "mirror") in index.parents
        version = wheel.name.split("-")[1]
        script = (
            "set -e; /opt/python/cp314-cp314/bin/python -m venv /tmp/v; "
            "/tmp/v/bin/python -m pip install -q --disable-pip-version-check "
            f"--index-url file:///mirror/{index.relative_to(tmp_path / 'mirror')}/ "
            f"'nightlydemo=={version}'; cd /tmp; /tmp/v/bin/python -c 'import sys, nightlydemo; "
            "print(sys.version_info[:2] == (3, 14), nightlydemo.add(2, 3), "
            "nightlydemo.cuda_runtime_version(), nightlydemo.__file__)'; "
            "command -v gcc || echo no-compiler")
        output = bytes(engine.client.containers.run(
            runtime.tag(spec), ["bash", "-c", script], remove=True, network_disabled=True,
            volumes={str(tmp_path / "mirror"): {"bind": "/mirror", "mode": "ro"}})).decode()
        words = output.split()
        cuda = "13000" if "+cu130" in version else "None"
        assert words[:3] == ["True", "5", cuda], output
        assert words[3].startswith("/tmp/v/lib/python3.14/site-packages/nightlydemo/")
        assert words[4] == "no-compiler"
