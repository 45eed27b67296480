"""The manywheel recipe repairs to the platform nightly decided from the build's
architecture (MANYLINUX_PLATFORM), not to this machine's `uname -m`; without it (a caller
older than the variable) it falls back to uname. A build for another architecture outside
nightly's cross environment fails before building. Real auditwheel, on the demo's real wheel.
"""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from nightly.core.manylinux import platform_env
from tests.integration import recipe_env as renv

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(platform.system() != "Linux", reason="the Linux recipes build on Linux"),
]


def _run(tmp_path: Path, extra: dict[str, str]) -> renv.RecipeRun:
    python = renv.pyenv_python("3.12")
    if python is None:
        pytest.fail("no Python 3.12 interpreter on this machine (pyenv provides it here)")
    src = renv.readonly_copy_of_demo(tmp_path / "demo")
    try:
        env = renv.contract_env(package_type="manywheel", source_dir=src,
                                output_dir=tmp_path / "out", work_dir=tmp_path / "work",
                                desired_python="3.12", python=python, extra=extra)
        return renv.run_recipe("manywheel", env)
    finally:
        renv.make_writable(src)


def test_an_aarch64_build_is_repaired_to_aarch64_whatever_runs_it(tmp_path: Path) -> None:
    if platform.machine() != "x86_64":
        pytest.fail("this test builds an x86_64 wheel and asks for aarch64: run it on x86_64")
    env = platform_env("2_28", "aarch64")
    assert env["MANYLINUX_PLATFORM"] == "manylinux_2_28_aarch64"
    run = _run(tmp_path, env)
    # Without nightly's cross environment this machine's compiler would make an x86_64
    # wheel: the recipe refuses before building, naming the architecture it was given and
    # the way out (never a mislabelled wheel).
    assert run.returncode != 0, run.describe()
    assert "this build is for aarch64 but this machine is x86_64" in run.output, run.describe()
    assert "cross environment is not set" in run.output
    assert "running: auditwheel" not in run.output
    assert run.packages == []


def test_without_the_variable_the_recipe_uses_this_machine(tmp_path: Path) -> None:
    run = _run(tmp_path, {"NIGHTLY_MANYLINUX": "2_28"})
    assert f"--plat manylinux_2_28_{platform.machine()}" in run.output, run.describe()
    assert run.returncode == 0, run.describe()
