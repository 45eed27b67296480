"""The last lines of a night are the command that installs what it built (issue 50, point 2):
the night's own version (no YYYYMMDD), an absolute index URL (no $PWD), the index of the
dependencies, and the Pythons served. Run as printed, from another folder, in a fresh venv of
the Python built, it installs the wheel with its runtime dependency."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from tests.support.projects import HOST_PYTHON, VERSION, run_args
from tests.support.wheels import hand_wheel_recipe, make_wheel

PY = subprocess.run([HOST_PYTHON, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                    capture_output=True, text=True, check=True).stdout.strip()
RECIPE = hand_wheel_recipe(
    version='os.environ["BUILD_VERSION"]',
    body='"from valdep import ANSWER\\n"',
).replace('Version: {v}\\n",', 'Version: {v}\\nRequires-Dist: valdep>=2\\n",')


def _dependency_index(base: Path) -> Path:
    """A PEP 503 index (a folder) with the dependency's wheel: the project's `PyPI`."""
    folder = base / "deps" / "simple" / "valdep"
    folder.mkdir(parents=True)
    dep = make_wheel(folder, "valdep", "2.0", body="ANSWER = 42\n")
    (folder / "index.html").write_text(f'<a href="{dep.name}">{dep.name}</a>\n')
    return folder.parent


def test_the_night_ends_with_an_install_command_that_works(night_project, run_cli, tmp_path):
    assert "Requires-Dist: valdep" in RECIPE
    deps = _dependency_index(tmp_path)
    p = night_project(
        matrix=f'[matrix.linux.manywheel]\npythons = ["{PY}"]\ncudas = ["cpu"]\n'
               'manylinux = "off"\n',
        recipes={"manywheel": RECIPE}, queues=1,
        extra=f'[publish]\nurl = "mirror"\n\n[smoke]\ndependencies = "index"\n'
              f'index_url = "{deps.as_uri()}/"\n')
    code, out, err = run_cli(run_args(p.config), cwd=p.path)
    assert code == 0, (out, err)
    lines = [line for line in out.splitlines() if line.strip()]
    head, cmd = lines[-2], lines[-1].strip()
    assert head == f"install tonight's demo {VERSION} (Python {PY}):", out
    assert "YYYYMMDD" not in cmd
    assert "$PWD" not in cmd
    mirror = (p.path / "mirror" / "whl" / "nightly" / "cpu").as_uri()
    assert cmd == (f"pip install --index-url {mirror}/ --extra-index-url {deps.as_uri()}/ "
                   f"demo=={VERSION}"), cmd

    # Run as printed, from another folder, with a fresh venv's own pip.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    subprocess.run([HOST_PYTHON, "-m", "venv", str(elsewhere / "venv")], check=True, timeout=300)
    argv = shlex.split(cmd)
    assert argv[:2] == ["pip", "install"]
    vpy = str(elsewhere / "venv" / "bin" / "python")
    r = subprocess.run([vpy, "-m", "pip", *argv[1:]], cwd=elsewhere, capture_output=True,
                       text=True, timeout=600, check=False,
                       env={"PATH": "/usr/bin:/bin", "PIP_CONFIG_FILE": "/dev/null",
                            "HOME": str(elsewhere)})
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([vpy, "-c", "import demo, valdep; print(valdep.ANSWER)"],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.stdout.strip() == "42", r.stdout + r.stderr
