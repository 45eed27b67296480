"""The night's install lines (issue 57): a limited-API build's one wheel, built with 3.9 and
tested on five Pythons, said `(Python 3.9)`; a night of CPU and CUDA 13.0 wheels ended with
two install lines under the same heading."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from nightly.config import load
from nightly.report.install import install_lines, served
from nightly.workspace import Day, State

WHEEL = "lim-1.0.dev20260101-cp39-abi3-manylinux_2_28_x86_64.whl"


def _tested(*pythons: tuple[str, str]) -> dict[str, object]:
    return {"result": "passed", "seconds": 5.0,
            "pythons": [{"python": p, "result": r, "seconds": 1.0} for p, r in pythons]}


def _config(tmp_path: Path) -> Path:
    config_path = tmp_path / "nightly.toml"
    config_path.write_text(
        'root = "nightlies"\n[project]\nname = "lim"\nsource = "."\nbase_version = "1.0"\n'
        '[matrix.linux.manywheel]\npythons = ["3.9", "3.10", "3.11"]\ncudas = ["cpu"]\n'
        '[[machines]]\nname = "m"\nplatform = "linux"\nqueues = 1\n'
        f'[publish]\nurl = "{(tmp_path / "mirror").as_uri()}"\n')
    return config_path


def test_an_abi3_wheel_serves_each_python_it_passed_on(tmp_path: Path) -> None:
    config = load(_config(tmp_path))
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


def _entry(tmp_path: Path, wheel: str, cuda: str) -> dict[str, object]:
    dest = f"{(tmp_path / 'mirror').as_uri()}/whl/nightly/{cuda}/{wheel}"
    return {"status": "succeeded", "python": "3.11", "package": "manywheel", "cuda": cuda,
            "packages": [{"name": wheel, "path": f"packages/manywheel/{cuda}/{wheel}",
                          "size": 1, "sha256": "0" * 64}],
            "published": {dest: "0" * 64}}


def test_cpu_and_cuda_install_lines_have_headings_that_name_them(tmp_path: Path) -> None:
    config = load(_config(tmp_path))
    day = Day(tmp_path / "nightlies", dt.date(2026, 1, 1))
    day.path.mkdir(parents=True)
    (day.path / "state.json").write_text(json.dumps({"builds": {
        "manywheel_3.11_cpu": _entry(tmp_path, "lim-1.0-cp311-cp311-linux_x86_64.whl", "cpu"),
        "manywheel_3.11_cu130": _entry(
            tmp_path, "lim-1.0+cu130-cp311-cp311-linux_x86_64.whl", "cu130"),
    }, "meta": {}}))
    lines = install_lines(config, day, State(day.path / "state.json"), "1.0.dev20260101")
    headings = [line for line in lines if line.startswith("install tonight's")]
    assert headings == ["install tonight's lim 1.0.dev20260101 for CPU (Python 3.11):",
                        "install tonight's lim 1.0.dev20260101 for CUDA 13.0 (Python 3.11):"]
