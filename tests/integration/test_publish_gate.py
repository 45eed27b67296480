"""[publish] atomic: a failed build holds back the good packages of its folder (or night),
the summary and the report say why, and `nightly upload --force-partial` publishes them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.support.projects import DATE
from tests.support.wheels import GATE_RECIPE

RECIPE = GATE_RECIPE

MATRIX = """
[matrix.linux.manywheel]
pythons = ["3.11", "3.12"]
cudas = ["cpu", "cu126", "cu130"]
"""

EXTRA = """
[publish]
url = "mirror"
atomic = "folder"

[smoke]
enabled = false
"""


def test_a_failed_cuda_build_holds_back_its_folder_until_force_partial(
    night_project: Callable[..., Any], run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    p = night_project(matrix=MATRIX, recipes={"manywheel": RECIPE}, extra=EXTRA, queues=3)
    code, out, err = run_cli(["run", "--config", str(p.config), "--date", DATE], cwd=p.path)
    assert code == 1, out + err
    builds = p.state()["builds"]
    assert builds["manywheel_3.12_cu130"]["status"] == "failed"
    assert builds["manywheel_3.11_cu130"]["status"] == "succeeded"

    mirror = p.path / "mirror" / "whl" / "nightly"

    def wheels(cuda: str) -> list[str]:
        return sorted(f.name for f in (mirror / cuda).glob("*.whl"))

    # Nothing of cu130 is published; the other folders are, whole.
    assert wheels("cu130") == []
    assert not (mirror / "cu130" / "demo" / "index.html").exists()
    for cuda in ("cpu", "cu126"):
        assert [w.split("-")[2] for w in wheels(cuda)] == ["311", "312"], wheels(cuda)
    assert "published" not in builds["manywheel_3.11_cu130"]

    # The summary and the report say what was held back and why.
    held = p.summary()["held_back"]
    assert list(held) == ["manywheel_3.11_cu130"]
    assert "whl/nightly/cu130/" in held["manywheel_3.11_cu130"]
    assert "manywheel_3.12_cu130" in held["manywheel_3.11_cu130"]
    assert "atomic" in held["manywheel_3.11_cu130"]
    report = (p.day / "report.html").read_text()
    assert 'id="held-back"' in report
    assert "manywheel_3.11_cu130" in report
    assert "held back: manywheel_3.11_cu130" in (p.day / "logs/master/run.log").read_text()

    # A plain upload keeps holding it back; --force-partial publishes the rest.
    code, out, err = run_cli(["upload", "--config", str(p.config), "--date", DATE], cwd=p.path)
    assert code == 0, out + err
    assert wheels("cu130") == []
    code, out, err = run_cli(
        ["upload", "--force-partial", "--config", str(p.config), "--date", DATE], cwd=p.path
    )
    assert code == 0, out + err
    assert [w.split("-")[2] for w in wheels("cu130")] == ["311"]
    assert "-311-" in (mirror / "cu130" / "demo" / "index.html").read_text()
    assert p.summary()["held_back"] == {}
    assert p.state()["builds"]["manywheel_3.11_cu130"]["published"]
