"""The demo's libtorch zip under the manylinux policy for real: a night of the real libtorch
recipe on the host (local executor), `[matrix.linux.libtorch] manylinux = "2_28"`, built with
nightly's glibc 2.31 sysroot toolchain where this machine's glibc is newer. Every shared
library of the zip needs glibc 2.28 at most (readelf's version needs) and no GLIBCXX_ (the
C++ runtime is linked statically), and the smoke program links against it and runs."""

from __future__ import annotations

import json
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from nightly.images import sysroot
from tests.support.fixture_types import RunCli

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(platform.system() != "Linux", reason="libtorch zips are Linux builds"),
]

REPO = Path(__file__).resolve().parents[2]


def _config(root: Path) -> Path:
    src = root / "demo"
    shutil.copytree(REPO / "examples" / "demo", src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    config = root / "nightly.toml"
    config.write_text(f"""
root = "nightlies"
recipes = "{REPO / 'recipes'}"
[project]
name = "nightlydemo"
source = "{src}"
base_version = "0.1.0"
[matrix.linux.libtorch]
variants = ["shared-with-deps"]
python = "3.11"
cudas = ["cpu"]
manylinux = "2_28"
[cache]
enabled = false
[smoke]
import_name = "nightlydemo"
libtorch_program = "smoke/main.cpp"
libtorch_libs = ["demo"]
[publish]
url = "mirror"
[[machines]]
name = "local"
platform = "linux"
queues = 1
executor = "local"
""")
    return config


def _needs(path: Path) -> tuple[tuple[int, int], list[str]]:
    """The newest GLIBC_X.Y and the GLIBCXX_ versions an ELF file needs (readelf -V)."""
    out = subprocess.run(["readelf", "-V", "-W", str(path)], capture_output=True, text=True,
                         check=True).stdout
    glibc = [(int(a), int(b)) for a, b in re.findall(r"Name: GLIBC_(\d+)\.(\d+)", out)]
    return max(glibc, default=(0, 0)), re.findall(r"Name: (GLIBCXX_[\d.]+)", out)


def test_the_demo_libtorch_zip_meets_glibc_2_28(tmp_path: Path, run_cli: RunCli) -> None:
    config = _config(tmp_path)
    code, out, err = run_cli(["run", "--config", str(config), "--date", "2026_01_05"],
                             timeout=900)
    assert code == 0, (out, err)
    day = tmp_path / "nightlies" / "2026_01_05"
    entry = json.loads((day / "state.json").read_text())["builds"]["libtorch_shared-with-deps_cpu"]
    assert entry["status"] == "succeeded", entry
    assert entry["manylinux"]["policy"] == "2_28"
    assert entry["tested"]["result"] == "passed"  # the smoke program linked and ran
    recorded = tuple(int(x) for x in entry["manylinux"]["glibc"].split("."))
    assert recorded <= (2, 28)
    (zipped,) = sorted((day / "packages").rglob("libtorch-shared-with-deps-*.zip"))
    unpacked = tmp_path / "unpacked"
    # unzip keeps the soname symlinks (zipfile would write them as small files).
    subprocess.run(["unzip", "-q", str(zipped), "-d", str(unpacked)], check=True)
    libs = [p for p in (unpacked / "libtorch" / "lib").iterdir()
            if ".so" in p.name and p.is_file() and not p.is_symlink()]
    assert libs
    for lib in libs:
        glibc, glibcxx = _needs(lib)
        assert (2, 2) <= glibc <= (2, 28), (lib.name, glibc)
        assert glibcxx == [], (lib.name, glibcxx)
    # The C++ runtime is inside the library: nothing of the build compiler's is bundled.
    assert not [p.name for p in libs if p.name.startswith(("libstdc++", "libgcc_s"))]
    log = (day / "logs" / "succeeded" / "libtorch_shared-with-deps_cpu.log").read_text()
    assert "glibc: policy 2_28" in log
    if sysroot.host_glibc() > (2, 28):  # built by the policy's toolchain, not the host's
        assert "[nightly] toolchain glibc 2.31 sysroot" in log
