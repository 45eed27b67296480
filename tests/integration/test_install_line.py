"""The last lines of a night are the command that installs what it built (issue 50, point 2):
the night's own version (no YYYYMMDD), an absolute index URL (no $PWD), the index of the
dependencies, and the Pythons served. Run as printed, from another folder, in a fresh venv of
EACH Python the night built (two real interpreters, 3.11 and 3.12, each wheel tagged for its
CPython alone), it installs that Python's wheel with its runtime dependency."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from tests.integration.recipe_env import pyenv_python
from tests.support.fixture_types import MakeProject, RunCli
from tests.support.projects import HOST_PYTHON, VERSION, run_args
from tests.support.wheels import hand_wheel_recipe, make_wheel

PYS = ("3.11", "3.12")  # the night builds for both; the command must serve each
# Each build's wheel: tagged for its own CPython only (cp311 / cp312, so a venv can install
# no other), requiring valdep, and saying which Python built it.
RECIPE = hand_wheel_recipe(
    version='os.environ["BUILD_VERSION"]',
    body='"from valdep import ANSWER\\nBUILT_FOR = " + repr(os.environ["DESIRED_PYTHON"]) + "\\n"',
).replace('Version: {v}\\n",', 'Version: {v}\\nRequires-Dist: valdep>=2\\n",') \
 .replace('"Tag: py3-none-any\\n"', 'f"Tag: cp{tag}-none-any\\n"') \
 .replace('{tag}-py3-none-any.whl', '{tag}-cp{tag}-none-any.whl')


def _dependency_index(base: Path) -> Path:
    """A PEP 503 index (a folder) with the dependency's wheel: the project's `PyPI`."""
    folder = base / "deps" / "simple" / "valdep"
    folder.mkdir(parents=True)
    dep = make_wheel(folder, "valdep", "2.0", body="ANSWER = 42\n")
    (folder / "index.html").write_text(f'<a href="{dep.name}">{dep.name}</a>\n')
    return folder.parent


def _interpreters() -> dict[str, Path]:
    found = {xy: pyenv_python(xy) for xy in PYS}
    missing = [xy for xy, exe in found.items() if exe is None]
    if missing:
        pytest.skip(f"no Python {', '.join(missing)} here (pyenv or pythonX.Y on PATH)")
    return {xy: exe for xy, exe in found.items() if exe is not None}


def _install_in_fresh_venv(exe: Path, cmd: str, folder: Path) -> str:
    """Run `cmd` (pip install ...) as printed with a fresh venv of `exe`'s own pip, from
    `folder`; then import the project: what its BUILT_FOR and the dependency say."""
    subprocess.run([str(exe), "-m", "venv", str(folder / "venv")], check=True, timeout=300)
    argv = shlex.split(cmd)
    assert argv[:2] == ["pip", "install"]
    vpy = str(folder / "venv" / "bin" / "python")
    r = subprocess.run([vpy, "-m", "pip", *argv[1:]], cwd=folder, capture_output=True,
                       text=True, timeout=600, check=False,
                       env={"PATH": "/usr/bin:/bin", "PIP_CONFIG_FILE": "/dev/null",
                            "HOME": str(folder), "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([vpy, "-c", "import demo, valdep; print(demo.BUILT_FOR, valdep.ANSWER)"],
                       capture_output=True, text=True, timeout=60, check=False)
    return r.stdout.strip() + r.stderr


def test_the_night_ends_with_an_install_command_that_works(
    night_project: MakeProject, run_cli: RunCli, tmp_path: Path
) -> None:
    assert "Requires-Dist: valdep" in RECIPE
    assert "-cp{tag}-none-any.whl" in RECIPE
    assert "Tag: cp{tag}-none-any" in RECIPE
    interpreters = _interpreters()
    deps = _dependency_index(tmp_path)
    p = night_project(
        matrix=f'[matrix.linux.manywheel]\npythons = {list(PYS)!r}\ncudas = ["cpu"]\n'
               'manylinux = "off"\n'.replace("'", '"'),
        recipes={"manywheel": RECIPE}, queues=2,
        extra=f'[publish]\nurl = "mirror"\n\n[smoke]\ndependencies = "index"\n'
              f'index_url = "{deps.as_uri()}/"\n')
    # Each Python of the night is its own real interpreter (not the host's for all).
    text = p.config.read_text()
    for xy, exe in interpreters.items():
        assert f'"{xy}" = "{HOST_PYTHON}"' in text
        text = text.replace(f'"{xy}" = "{HOST_PYTHON}"', f'"{xy}" = "{exe}"')
    p.config.write_text(text)
    code, out, err = run_cli(run_args(p.config), cwd=p.path, timeout=600)
    assert code == 0, (out, err)
    lines = [line for line in out.splitlines() if line.strip()]
    head, cmd = lines[-2], lines[-1].strip()
    assert head == f"install tonight's demo {VERSION} (Python {', '.join(PYS)}):", out
    assert "YYYYMMDD" not in cmd
    assert "$PWD" not in cmd
    mirror = (p.path / "mirror" / "whl" / "nightly" / "cpu").as_uri()
    assert cmd == (f"pip install --index-url {mirror}/ --extra-index-url {deps.as_uri()}/ "
                   f"demo=={VERSION}"), cmd

    # Run as printed, from another folder, in a fresh venv of each Python the night built:
    # each gets its own Python's wheel (cpXY-tagged) and the dependency.
    for xy, exe in interpreters.items():
        elsewhere = tmp_path / f"elsewhere-{xy}"
        elsewhere.mkdir()
        assert _install_in_fresh_venv(exe, cmd, elsewhere) == f"{xy} 42", xy
