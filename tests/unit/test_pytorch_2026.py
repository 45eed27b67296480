"""configs/pytorch-2026.toml against PyTorch's own list of its 2026 nightly builds.

tests/data/pytorch-2026-matrix.json is what pytorch/test-infra's
generate_binary_build_matrix.py (commit 61a7757) printed for Linux x86_64, Linux aarch64,
macOS arm64 and Windows x86_64, wheels and libtorch (scripts/pytorch_matrix.py regenerates it
from a generator path). The config's builds must match it one to one: each build's label is a
PyTorch build name of its platform, with the same Python, accelerator (desired_cuda),
architecture, libtorch variant, container image (Linux and macOS; Windows builds run on the
host) and libtorch zip; and the plan routes every build to a machine of its platform,
architecture and accelerator.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from nightly.config import Config, load
from nightly.core.axes import libtorch_zip
from nightly.core.matrix import Build
from nightly.plan.schedule import make_plan

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "pytorch-2026.toml"
DATA = REPO / "tests" / "data" / "pytorch-2026-matrix.json"


@pytest.fixture(scope="module")
def config() -> Config:
    return load(CONFIG)


@pytest.fixture(scope="module")
def reference() -> list[dict[str, Any]]:
    return list(json.loads(DATA.read_text(encoding="utf-8"))["builds"])


def _python(text: str) -> str:
    """The generator pins macOS point versions (3.10.19); the matrix spells X.Y[t]."""
    m = re.match(r"^(\d+\.\d+)(?:\.\d+)?(t?)$", text)
    assert m, text
    return m.group(1) + m.group(2)


def _key(platform: str, name: str) -> tuple[str, str]:
    return platform, name


def test_the_reference_is_pytorchs_164(reference: list[dict[str, Any]]) -> None:
    counts = Counter((r["os"], r["package_type"]) for r in reference)
    assert counts == {("linux", "manywheel"): 64, ("linux-aarch64", "wheel"): 40,
                      ("linux", "libtorch"): 7, ("macos-arm64", "wheel"): 8,
                      ("macos-arm64", "libtorch"): 1, ("windows", "wheel"): 40,
                      ("windows", "libtorch"): 4}
    # Names are unique per platform (macOS's libtorch shares Linux's cpu name, Windows's
    # wheels macOS's names).
    assert len({_key(r["platform"], r["name"]) for r in reference}) == 164


def test_the_config_builds_pytorchs_matrix_one_to_one(
    config: Config, reference: list[dict[str, Any]]
) -> None:
    ours: dict[tuple[str, str], Build] = {}
    for b in config.builds:
        key = _key(b.platform, b.label)
        assert key not in ours, f"two builds labelled {key}: {ours[key].id}, {b.id}"
        ours[key] = b
    theirs = {_key(r["platform"], r["name"]): r for r in reference}
    assert sorted(set(ours) - set(theirs)) == []  # nothing PyTorch does not build
    assert sorted(set(theirs) - set(ours)) == []  # nothing missing
    for key, r in theirs.items():
        b = ours[key]
        got = {"python": b.python if b.package != "libtorch" else "",
               "desired_cuda": b.accelerator, "arch": b.target_arch,
               "libtorch_variant": b.variant,
               "image": config.image_for(b) if b.platform != "windows" else "",
               "zip": libtorch_zip(variant=b.variant, platform=b.platform,
                                   arch=b.target_arch, version="latest")
               if b.package == "libtorch" else ""}
        want = {"python": _python(r["python"]) if r["python"] else "",
                "desired_cuda": r["desired_cuda"], "arch": r["arch"],
                "libtorch_variant": r["libtorch_variant"],
                "image": r["image"] if b.platform != "windows" else "", "zip": r["zip"]}
        assert got == want, (b.id, key)
    assert len(ours) == len(theirs) == 164
    assert sum(b.platform == "windows" for b in ours.values()) == 44


def test_every_build_is_routed_to_a_machine_that_can_build_it(config: Config) -> None:
    plan = make_plan(config)
    machines = {m.name: m for m in config.machines}
    placed = {pb.build.id: pb.machine for pb in plan.builds}
    assert sorted(placed) == sorted(b.id for b in config.builds)
    for pb in plan.builds:
        m = machines[pb.machine]
        assert m.can_build(pb.build), (pb.build.id, m.describe())
        assert pb.build.target_arch in m.arch_list
    # Each kind of machine got work of its own kind only.
    families = {name: {pb.build.family for pb in plan.builds if pb.machine == name}
                for name in machines}
    assert families["x86-rocm-0"] == {"rocm"}
    assert families["x86-xpu-0"] == {"xpu"}
    assert {pb.build.target_arch for pb in plan.builds if pb.machine.startswith("arm64")} == {
        "aarch64"}
    # Windows builds on Windows machines only, and those build nothing else.
    assert {pb.build.platform for pb in plan.builds if pb.machine.startswith("win-")} == {
        "windows"}
    assert {pb.machine for pb in plan.builds if pb.build.platform == "windows"} == {
        "win-cuda-0", "win-cuda-1", "win-xpu-0"}
    assert families["win-xpu-0"] == {"xpu"}
    assert families["win-cuda-0"] | families["win-cuda-1"] == {"cpu", "cuda"}


def test_the_plan_is_within_5_percent_of_its_bound(config: Config) -> None:
    plan = make_plan(config)
    assert len(plan.builds) == 164
    assert plan.makespan_s <= 1.05 * plan.lower_bound_s
