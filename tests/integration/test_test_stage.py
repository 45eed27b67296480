"""The test stage: a CUDA build's GPU part runs where a GPU is ([[machines]] gpu = true), with
its own log section, and its result is the build's `tested` record; elsewhere it is recorded
"not run", a failure under [smoke] require_gpu."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.support.projects import DATE
from tests.support.wheels import GATE_RECIPE as RECIPE

MATRIX = """
[matrix.linux.manywheel]
pythons = ["3.11", "3.12"]
cudas = ["cu126"]
"""

# The GPU part records which machine ran it; the 3.12 build's GPU tests fail.
GPU_COMMAND = (
    'echo "$DESIRED_PYTHON" >> @SIG@/gpu-ran; '
    '[ "$DESIRED_PYTHON" != 3.12 ] || { echo "CUDA error: an illegal memory access (on purpose)"; exit 4; }'
)


def _project(night_project: Callable[..., Any], name: str, smoke: str, *, gpu: bool) -> Any:
    p = night_project(name=name, matrix=MATRIX, recipes={"manywheel": RECIPE},
                      extra=f'[publish]\nurl = "mirror"\n\n[smoke]\nimport_name = "demo"\n{smoke}')
    text = p.config.read_text().replace("@SIG@", str(p.signals))
    if gpu:
        text = text.replace('executor = "local"\n', 'executor = "local"\ngpu = true\n', 1)
    p.config.write_text(text)
    return p


def test_gpu_part_runs_on_a_gpu_machine_and_its_failure_holds_the_build_back(
    night_project: Callable[..., Any], run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    p = _project(night_project, "gpu", f"gpu_command = '{GPU_COMMAND}'\n", gpu=True)
    code, out, err = run_cli(["run", "--config", str(p.config), "--date", DATE], cwd=p.path)
    assert code == 1, out + err
    assert sorted((p.signals / "gpu-ran").read_text().split()) == ["3.11", "3.12"]
    builds = p.state()["builds"]
    good, bad = builds["manywheel_3.11_cu126"], builds["manywheel_3.12_cu126"]
    assert good["status"] == "succeeded"
    assert good["tested"]["result"] == "passed"
    assert good["tested"]["cpu"]["result"] == "passed"
    assert good["tested"]["gpu"]["result"] == "passed"
    assert good["tested"]["gpu"]["where"] == "m"
    assert good["tested"]["gpu"]["when"].startswith("20")
    assert bad["status"] == "failed"
    assert bad["reason"].startswith("GPU test: "), bad["reason"]
    assert bad["tested"]["result"] == "failed"
    assert bad["tested"]["cpu"]["result"] == "passed"
    assert bad["tested"]["gpu"]["result"] == "failed"
    log = (p.day / "logs/failed/manywheel_3.12_cu126.log").read_text()
    assert " GPU test " in log
    assert "an illegal memory access (on purpose)" in log
    published = sorted(f.name for f in (p.path / "mirror/whl/nightly/cu126").glob("*.whl"))
    assert [n.split("-")[2] for n in published] == ["311"]

    # Cost: build and test seconds apart, where each ran; m has a GPU, so its building counts.
    summary = p.summary()
    row = summary["builds"]["manywheel_3.11_cu126"]
    assert row["duration_s"] == good["duration_s"]
    assert row["test_s"] == good["tested"]["seconds"]
    assert row["test_s"] > 0
    assert row["built_on"] == "m"
    assert row["tested_on"] == "m"
    gpu = summary["gpu_host_s"]
    assert gpu["building"] == round(good["duration_s"] + bad["duration_s"], 3)
    gpu_parts = good["tested"]["gpu"]["seconds"] + bad["tested"]["gpu"]["seconds"]
    cpu_parts = good["tested"]["cpu"]["seconds"] + bad["tested"]["cpu"]["seconds"]
    assert abs(gpu["testing"] - (gpu_parts + cpu_parts)) < 0.01
    assert 'data-test-s="' in (p.day / "report.html").read_text()


def test_without_a_gpu_the_gpu_part_is_not_run_and_require_gpu_fails_it(
    night_project: Callable[..., Any], run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    p = _project(night_project, "nogpu", "gpu_check = 'import sys; sys.exit(9)'\n", gpu=False)
    code, out, err = run_cli(["run", "--config", str(p.config), "--date", DATE], cwd=p.path)
    assert code == 0, out + err
    assert p.summary()["gpu_host_s"] == {"building": 0.0, "testing": 0.0}
    for entry in p.state()["builds"].values():
        assert entry["status"] == "succeeded"
        assert entry["tested"]["result"] == "not run"
        assert entry["tested"]["gpu"]["result"] == "not run"
        assert entry["tested"]["cpu"]["result"] == "passed"

    strict = _project(night_project, "strict",
                      "gpu_check = 'import sys; sys.exit(9)'\nrequire_gpu = true\n", gpu=False)
    code, out, err = run_cli(["run", "--config", str(strict.config), "--date", DATE],
                             cwd=strict.path)
    assert code == 1, out + err
    for entry in strict.state()["builds"].values():
        assert entry["status"] == "failed"
        assert "require_gpu" in entry["reason"]
        assert entry["tested"]["gpu"]["result"] == "not run"
    assert not list((strict.path / "mirror").rglob("*.whl"))
