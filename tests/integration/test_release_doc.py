"""docs/releases.md's flow, run as written against a real package index: `nightly release
1.2.0 --rc 1` publishes the candidate (version 1.2.0) to the test channel of a local mirror
and nothing to the index; `nightly promote ... --dry-run` changes nothing; `nightly promote`
copies it to the release channel and uploads the wheel with twine to pypiserver, from which
pip installs it, and publishes the release channel's report; promoting again changes nothing;
exit codes as the doc's table says."""

from __future__ import annotations

import hashlib
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.servers import PYPI_PASSWORD, PYPI_USER, PypiServer, fresh_venv, pip_install
from tests.support.wheels import hand_wheel_recipe

pytestmark = pytest.mark.filterwarnings("ignore:.crypt. is deprecated:DeprecationWarning")

DOC = Path(__file__).resolve().parents[2] / "docs" / "releases.md"
RECIPE = hand_wheel_recipe(version='os.environ["BUILD_VERSION"]', body='f"__version__ = {v!r}\\n"')
MATRIX = '\n[matrix.linux.manywheel]\npythons = ["3.11"]\ncudas = ["cpu"]\n'


def _flow() -> list[str]:
    """The commands of the doc's flow block (comments cut)."""
    text = DOC.read_text()
    block = text.split("<!-- release-flow", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_the_release_flow_of_the_doc(
    night_project: Callable[..., Any], run_cli: Callable[..., tuple[int, str, str]],
    pypiserver: PypiServer, tmp_path: Path,
) -> None:
    flow = _flow()
    assert flow == ["nightly release 1.2.0 --rc 1", "nightly status --release 1.2.0 --rc 1",
                    "nightly promote 1.2.0 --rc 1 --dry-run", "nightly promote 1.2.0 --rc 1"]
    extra = (f'\n[publish]\nurl = "mirror"\n\n[publish.pypi]\nrepository_url = "{pypiserver.url}"\n'
             f'username = "{PYPI_USER}"\npassword_env = "TWINE_PASSWORD"\n\n'
             '[smoke]\nimport_name = "demo"\n')
    p = night_project(matrix=MATRIX, recipes={"manywheel": RECIPE}, extra=extra)
    env = {"TWINE_PASSWORD": PYPI_PASSWORD}

    def run(command: str) -> tuple[int, str, str]:
        args = [*command.split()[1:], "--config", str(p.config)]
        return run_cli(args, cwd=p.path, env=env, timeout=300)

    code, out, err = run(flow[0])
    assert code == 0, out + err
    candidate = p.path / "nightlies" / "release" / "1.2.0-rc1"
    assert (candidate / "state.json").is_file()
    assert (candidate / "logs" / "succeeded" / "manywheel_3.11_cpu.log").is_file()
    (tested,) = (p.path / "mirror" / "whl" / "test" / "cpu").glob("*.whl")
    assert tested.name.startswith("demo-1.2.0-")  # the final version, not 1.2.0rc1
    assert list(pypiserver.packages.iterdir()) == []  # twine runs only at promote
    assert list((p.path / "mirror" / "whl" / "test" / "reports").glob("release_1.2.0-rc1_*.html"))

    code, out, err = run(flow[1])  # the candidate's builds, as status shows a night
    assert code == 0, out + err
    assert "release/1.2.0-rc1" in out
    assert re.search(r"manywheel_3\.11_cpu\s.*succeeded", out), out
    assert tested.name in out
    code, _, err = run("nightly status --release 1.2.0 --rc 2")
    assert code == 2
    assert "no release candidate release/1.2.0-rc2" in err
    code, _, err = run("nightly status --rc 1")
    assert code == 2
    assert "--release VERSION" in err

    code, out, err = run(flow[2])
    assert code == 0, out + err
    assert "would upload" in out
    assert not (p.path / "mirror" / "whl" / "cpu").exists()
    assert list(pypiserver.packages.iterdir()) == []

    code, out, err = run(flow[3])
    assert code == 0, out + err
    released = p.path / "mirror" / "whl" / "cpu" / tested.name
    assert released.read_bytes() == tested.read_bytes()
    assert (pypiserver.packages / tested.name).read_bytes() == tested.read_bytes()
    assert PYPI_PASSWORD not in out + err
    python = fresh_venv(tmp_path / "venv")
    proc = pip_install(python, pypiserver.simple, "demo==1.2.0", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shown = subprocess.run([str(python), "-c", "import demo; print(demo.__version__)"],
                           capture_output=True, text=True, cwd=tmp_path, check=True)
    assert shown.stdout.strip() == "1.2.0"
    # The release channel's report beside the release index pages: what was promoted, from
    # which candidate, with its sha256, and twine's result.
    (page,) = (p.path / "mirror" / "whl" / "reports").glob("release_1.2.0_*.html")
    text = page.read_text()
    sha = hashlib.sha256(tested.read_bytes()).hexdigest()
    assert "release/1.2.0-rc1" in text
    assert f"whl/cpu/{tested.name}" in text
    assert sha in text
    assert "uploaded 1 wheel(s) to" in text
    assert PYPI_PASSWORD not in text
    assert (candidate / "promote.html").read_bytes() == page.read_bytes()

    code, out, err = run(flow[3])  # again: changes nothing
    assert code == 0, out + err
    assert re.search(r"already uploaded to .*: 1 wheel", out), out
    assert page.read_text() == text  # the published report too
    # The doc's exit codes: no such candidate is 2; what is done needs no password again.
    code, _, err = run("nightly promote 1.2.0 --rc 2")
    assert code == 2
    assert "no release candidate" in err
    code, _, err = run_cli(["promote", "1.2.0", "--rc", "1", "--config", str(p.config)],
                           cwd=p.path, env={"TWINE_PASSWORD": ""})
    assert code == 0, err
