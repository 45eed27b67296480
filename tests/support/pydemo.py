"""The demo's manywheels for one of sid's Pythons (configs/demo-py314.toml, demo-py315.toml)
built for real: the builder images made by `nightly images build`, a night that builds the
cpu and CUDA 13.0 wheels (manylinux_2_28 or better by auditwheel, smoke-tested in the runtime
image), published to a folder mirror, then installed from the mirror's own index pages into a
fresh venv of the runtime image's interpreter and used there (no compiler, no toolkit)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from nightly.config import load
from nightly.images import runtime
from tests.integration import corpus
from tests.support.cli import run_nightly
from tests.support.engine import Engine

REPO = Path(__file__).resolve().parents[2]
DATE = "2026_01_08"


def demo_config(tmp: Path, xy: str) -> Path:
    """configs/demo-pyXY.toml with its folders in tmp (the builder table as shipped, so the
    images are the ones `nightly images build --config configs/demo-pyXY.toml` makes)."""
    tag = "py" + xy.replace(".", "")
    text = (REPO / "configs" / f"demo-{tag}.toml").read_text()
    text = text.replace(f'root = "../nightlies-demo-{tag}"',
                        f'root = "{tmp}/nightlies"\nrecipes = "{REPO}/recipes"')
    text = text.replace('source = "../examples/demo"', f'source = "{REPO}/examples/demo"')
    text = text.replace(f'url = "../mirror-demo-{tag}"', f'url = "{tmp}/mirror"')
    assert str(tmp) in text
    assert "../" not in text.split("[project]")[1]
    config = tmp / "nightly.toml"
    config.write_text(text)
    return config


def build_publish_and_use(engine: Engine, tmp_path: Path, xy: str) -> None:
    """The whole check for Python `xy` (3.14, 3.15)."""
    env = engine.env()
    tag = "py" + xy.replace(".", "")
    abi = "cp" + xy.replace(".", "")
    config = demo_config(tmp_path, xy)
    spec = load(config).builders[tag]
    code, out, err = run_nightly(["images", "build", "--config", str(config)], env=env,
                                 timeout=3600)
    assert code == 0, err[-4000:]
    rows = json.loads(run_nightly(["images", "list", "--config", str(config), "--json"],
                                  env=env)[1])
    assert {r["tag"] for r in rows} == {spec.tag_for("cpu"), spec.tag_for("cu130"),
                                        runtime.tag(spec)}
    assert all(r["present"] and r["pythons"] == f"{xy}=distro:sid/python{xy}" for r in rows)

    code, out, err = run_nightly(["run", "--config", str(config), "--date", DATE], env=env,
                                 timeout=3600)
    day = tmp_path / "nightlies" / DATE
    logs = "\n".join(p.read_text()[-3000:] for p in day.glob("logs/failed/*.log"))
    assert code == 0, (out[-2000:], err[-2000:], logs)
    builds = json.loads((day / "state.json").read_text())["builds"]
    assert set(builds) == {f"manywheel_{xy}_cpu", f"manywheel_{xy}_cu130"}
    for build_id, entry in builds.items():
        assert entry["status"] == "succeeded", build_id
        glibc = tuple(int(x) for x in entry["manylinux"]["glibc"].split("."))
        assert glibc <= (2, 28), entry["manylinux"]
        log = (day / "logs" / "succeeded" / f"{build_id}.log").read_text()
        assert f"smoke: in image {runtime.tag(spec)}" in log  # tested in the runtime image
    wheels = sorted((tmp_path / "mirror").rglob("*.whl"))
    assert len(wheels) == 2
    for wheel in wheels:
        assert f"-{abi}-{abi}-" in wheel.name
        found = re.match(r"manylinux_(\d+)_(\d+)_x86_64$", corpus.auditwheel_verdict(wheel))
        assert found, wheel.name
        assert (int(found.group(1)), int(found.group(2))) <= (2, 28)
    for wheel in wheels:
        _use_from_the_mirror(engine, tmp_path, spec_tag=runtime.tag(spec), wheel=wheel, xy=xy)


def _use_from_the_mirror(engine: Engine, tmp_path: Path, *, spec_tag: str, wheel: Path,
                         xy: str) -> None:
    """From the mirror's own index pages, into a fresh venv of the runtime image's Python."""
    abi = "cp" + xy.replace(".", "")
    # The PEP 503 index of the wheel's folder (whl/nightly/cpu/nightlydemo/index.html).
    index = next(d for d in (wheel.parent, *wheel.parents)
                 if (d / "nightlydemo" / "index.html").is_file())
    assert (tmp_path / "mirror") in index.parents
    version = wheel.name.split("-")[1]
    major, minor = xy.split(".")
    script = (
        f"set -e; /opt/python/{abi}-{abi}/bin/python -m venv /tmp/v; "
        "/tmp/v/bin/python -m pip install -q --disable-pip-version-check "
        f"--index-url file:///mirror/{index.relative_to(tmp_path / 'mirror')}/ "
        f"'nightlydemo=={version}'; cd /tmp; /tmp/v/bin/python -c 'import sys, nightlydemo; "
        f"print(sys.version_info[:2] == ({major}, {minor}), nightlydemo.add(2, 3), "
        "nightlydemo.cuda_runtime_version(), nightlydemo.__file__)'; "
        "command -v gcc || echo no-compiler")
    output = bytes(engine.client.containers.run(
        spec_tag, ["bash", "-c", script], remove=True, network_disabled=True,
        volumes={str(tmp_path / "mirror"): {"bind": "/mirror", "mode": "ro"}})).decode()
    words = output.split()
    cuda = "13000" if "+cu130" in version else "None"
    assert words[:3] == ["True", "5", cuda], output
    assert words[3].startswith(f"/tmp/v/lib/python{xy}/site-packages/nightlydemo/")
    assert words[4] == "no-compiler"
