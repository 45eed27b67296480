"""Smoke tests, the pure parts: the version a wheel must carry, conda package names, the
libtorch zip check, and what SmokeTester hands its executor (a fake that records the job) or
its conda client (injected: a fake). The real smoke tests are in tests/integration."""

from __future__ import annotations

import threading
import zipfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from nightly import config as cfg
from nightly.builds.run.jobs import package_version
from nightly.builds.test.smoke import SCRIPTS, SmokeTester, _check_zip_layout, _conda_name
from nightly.core.matrix import Build
from nightly.executors.base import ExecResult, Executor, Job, OutputSink

CPU = Build(package="manywheel", python="3.7m", cuda="cpu")
CUDA = Build(package="manywheel", python="3.7m", cuda="cu100")


def test_cuda_packages_carry_a_local_version_tag_decided_once() -> None:
    """PACKAGE_VERSION (jobs.package_version): the one place the +cuXYZ rule is written."""
    v = "1.0.0.dev20240501"
    assert package_version(CUDA, v, "env") == f"{v}+cu100"
    assert package_version(CPU, v, "env") == v
    assert package_version(CUDA, "1.0.0+cu100", "env") == "1.0.0+cu100"  # already tagged
    assert package_version(CUDA, v, "keep") == v  # the project keeps its own version
    conda = Build(package="conda", python="3.7", cuda="cu100")
    assert package_version(conda, "1.0.0", "env") == "1.0.0"
    libtorch = Build(package="libtorch", python="3", cuda="cu100", variant="shared-with-deps")
    assert package_version(libtorch, v, "rewrite") == f"{v}+cu100"


@pytest.mark.parametrize(("file", "name"), [
    ("pytorch-nightly-1.0.0.dev20190131-py3.7_cuda10.0.130_cudnn7.4.1_0.tar.bz2", "pytorch-nightly"),
    ("demo-1.0-py_0.conda", "demo"),
])
def test_conda_package_names(file: str, name: str) -> None:
    assert _conda_name(Path(file)) == name


def _zip(path: Path, names: Sequence[str]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for n in names:
            z.writestr(n, "x")
    return path


def test_libtorch_zips_need_include_and_lib(tmp_path: Path) -> None:
    out: list[bytes] = []
    good = _zip(tmp_path / "good.zip", ["libtorch/include/a.h", "libtorch/lib/liba.so"])
    assert _check_zip_layout([good], out.append).ok
    bad = _zip(tmp_path / "bad.zip", ["libtorch/include/a.h"])
    r = _check_zip_layout([bad], out.append)
    assert not r.ok
    assert r.reason == "smoke test: bad.zip lacks include/ or lib/"
    (tmp_path / "junk.zip").write_text("not a zip")
    assert "is not a zip" in (_check_zip_layout([tmp_path / "junk.zip"], out.append).reason or "")


class RecordingExecutor(Executor):
    name = "fake"

    def __init__(self, exit_status: int = 0) -> None:
        self.jobs: list[Job] = []
        self.exit_status = exit_status

    def describe(self, job: Job) -> dict[str, object]:
        return {}

    def run(self, job: Job, out: OutputSink, cancel: threading.Event) -> ExecResult:
        self.jobs.append(job)
        assert (job.source_dir / "demo-1.0-py3-none-any.whl").exists()  # the copy to test
        return ExecResult(exit_status=self.exit_status)


@pytest.fixture
def config(tmp_path: Path, minimal_config_text: str) -> cfg.Config:
    path = tmp_path / "nightly.toml"
    path.write_text(minimal_config_text + '\n[smoke]\nenabled = true\nimport_name = "demo"\n')
    return cfg.load(path)


def _job(tmp_path: Path, build: Build) -> Job:
    (tmp_path / "work" / "scratch").mkdir(parents=True, exist_ok=True)
    return Job(build_id=build.id, package=build.package, python=build.python, cuda=build.cuda,
               env={"BUILD_VERSION": "1.0", "PACKAGE_VERSION": package_version(build, "1.0", "env"),
                    "DESIRED_PYTHON": build.python},
               recipes_dir=tmp_path / "recipes", source_dir=tmp_path / "src",
               output_dir=tmp_path / "work" / "out", work_dir=tmp_path / "work" / "scratch",
               timeout_s=60, image="builder:1")


def test_a_wheel_is_tested_by_the_smoke_script_through_the_builds_executor(
    tmp_path: Path, config: cfg.Config
) -> None:
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    wheel.write_text("w")
    ex = RecordingExecutor()
    out: list[bytes] = []
    r = SmokeTester(config, ex, tmp_path)(CUDA, [wheel], _job(tmp_path, CUDA), out.append,
                                          threading.Event())
    assert r.ok
    (job,) = ex.jobs
    assert (job.package, job.recipes_dir) == ("wheel", SCRIPTS)
    assert job.recipe == SCRIPTS / "wheel" / "build.sh"
    assert job.env["SMOKE_IMPORT"] == "demo"
    assert job.env["EXPECT_VERSION"] == "1.0+cu100"
    assert job.timeout_s == config.smoke.timeout_s
    assert job.image == "builder:1"  # no smoke.image: the build's own
    assert b" smoke test " in b"".join(out)


def test_a_failing_smoke_script_fails_the_build_with_a_reason(
    tmp_path: Path, config: cfg.Config
) -> None:
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    wheel.write_text("w")
    r = SmokeTester(config, RecordingExecutor(exit_status=1), tmp_path)(
        CPU, [wheel], _job(tmp_path, CPU), lambda _: None, threading.Event())
    assert not r.ok
    assert r.reason == "smoke test: exit status 1"


class FakeConda:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[tuple[str, object]] = []

    def publish_to_channel(self, channel: Path, files: Sequence[Path]) -> list[str]:
        self.calls.append(("publish", [f.name for f in files]))
        return []

    def install_from_channel(self, channel: Path, spec: str, prefix: Path) -> list[str]:
        self.calls.append(("install", spec))
        if self.fail:
            raise RuntimeError("solver: nothing provides demo")
        (prefix / "bin").mkdir(parents=True)  # no site-packages: a package without Python
        return [f"{spec}-1.0"]


def test_conda_packages_go_through_the_injected_client(tmp_path: Path, config: cfg.Config) -> None:
    pkg = tmp_path / "demo-1.0-py_0.conda"
    pkg.write_text("c")
    build = Build(package="conda", python="3.7", cuda="cpu")
    client = FakeConda()
    ok = SmokeTester(config, RecordingExecutor(), tmp_path, conda=client)(
        build, [pkg], _job(tmp_path, build), lambda _: None, threading.Event())
    assert ok.ok
    assert client.calls == [("publish", ["demo-1.0-py_0.conda"]), ("install", "demo")]
    failing = SmokeTester(config, RecordingExecutor(), tmp_path, conda=FakeConda(fail=True))(
        build, [pkg], _job(tmp_path, build), lambda _: None, threading.Event())
    assert not failing.ok
    assert "conda install failed: solver: nothing provides demo" in (failing.reason or "")


def test_without_a_conda_client_a_conda_package_fails_clearly(
    tmp_path: Path, config: cfg.Config
) -> None:
    pkg = tmp_path / "demo-1.0-py_0.conda"
    pkg.write_text("c")
    build = Build(package="conda", python="3.7", cuda="cpu")
    r = SmokeTester(replace(config), RecordingExecutor(), tmp_path)(
        build, [pkg], _job(tmp_path, build), lambda _: None, threading.Event())
    assert not r.ok
    assert "no conda client" in (r.reason or "")
