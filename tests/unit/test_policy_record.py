"""What a build was built under (policy, toolchain) and the rebuild of builds made under
another one (nightly.builds.rules.policy); untested builds never shown as plain succeeded
(nightly.workspace.cost); the fix a policy miss names (nightly.core.manylinux)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from nightly.builds.rules.policy import built_under, stale_builds
from nightly.builds.run.jobs import manylinux_env
from nightly.core import manylinux
from nightly.core.matrix import Build
from nightly.workspace import State
from nightly.workspace.cost import shown_status, verdict_of
from nightly.workspace.records import TestRecord
from nightly.workspace.state import BuildEntry
from tests.support.policy_config import load_config

CPU = Build(package="manywheel", python="3.11", cuda="cpu")
CUDA = Build(package="manywheel", python="3.11", cuda="11.8")


def _state(tmp_path: Path, **records: Mapping[str, object]) -> State:
    state = State(tmp_path / "state.json")
    for bid, record in records.items():
        state.update(bid, status="succeeded", manylinux=record)
    return state


def test_a_build_records_the_toolchain_it_was_built_with(tmp_path: Path) -> None:
    config = load_config(tmp_path, 'manylinux = "2_28"\ntoolchain = "zig"')
    assert manylinux_env(config, CPU, "container")["NIGHTLY_MANYLINUX_TOOLCHAIN"] == "zig"
    assert built_under(config, CPU, "container") == ("2_28", "zig")
    assert built_under(config, CUDA, "container") == ("2_28", "sysroot")  # nvcc's gcc


def test_a_policy_or_toolchain_change_rebuilds_what_was_built_under_the_old_one(
    tmp_path: Path,
) -> None:
    config = load_config(tmp_path, 'manylinux = "2_28"\ntoolchain = "zig"')
    state = _state(tmp_path, **{
        CPU.id: {"policy": "", "tags": ["linux_x86_64"]},
        CUDA.id: {"policy": "2_28", "toolchain": "sysroot", "tags": ["manylinux_2_28_x86_64"]},
    })
    stale = stale_builds(config, state, [CPU, CUDA], "container")
    assert stale == {CPU.id: "built under manylinux policy none, the configuration now "
                             "declares 2_28"}
    state.update(CPU.id, manylinux={"policy": "2_28", "toolchain": "sysroot", "tags": []})
    assert stale_builds(config, state, [CPU], "container") == {
        CPU.id: "built with toolchain sysroot, the configuration now chooses zig"}
    state.update(CPU.id, manylinux={"policy": "2_28", "toolchain": "zig", "tags": []})
    assert stale_builds(config, state, [CPU, CUDA], "container") == {}
    state.update(CPU.id, status="failed")  # a failed build is rebuilt anyway: not "stale"
    state.update(CPU.id, manylinux={"policy": "", "tags": []})
    assert stale_builds(config, state, [CPU], "container") == {}


def test_a_policy_miss_names_the_toolchain_that_meets_it(tmp_path: Path) -> None:
    wheel = tmp_path / "demo-1.0-cp311-cp311-manylinux_2_31_x86_64.whl"
    wheel.write_bytes(b"")
    v = manylinux.check_packages("manywheel", "2_28", [wheel], "glibc 2.31 sysroot (bullseye)")
    assert 'toolchain = "zig" (C/C++, not CUDA) reaches manylinux_2_17' in (v.reason or "")
    v = manylinux.check_packages("manywheel", "2_28", [wheel], "zig 0.17.1 (x86_64-linux-gnu.2.17)")
    assert "toolchain = " not in (v.reason or "")
    assert "the zig toolchain targets glibc 2.17" in (v.reason or "")


def test_untested_is_never_shown_as_plain_succeeded() -> None:
    passed = TestRecord.from_json({"result": "passed", "cpu": {"result": "passed"}})
    no_gpu = TestRecord.from_json({"result": "not run", "cpu": {"result": "passed"},
                                   "gpu": {"result": "not run"}})
    assert verdict_of(BuildEntry(status="succeeded", tested=passed)) == "passed"
    assert verdict_of(BuildEntry(status="succeeded")) == "untested"
    assert verdict_of(BuildEntry(status="succeeded", tested=no_gpu)) == "GPU test not run"
    assert shown_status("succeeded", "passed") == "succeeded"
    assert shown_status("succeeded", "untested") == "succeeded (untested)"
    assert shown_status("failed", "untested") == "failed"


def test_a_clusters_builds_are_judged_with_each_builds_executor(tmp_path: Path) -> None:
    """The builder declares 2_17, the matrix nothing: a container build made under 2_17 is
    current when judged as a container build, stale only if judged as a host build."""
    config = load_config(tmp_path, "", 'manylinux = "2_17"')
    state = _state(tmp_path, **{CPU.id: {"policy": "2_17", "toolchain": "sysroot", "tags": []}})
    assert stale_builds(config, state, [CPU], lambda b: "container") == {}
    assert CPU.id in stale_builds(config, state, [CPU], lambda b: "local")


def test_a_cuda_builds_policy_miss_names_the_builder_image_not_zig(tmp_path: Path) -> None:
    """A CUDA build in the engine's own image (the host's toolkit through cuda_mounts) that
    misses 2_28: zig builds no CUDA, the declared builder image's sysroot is the fix."""
    wheel = tmp_path / "demo-1.0+cu126-cp311-cp311-manylinux_2_35_x86_64.whl"
    wheel.write_bytes(b"")
    v = manylinux.check_packages("manywheel", "2_28", [wheel], "", cuda=True)
    assert "declared builder image" in (v.reason or "")
    assert "zig" not in (v.reason or "")
