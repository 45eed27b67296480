"""nightly installed as a user installs it without extras (`pip install nightly-builds`: the
base dependencies only, from the project's own wheel, not editable): every command that needs
an optional library says which extra brings it in one line, exit 2, never a traceback.

The wheel is the run's (tests/support/selfwheel.py: pypa/build from a copy of the tree, once
per run), installed into a fresh venv here; nothing else is shared between tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.selfwheel import nightly_wheel

pytestmark = pytest.mark.slow

CONFIG = """\
[project]
name = "tiny"
source = "proj"
base_version = "1.0"

[matrix.linux.manywheel]
pythons = ["3.11"]
cudas = ["cpu"]

[[machines]]
name = "m"
platform = "linux"
queues = 1
executor = "container"

[images]
default = "@demo"

[builders.demo]
pythons = { "3.11" = "distro" }

[publish]
url = "s3://a-bucket/nightly"

[publish.pypi]
repository_url = "http://127.0.0.1:9/"
"""


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `nightly` command of a fresh venv holding nightly's wheel (the run's, from
    tests/support/selfwheel.py) and its base dependencies only."""
    wheel = nightly_wheel(tmp_path_factory)
    assert wheel.name.startswith("nightly_builds-")
    with zipfile.ZipFile(wheel) as z:
        assert "nightly/scripts/container-engine.sh" in z.namelist()
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
                   check=True, capture_output=True)
    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list"],
                            capture_output=True, text=True, check=True).stdout.lower()
    for optional in ("docker", "boto3", "distributed", "twine", "securesystemslib"):
        assert f"\n{optional} " not in listed, f"{optional} installed without its extra"
    return venv / "bin" / "nightly"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "proj").mkdir()
    (tmp_path / "nightly.toml").write_text(CONFIG)
    return tmp_path


COMMANDS = [
    (("images", "build"), "container"),
    (("images", "list"), "container"),
    (("images", "check"), "container"),
    (("run",), "container,s3"),
    (("run", "--no-upload"), "container"),
    (("build", "manywheel", "3.11", "cpu", "--executor", "local"), "s3"),
    (("build", "manywheel", "3.11", "cpu"), "container,s3"),
    (("run", "--cluster", "tls://127.0.0.1:1"), "cluster"),
    (("index",), "s3"),
    (("index", "--full"), "s3"),
    (("cluster", "certs", "certs", "--hosts", "a"), "cluster"),
    (("cluster", "worker", "tls://127.0.0.1:1"), "cluster"),
    (("provenance", "keygen", "keys"), "provenance"),
    (("promote", "1.0.0"), "pypi"),
]


@pytest.mark.parametrize(("args", "extra"), COMMANDS, ids=[" ".join(a) for a, _ in COMMANDS])
def test_a_missing_extra_is_one_line_naming_it(
    bare: Path, work: Path, args: tuple[str, ...], extra: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NIGHTLY_CONFIG"}
    proc = subprocess.run([str(bare), *args, "--date", "2026_01_02"]
                          if args[0] in ("run", "build", "upload", "index") else [str(bare), *args],
                          cwd=work, capture_output=True, text=True, env=env, timeout=300)
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("nightly: error: "), proc.stderr
    assert f"pip install 'nightly-builds[{extra}]'" in lines[-1]


def test_the_version_names_the_distribution(bare: Path, work: Path) -> None:
    proc = subprocess.run([str(bare), "--version"], cwd=work, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "0." in proc.stdout
