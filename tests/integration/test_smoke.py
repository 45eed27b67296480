"""Smoke tests hold broken packages back from upload; the history feeds the next plan."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.projects import DATE
from tests.support.wheels import hand_wheel_recipe

# A recipe that writes a real (pure) wheel by hand. The 3.12 build's module raises on
# import: it builds fine, and only a smoke test can tell. Build tags (311/312) keep the two
# file names apart, as a real project's python tags would.
WHEEL_RECIPE = hand_wheel_recipe(
    version='os.environ["BUILD_VERSION"]',
    body=("\"raise ImportError('broken on purpose')\\n\" if os.environ[\"DESIRED_PYTHON\"] == "
          "\"3.12\" else f\"__version__ = {v!r}\\n\""),
)

MATRIX = """
[matrix.linux.manywheel]
pythons = ["3.11", "3.12"]
cudas = ["cpu"]
"""

EXTRA = """
[publish]
url = "mirror"

[smoke]
import_name = "demo"
"""


def test_broken_wheel_is_held_back_and_history_feeds_the_plan(
    night_project: Callable[..., Any], run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    p = night_project(matrix=MATRIX, recipes={"manywheel": WHEEL_RECIPE}, extra=EXTRA)
    code, out, err = run_cli(["run", "--config", str(p.config), "--date", DATE], cwd=p.path)
    assert code == 1, out + err

    builds = p.state()["builds"]
    good, bad = builds["manywheel_3.11_cpu"], builds["manywheel_3.12_cpu"]
    assert good["status"] == "succeeded"
    assert bad["status"] == "failed"
    assert bad["reason"].startswith("smoke test"), bad["reason"]

    # The smoke output is in the broken build's log, which is filed under failed/.
    log = (p.day / "logs" / "failed" / "manywheel_3.12_cpu.log").read_text()
    assert "smoke test" in log
    assert "broken on purpose" in log
    assert "smoke: passed" in (p.day / "logs" / "succeeded" / "manywheel_3.11_cpu.log").read_text()

    # Only the good wheel reached the mirror and its index pages.
    folder = p.path / "mirror" / "whl" / "nightly" / "cpu"
    published = sorted(f.name for f in folder.glob("*.whl"))
    assert published == [good["packages"][0]["name"]]
    assert bad["packages"] == []
    assert "published" not in bad
    page = (folder / "demo" / "index.html").read_text()
    assert "-311-" in page
    assert "-312-" not in page

    # The history recorded the night, and the next plan takes its estimate from it
    # (one machine per platform: history estimates are on by default).
    code, out, err = run_cli(
        ["plan", "--json", "--config", str(p.config), "--date", DATE], cwd=p.path
    )
    assert code == 0, err
    plan = {b["id"]: b for b in json.loads(out)["builds"]}
    configured = 15 * 60.0  # [estimates.default] cpu, for a build with no history
    assert abs(plan["manywheel_3.11_cpu"]["estimate_s"] - good["duration_s"]) < 1.0
    assert plan["manywheel_3.11_cpu"]["estimate_s"] != configured
    assert plan["manywheel_3.12_cpu"]["estimate_s"] == configured  # no success recorded
    assert Path(p.path / "nightlies" / "history.sqlite").exists()


# The demo wheel needs `depdemo` at run time (Requires-Dist, and imported by its module).
DEP_RECIPE = hand_wheel_recipe(
    version='os.environ["BUILD_VERSION"]',
    body='f"import depdemo\\n__version__ = {v!r}\\n"',
).replace('Version: {v}\\n",', 'Version: {v}\\nRequires-Dist: depdemo\\n",')


def _dependency_index(root: Path) -> None:
    """A PEP 503 index holding only depdemo 1.0 (a pure wheel), under root/simple/."""
    import zipfile

    folder = root / "simple" / "depdemo"
    folder.mkdir(parents=True)
    wheel = folder / "depdemo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("depdemo.py", "VALUE = 1\n")
        z.writestr("depdemo-1.0.dist-info/METADATA",
                   "Metadata-Version: 2.1\nName: depdemo\nVersion: 1.0\n")
        z.writestr("depdemo-1.0.dist-info/WHEEL",
                   "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr("depdemo-1.0.dist-info/RECORD", "")
    (folder / "index.html").write_text(f'<a href="{wheel.name}">{wheel.name}</a>\n')


def test_a_wheels_dependencies_come_from_the_configured_index_when_asked(
    night_project: Callable[..., Any], run_cli: Callable[..., tuple[int, str, str]],
    tmp_path: Path,
) -> None:
    """[smoke] dependencies = "none" (the default): the wheel alone, so its import fails for
    the missing dependency; "index": pip installs depdemo from [smoke] index_url over HTTP,
    the wheel itself from the day's packages, and the build succeeds tested."""
    from tests.support.servers import http_servers

    _dependency_index(tmp_path / "deps")
    one = MATRIX.replace('["3.11", "3.12"]', '["3.11"]')
    with http_servers() as serve:
        index = serve(tmp_path / "deps") + "simple/"
        alone = night_project(name="alone", matrix=one, recipes={"manywheel": DEP_RECIPE},
                              extra=EXTRA)
        code, out, err = run_cli(["run", "--config", str(alone.config), "--date", DATE],
                                 cwd=alone.path, timeout=300)
        assert code == 1, out + err
        entry = alone.state()["builds"]["manywheel_3.11_cpu"]
        assert entry["status"] == "failed"
        assert "No module named 'depdemo'" in entry["reason"], entry["reason"]
        log = (alone.day / "logs" / "failed" / "manywheel_3.11_cpu.log").read_text()
        assert re.search(r"^exit status: 0 \(the recipe's; the build failed after it", log, re.M)

        deps = night_project(
            name="deps", matrix=one, recipes={"manywheel": DEP_RECIPE},
            extra=EXTRA + f'dependencies = "index"\nindex_url = "{index}"\n')
        code, out, err = run_cli(["run", "--config", str(deps.config), "--date", DATE],
                                 cwd=deps.path, timeout=300)
        assert code == 0, out + err
        entry = deps.state()["builds"]["manywheel_3.11_cpu"]
        assert entry["status"] == "succeeded"
        assert entry["tested"]["result"] == "passed"
        log = (deps.day / "logs" / "succeeded" / "manywheel_3.11_cpu.log").read_text()
        assert f"installing the wheel and its dependencies from {index}" in log
        assert "smoke: passed" in log
        summary = json.loads((deps.day / "summary.json").read_text())
        assert summary["builds"]["manywheel_3.11_cpu"]["tested"] == "passed"
