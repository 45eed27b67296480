"""A policy change invalidates what was built under the old one: the next run of the day
rebuilds those builds and says why, instead of "already succeeded"; the report's wall time is
the run's own."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tests.support.projects import DATE
from tests.support.wheels import hand_wheel_recipe

RECIPE = hand_wheel_recipe(version='os.environ["BUILD_VERSION"]', body='f"__version__ = {v!r}\\n"')
MATRIX = '\n[matrix.linux.manywheel]\npythons = ["3.11"]\ncudas = ["cpu"]\n'
EXTRA = '\n[publish]\nurl = "mirror"\n\n[smoke]\nimport_name = "demo"\n'


def test_a_changed_policy_rebuilds_the_days_succeeded_builds(
    night_project: Callable[..., Any], run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    p = night_project(matrix=MATRIX, recipes={"manywheel": RECIPE}, extra=EXTRA)
    args = ["run", "--config", str(p.config), "--date", DATE]
    code, out, err = run_cli(args, cwd=p.path, timeout=300)
    assert code == 0, out + err
    entry = p.state()["builds"]["manywheel_3.11_cpu"]
    assert entry["manylinux"]["policy"] == ""
    assert entry["attempts"] == 1

    code, out, err = run_cli(args, cwd=p.path, timeout=300)  # nothing changed: kept
    assert code == 0, out + err
    assert p.state()["builds"]["manywheel_3.11_cpu"]["attempts"] == 1
    assert "rebuilding" not in err

    text = p.config.read_text()
    p.config.write_text(text.replace('cudas = ["cpu"]\n', 'cudas = ["cpu"]\nmanylinux = "off"\n', 1))
    code, out, err = run_cli(args, cwd=p.path, timeout=300)
    assert code == 0, out + err
    said = ("rebuilding manywheel_3.11_cpu: built under manylinux policy none, the "
            "configuration now declares off")
    assert said in err
    assert said in (p.day / "logs" / "master" / "run.log").read_text()
    entry = p.state()["builds"]["manywheel_3.11_cpu"]
    assert entry["attempts"] == 2
    assert entry["manylinux"]["policy"] == "off"
    # The report is the run's: its wall time is this run's summary's, written after it.
    code, out, err = run_cli(["report", "--config", str(p.config), "--date", DATE], cwd=p.path)
    assert code == 0, err
    page = (p.day / "report.html").read_text()
    m = re.search(r'id="wall-time">([^<]+)<', page)
    assert m, "no wall time in the report"
