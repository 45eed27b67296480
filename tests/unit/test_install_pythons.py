"""The night's install line names the Pythons a wheel serves (issue 57): a limited-API
build's one wheel, built with 3.9 and tested on five Pythons, said `(Python 3.9)`."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from nightly.config import load
from nightly.report.install import served
from nightly.workspace import Day, State

WHEEL = "lim-1.0.dev20260101-cp39-abi3-manylinux_2_28_x86_64.whl"


def _tested(*pythons: tuple[str, str]) -> dict[str, object]:
    return {"result": "passed", "seconds": 5.0,
            "pythons": [{"python": p, "result": r, "seconds": 1.0} for p, r in pythons]}


def test_an_abi3_wheel_serves_each_python_it_passed_on(tmp_path: Path) -> None:
    config_path = tmp_path / "nightly.toml"
    config_path.write_text(
        'root = "nightlies"\n[project]\nname = "lim"\nsource = "."\nbase_version = "1.0"\n'
        '[matrix.linux.manywheel]\npythons = ["3.9", "3.10", "3.11"]\ncudas = ["cpu"]\n'
        '[[machines]]\nname = "m"\nplatform = "linux"\nqueues = 1\n'
        f'[publish]\nurl = "{(tmp_path / "mirror").as_uri()}"\n')
    config = load(config_path)
    day = Day(tmp_path / "nightlies", dt.date(2026, 1, 1))
    day.path.mkdir(parents=True)
    dest = f"{(tmp_path / 'mirror').as_uri()}/whl/nightly/cpu/{WHEEL}"
    (day.path / "state.json").write_text(json.dumps({"builds": {"manywheel_3.9_cpu": {
        "status": "succeeded", "python": "3.9", "package": "manywheel", "cuda": "cpu",
        "packages": [{"name": WHEEL, "path": f"packages/manywheel/cpu/{WHEEL}", "size": 1,
                      "sha256": "0" * 64}],
        "published": {dest: "0" * 64},
        "tested": _tested(("3.9", "passed"), ("3.10", "passed"), ("3.11", "failed")),
    }}, "meta": {}}))
    (group,) = served(config, day, State(day.path / "state.json"))
    assert group.pythons == ("3.9", "3.10")  # not 3.11: its test failed
