"""Smoke tests hold broken packages back from upload; the history feeds the next plan."""

from __future__ import annotations

import json
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
