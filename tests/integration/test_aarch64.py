"""A corpus project's aarch64 manywheel cross-built on this x86_64 machine and its own test suite
run under qemu-user, for real. (The demo's aarch64 wheels are built by a whole night:
tests/integration/test_beyond_cuda.py.)

The manywheel recipe runs as an executor runs it, with nightly's cross environment for
aarch64 (nightly/images/cross.py: the target's Python from Debian's arm64 packages, its
sysconfigdata, zig for aarch64-linux-gnu.2.17) and the `2_28` policy: the wheel is repaired
for aarch64 (the architecture passed in, never this machine's), `auditwheel show` must find
it `manylinux_2_28_aarch64` or better; the project (markupsafe, a C extension) has its own
test suite run by the target's Python under qemu-aarch64 against the wheel.

Cold (nothing cached) each Python's arm64 root is a ~30 MB download and zig's aarch64 copy is
unpacked from the cached ziglang wheel; the emulated runs take seconds to a minute.
"""

from __future__ import annotations

import re
import shutil
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from nightly.images import cross, engine
from tests.integration import corpus
from tests.integration import recipe_env as renv

pytestmark = [pytest.mark.slow]

ARCH = "aarch64"
POLICY = "2_28"


def _cross_build(source: Path, python: str, tmp: Path, **versions: str) -> Path:
    """The manywheel recipe's wheel of `source` for Python X.Y on aarch64 (one file);
    `versions`: build_version and version_from for a project that keeps its own."""
    host = renv.pyenv_python(python)
    assert host is not None, f"no Python {python} on this machine to build with"
    cache = engine.default_cache()
    env_x = cross.host_env(ARCH, python, (2, 28), cache)
    cross.ensure(env_x, print)
    env = renv.contract_env(package_type="manywheel", source_dir=source, output_dir=tmp / "out",
                            work_dir=tmp / "work", desired_python=python, python=host,
                            build_version=versions.get("build_version", renv.BUILD_VERSION),
                            extra={**env_x, "NIGHTLY_MANYLINUX": POLICY,
                                   "NIGHTLY_VERSION_FROM": versions.get("version_from", "env")})
    run = renv.run_recipe("manywheel", env, timeout=1200)
    assert run.returncode == 0, run.describe()
    assert f"for {ARCH} (Python {python})" in run.output
    # Compiled against the target's Python headers, first on the include path.
    root = cross.folder(cache, ARCH, python) / "root"
    assert f"-I{root}/usr/include/python{python} " in run.output
    assert ".partial" not in run.output
    (wheel,) = run.packages
    return wheel


def _glibc(tag: str) -> tuple[int, int]:
    found = re.match(r"manylinux_(\d+)_(\d+)_aarch64$", tag)
    assert found, tag
    return int(found.group(1)), int(found.group(2))


def test_a_corpus_project_cross_built_for_aarch64_passes_its_own_tests_under_qemu(
    tmp_path: Path,
) -> None:
    project = corpus.BY_KEY["markupsafe"]
    python = "3.11"
    wheel = _cross_build(corpus.unpack(project), python, tmp_path,
                         build_version=project.wheel_version, version_from="keep")
    assert _glibc(corpus.auditwheel_verdict(wheel)) <= (2, 28)
    # Its test suite and pytest (pure Python wheels) beside the wheel, run by the aarch64
    # interpreter under qemu from a copy of the tests: only the wheel's markupsafe imports.
    host = renv.pyenv_python(python)
    assert host is not None
    tools = sorted(corpus.test_wheels(host, ("pytest",)).glob("*.whl"))
    work = tmp_path / "run"
    work.mkdir()
    shutil.copytree(project.source / "tests", work / "tests")
    (work / "pytest.ini").write_text("[pytest]\n")
    started = time.monotonic()
    ran = cross.run_against(
        [wheel, *tools], engine.default_cache(), ARCH, python,
        ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "pytest.ini", "--rootdir", ".",
         "--junitxml=junit.xml", "tests"], work, timeout=1800)
    assert ran.returncode == 0, (ran.stdout[-3000:], ran.stderr[-3000:])
    suite = ET.parse(work / "junit.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    total, failed, errors = (int(suite.get(k, "0")) for k in ("tests", "failures", "errors"))
    print(f"markupsafe's {total} tests under qemu-aarch64: {time.monotonic() - started:.1f} s")
    assert total > 50, ran.stdout[-2000:]
    assert (failed, errors) == (0, 0)
    # The speedups (the C extension) are what ran, not markupsafe's pure-Python fallback.
    check = cross.run_against(
        [], engine.default_cache(), ARCH, python,
        ["-c", "import platform, markupsafe._speedups as s; print(platform.machine(), s.__file__)"],
        work)
    assert check.returncode == 0, check.stderr[-2000:]
    machine, where = check.stdout.split()
    assert machine == "aarch64"
    assert where.startswith(str(work / "site")), where
    assert where.endswith("-aarch64-linux-gnu.so")
