"""`nightly validate`: what users get, from the published side only (issue 28, point 3).

A day's wheel is published into a file:// mirror with its index pages and PEP 658 metadata,
the mirror is served over HTTP by a static server, and `nightly validate` resolves the wheel
through the served index with pip, compares it with what was built, installs and imports it.
Each way the published side can go wrong is then made, and validate names the package and why.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from nightly import config as cfg
from nightly.publish.upload import publish_day
from nightly.workspace import SUCCEEDED, Day, PackageFile, State
from tests.support.wheels import make_wheel

PROJECT = "valdemo"
VERSION = "1.0.0.dev20240501"
WHEEL = f"{PROJECT}-{VERSION}-py3-none-any.whl"
PY = f"{sys.version_info.major}.{sys.version_info.minor}"
FOLDER = Path("whl/nightly/cpu")


def _config(tmp_path: Path, public_url: str) -> Path:
    path = tmp_path / "nightly.toml"
    path.write_text(f"""\
root = "nightlies"

[project]
name = "{PROJECT}"
source = "."
base_version = "1.0.0"

[matrix.linux.manywheel]
pythons = ["{PY}"]
cudas = ["cpu"]

[[machines]]
name = "a"
platform = "linux"
queues = 1

[executor.local.pythons]
"{PY}" = "{sys.executable}"

[publish]
url = "{(tmp_path / 'mirror').as_uri()}"
public_url = "{public_url}"
""")
    return path


def _publish(tmp_path: Path, config_path: Path) -> Path:
    config = cfg.load(config_path)
    day = Day(config.root, dt.date(2024, 5, 1))
    day.create()
    folder = day.package_dir("manywheel", "cpu")
    folder.mkdir(parents=True, exist_ok=True)
    wheel = make_wheel(folder, PROJECT, VERSION)
    state = State(day.state_path)
    pkg = PackageFile(name=wheel.name, path=str(wheel.relative_to(day.path)),
                      size=wheel.stat().st_size,
                      sha256=hashlib.sha256(wheel.read_bytes()).hexdigest())
    state.update(f"manywheel_{PY}_cpu", status=SUCCEEDED, package="manywheel", python=PY,
                 cuda="cpu", packages=[pkg])
    report = publish_day(config, day, state, channel="nightly", log=lambda _line: None)
    assert report.ok, report
    return tmp_path / "mirror"


def _validate(config_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nightly", "validate", "--config", str(config_path),
         "--date", "2024_05_01"],
        capture_output=True, text=True, timeout=600, check=False,
    )


def _drop_link(mirror: Path) -> None:
    page = mirror / FOLDER / PROJECT / "index.html"
    page.write_text("\n".join(line for line in page.read_text().splitlines()
                              if WHEEL not in line))


def _alter_metadata(mirror: Path) -> None:
    meta = mirror / FOLDER / f"{WHEEL}.metadata"
    meta.write_bytes(meta.read_bytes().replace(b"Name: ", b"Name: x", 1))


def _replace_wheel(mirror: Path) -> None:
    other = make_wheel(mirror.parent, PROJECT, VERSION, body="VERSION = 'not the one built'\n")
    shutil.move(other, mirror / FOLDER / WHEEL)


def _delete_wheel(mirror: Path) -> None:
    (mirror / FOLDER / WHEEL).unlink()


TAMPER: dict[str, tuple[Callable[[Path], None], str]] = {
    "page edited to drop the link": (_drop_link, "not in the index"),
    ".metadata altered": (_alter_metadata, "not what the index says it is"),
    "wheel replaced": (_replace_wheel, "not what the index says it is"),
    "wheel deleted": (_delete_wheel, "the index links a file the store does not have"),
}


def test_validate_passes_then_names_each_way_the_published_side_breaks(
    tmp_path: Path, http_server: Callable[[Path], str]
) -> None:
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    base = http_server(mirror)
    config_path = _config(tmp_path, base)
    _publish(tmp_path, config_path)
    pristine = tmp_path / "pristine"
    shutil.copytree(mirror, pristine)

    r = _validate(config_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"validate ok   manywheel_{PY}_cpu: {WHEEL}" in r.stdout
    assert "1 of 1 published package(s) as built" in r.stdout

    for what, (tamper, reason) in TAMPER.items():
        shutil.rmtree(mirror / "whl")
        shutil.copytree(pristine / "whl", mirror / "whl")
        tamper(mirror)
        r = _validate(config_path)
        assert r.returncode == 1, f"{what}: {r.stdout}{r.stderr}"
        fail = next((line for line in r.stdout.splitlines() if line.startswith("validate FAIL")),
                    "")
        assert WHEEL in fail, f"{what}: {r.stdout}"
        assert reason in fail, f"{what}: {fail}"
        assert "Traceback" not in r.stderr


def test_validate_without_a_public_url_for_s3_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "nightly.toml"
    path.write_text(_config(tmp_path, "").read_text().replace(
        f'url = "{(tmp_path / "mirror").as_uri()}"', 'url = "s3://bucket/prefix"'))
    config = cfg.load(path)
    from nightly.errors import ConfigError
    from nightly.publish.validate import public_base

    with pytest.raises(ConfigError, match="public_url"):
        public_base(config)


def test_validate_installs_runtime_dependencies_as_the_smoke_test_does(
    tmp_path: Path, http_server: Callable[[Path], str]
) -> None:
    """[smoke] dependencies = "index": validate installs the published wheel with its runtime
    dependencies from [smoke]'s index (issue 50, point 3); it used to install it alone, so
    every project with a dependency failed its import."""
    deps = tmp_path / "deps" / "simple" / "valdep"
    deps.mkdir(parents=True)
    dep = make_wheel(deps, "valdep", "2.0", body="ANSWER = 42\n")
    (deps / "index.html").write_text(f'<a href="{dep.name}">{dep.name}</a>\n')
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    config_path = _config(tmp_path, http_server(mirror))
    with config_path.open("a") as f:
        f.write(f'\n[smoke]\ndependencies = "index"\nindex_url = "{deps.parent.as_uri()}/"\n')
    config = cfg.load(config_path)
    day = Day(config.root, dt.date(2024, 5, 1))
    day.create()
    folder = day.package_dir("manywheel", "cpu")
    folder.mkdir(parents=True, exist_ok=True)
    wheel = make_wheel(folder, PROJECT, VERSION, requires=("valdep>=2",),
                       body="from valdep import ANSWER\nassert ANSWER == 42\n")
    state = State(day.state_path)
    state.update(f"manywheel_{PY}_cpu", status=SUCCEEDED, package="manywheel", python=PY,
                 cuda="cpu", packages=[PackageFile(
                     name=wheel.name, path=str(wheel.relative_to(day.path)),
                     size=wheel.stat().st_size,
                     sha256=hashlib.sha256(wheel.read_bytes()).hexdigest())])
    assert publish_day(config, day, state, channel="nightly", log=lambda _line: None).ok

    r = _validate(config_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"validate ok   manywheel_{PY}_cpu: {WHEEL}" in r.stdout

    # The dependency gone from its index: validate says so (it really installs it).
    dep.unlink()
    r = _validate(config_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "valdep" in r.stdout
