"""What a build was built under (policy, toolchain) and the rebuild of builds made under
another one (nightly.builds.rules.policy); untested builds never shown as plain succeeded
(nightly.workspace.cost); the fix a policy miss names (nightly.core.manylinux)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

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


def test_a_builder_images_own_compilers_are_recorded_as_image_and_shown_so(
    tmp_path: Path,
) -> None:
    """init's Fortran configuration (issue 57): a bullseye builder under policy 2_31, whose
    gcc and gfortran meet it, so its image has no sysroot or zig wrapper. Its builds record
    toolchain "image" (they recorded "sysroot", a toolchain they never used), and state.json,
    `nightly status` and report.html show the same; a day recorded before is rebuilt once."""
    import datetime as dt
    import json

    from rich.console import Console

    from nightly.builds.run.collect import check_policy
    from nightly.config import load
    from nightly.report import html as report
    from nightly.report import status as status_view
    from nightly.workspace import Day
    from tests.support.policy_config import text

    (tmp_path / "nightly.toml").write_text(  # bullseye's own python3, as init declares it
        text('manylinux = "2_31"', 'suite = "bullseye"').replace('"3.11"', '"3.9"'))
    config = load(tmp_path / "nightly.toml")
    own = Build(package="manywheel", python="3.9", cuda="cpu")
    (spec,) = config.builders.values()
    assert spec.toolchain == "system"  # the image's own compilers
    env = manylinux_env(config, own, "container")
    assert env["NIGHTLY_MANYLINUX_TOOLCHAIN"] == "image"
    assert built_under(config, own, "container") == ("2_31", "image")
    assert built_under(config, own, "local") == ("2_31", "sysroot")  # a host build: a wrapper

    day = Day(tmp_path / "root", dt.date(2024, 5, 1))
    day.create()
    state = State(day.state_path)
    wheel = tmp_path / "demo-1.0-cp39-cp39-manylinux_2_31_x86_64.whl"
    wheel.write_bytes(b"")
    assert check_policy(state, own, env, [wheel]).reason is None
    state.update(own.id, status="succeeded", attempts=1, started=1.0, ended=2.0)
    shown = "policy 2_31: manylinux_2_31, toolchain image"
    saved = json.loads(day.state_path.read_text())["builds"][own.id]["manylinux"]
    assert saved["toolchain"] == "image"
    console = Console(record=True, width=220, color_system=None)
    status_view.show(day, console=console)
    assert shown in console.export_text()
    assert f'data-manylinux="{shown}"' in report.render_html(day, None)
    assert stale_builds(config, state, [own], "container") == {}

    state.update(own.id, manylinux={**saved, "toolchain": "sysroot"})  # an older nightly's
    assert stale_builds(config, state, [own], "container") == {
        own.id: "built with toolchain sysroot, the configuration now chooses image"}


def test_a_host_build_whose_machine_meets_the_policy_records_host_and_stays_current(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a machine whose glibc is no newer than the policy the host's own compilers build
    (no wrapper): recorded "host", and no later choice of toolchain makes that build stale."""
    from nightly.images import sysroot

    config = load_config(tmp_path, 'manylinux = "2_28"\ntoolchain = "zig"')
    monkeypatch.setattr(sysroot, "host_glibc", lambda: (2, 28))
    assert manylinux_env(config, CPU, "local")["NIGHTLY_MANYLINUX_TOOLCHAIN"] == "host"
    state = _state(tmp_path, **{CPU.id: {"policy": "2_28", "toolchain": "host", "tags": []}})
    assert stale_builds(config, state, [CPU], "local") == {}
