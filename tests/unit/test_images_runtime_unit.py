"""The runtime image, the pure parts: its tags and what they cover, which image each test of
a build runs in (and the line its log gets), what the night checks for it, `runtime_image`
and `[smoke] image`. The real images and nights are tests/integration/test_images_runtime.py."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from nightly.builds.test.smoke import SmokeTester
from nightly.config import load
from nightly.core.matrix import Build
from nightly.core.spec import SpecError
from nightly.core.specparse import parse_spec
from nightly.errors import ConfigError
from nightly.executors.base import Job
from nightly.images import commands, runtime
from tests.support.executors import RecordingExecutor

CONFIG = """\
[project]
name = "demo"
source = "."
base_version = "1.0.0"

[matrix.linux.manywheel]
pythons = ["3.11"]
cudas = ["cpu", "13.0"]

[matrix.linux.libtorch]
variants = ["shared-with-deps"]
python = "3.11"
cudas = ["cpu"]

[images]
default = "@demo"

[builders.demo]
packages = ["libyaml-dev"]
cudas = ["cpu", "13.0"]
pythons = { "3.11" = "distro" }

[smoke]
import_name = "demo"

[[machines]]
name = "a"
platform = "linux"
queues = 1
executor = "container"
"""

WHEEL = Build(package="manywheel", python="3.11", cuda="cu130")
LIBTORCH = Build(package="libtorch", python="3.11", cuda="cpu", variant="shared-with-deps")


def _load(tmp_path: Path, text: str = CONFIG, **replace: str) -> Any:
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "nightly.toml"
    path.write_text(text)
    return load(path)


def test_one_runtime_image_per_builder_on_a_base_every_builder_of_the_suite_shares() -> None:
    demo = parse_spec("demo", {"repository": "rep", "packages": ["libyaml-dev"],
                               "pythons": {"3.11": "distro"}})
    other = parse_spec("other", {"repository": "rep", "packages": ["libzstd-dev"],
                                 "pythons": {"3.11": "distro"}})
    assert runtime.tag(demo) == f"rep:runtime-{runtime.image_hash(demo)}"
    assert runtime.base_tag(demo) == f"rep-base:bookworm-runtime-{runtime.base_hash(demo)}"
    # The base is the suite's minbase whatever the builder's packages ...
    assert runtime.base_hash(demo) == runtime.base_hash(other)
    trixie = parse_spec("t", {"suite": "trixie", "pythons": {"3.13": "distro"}})
    assert runtime.base_hash(trixie) != runtime.base_hash(demo)
    # ... the image follows the cpu layer it copies /opt/python from.
    assert runtime.image_hash(demo) != runtime.image_hash(other)
    # Its Dockerfile installs nothing: minbase + the cpu image's interpreters, checked.
    text = runtime.dockerfile(demo, {"org.nightly.role": "runtime"})
    assert text.splitlines()[:3] == [f"FROM {demo.tag_for('cpu')} AS builder",
                                     f"FROM {runtime.base_tag(demo)}",
                                     "COPY --from=builder /opt/python /opt/python"]
    assert "apt" not in text
    assert "runtime image has a compiler" in text


def test_a_base_image_builder_has_a_runtime_image_only_when_it_names_one() -> None:
    on_base = parse_spec("m", {"base_image": "quay.io/pypa/manylinux_2_28_x86_64"})
    assert runtime.tag(on_base) == ""
    named = parse_spec("m", {"base_image": "quay.io/pypa/manylinux_2_28_x86_64",
                             "runtime_image": "python:3.12-slim-bookworm"})
    assert runtime.tag(named) == "python:3.12-slim-bookworm"
    # Not part of any builder hash: naming a runtime image rebuilds nothing.
    assert named.tag_for("cpu") == on_base.tag_for("cpu")
    with pytest.raises(SpecError) as e:
        parse_spec("m", {"runtime_image": "@demo"})
    assert e.value.key == "builders.m.runtime_image"


def test_which_image_each_test_runs_in(tmp_path: Path) -> None:
    c = _load(tmp_path)
    spec = c.builders["demo"]
    build_image = spec.tag_for("cu130")
    image, note = runtime.smoke_image(c, WHEEL, build_image, "wheel")
    assert image == runtime.tag(spec)
    assert note.startswith(f"in image {image}, the runtime image of builder demo")
    # The GPU part too: CUDA wheels bundle their runtime, the driver comes from the host.
    assert runtime.smoke_image(c, WHEEL, build_image, "gputest")[0] == image
    # libtorch's test compiles a program: the build's image.
    assert runtime.smoke_image(c, LIBTORCH, "b:1", "libtorch")[0] == "b:1"
    # [smoke] image overrides; "@build" is the build's own.
    c2 = _load(tmp_path, **{'import_name = "demo"': 'import_name = "demo"\nimage = "site/test:1"'})
    assert runtime.smoke_image(c2, WHEEL, build_image, "wheel") == (
        "site/test:1", "in image site/test:1 ([smoke] image)")
    assert runtime.needed_by(c2, WHEEL) is None
    c3 = _load(tmp_path, **{'import_name = "demo"': 'import_name = "demo"\nimage = "@build"'})
    assert runtime.smoke_image(c3, WHEEL, build_image, "wheel")[0] == build_image
    # A literal [images] entry: no declared builder, the build's image.
    c4 = _load(tmp_path, **{'default = "@demo"': 'default = "site/builder:{cuda}"'})
    assert runtime.smoke_image(c4, WHEEL, "site/builder:cu130", "wheel")[0] == "site/builder:cu130"


def test_a_base_image_builder_without_a_runtime_image_warns_in_the_log(tmp_path: Path) -> None:
    c = _load(tmp_path, **{'packages = ["libyaml-dev"]': 'base_image = "site/manylinux:1"'})
    image, note = runtime.smoke_image(c, WHEEL, "b:cu130", "wheel")
    assert image == "b:cu130"
    assert note.startswith("WARNING: builder demo builds on base_image site/manylinux:1")
    assert "[builders.demo] runtime_image" in note
    assert not [n for n in commands.needed(c) if n.runtime]  # nothing to build or check


@pytest.mark.parametrize("image", ["@demo", "two words"])
def test_a_smoke_image_that_is_not_an_image_is_a_config_error(tmp_path: Path, image: str) -> None:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, **{'import_name = "demo"': f'import_name = "demo"\nimage = "{image}"'})
    assert e.value.key == "smoke.image"
    assert "@build" in str(e.value)


def test_the_night_checks_the_runtime_image_unless_tests_do_not_use_it(tmp_path: Path) -> None:
    c = _load(tmp_path)
    (tested,) = [n for n in commands.needed(c) if n.runtime]
    assert tested.tag == runtime.tag(c.builders["demo"])
    assert tested.builds == ["manywheel_3.11_cpu", "manywheel_3.11_cu130"]  # not libtorch
    assert tested.built_here
    off = _load(tmp_path, **{'import_name = "demo"': 'import_name = "demo"\nenabled = false'})
    assert not [n for n in commands.needed(off) if n.runtime]
    # A site's runtime_image is checked, never built.
    site = _load(tmp_path, **{'packages = ["libyaml-dev"]': 'runtime_image = "site/rt:1"'})
    (named,) = [n for n in commands.needed(site) if n.runtime]
    assert (named.tag, named.built_here) == ("site/rt:1", False)

    class NoImages:
        class images:
            @staticmethod
            def get(tag: str) -> Any:
                from docker.errors import ImageNotFound

                raise ImageNotFound(f"no {tag}")

    with pytest.raises(commands.ImagesMissing) as e:
        commands.preflight(site, list(site.builds), client=NoImages())  # type: ignore[arg-type]
    assert "site/rt:1 is builder demo's runtime_image: pull or load it" in str(e.value)


def test_the_smoke_test_runs_in_the_runtime_image_and_its_log_says_so(tmp_path: Path) -> None:
    c = _load(tmp_path)
    wheel = tmp_path / "demo-1.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_text("w")
    (tmp_path / "work").mkdir()
    build_image = c.builders["demo"].tag_for("cu130")
    job = Job(build_id=WHEEL.id, package="manywheel", python="3.11", cuda="cu130",
              env={"BUILD_VERSION": "1.0", "DESIRED_PYTHON": "3.11"},
              recipes_dir=tmp_path, source_dir=tmp_path, output_dir=tmp_path / "out",
              work_dir=tmp_path / "work", timeout_s=60, image=build_image)
    ex, out = RecordingExecutor("container"), bytearray()
    r = SmokeTester(c, ex, tmp_path)(WHEEL, [wheel], job, out.extend, threading.Event())
    assert r.ok
    (smoke_job,) = ex.jobs
    assert smoke_job.image == runtime.tag(c.builders["demo"])
    assert f"smoke: in image {smoke_job.image}, the runtime image of builder demo" in out.decode()


def test_a_workers_preflight_looks_for_the_image_its_tests_run_in(tmp_path: Path) -> None:
    # A cluster worker checks the image a build's tests need before building, so a worker
    # without the runtime image refuses the build instead of failing a good wheel's test.
    from nightly.builds.test.smoke import preflight_jobs

    c = _load(tmp_path)
    build_image = c.builders["demo"].tag_for("cu130")
    job = Job(build_id=WHEEL.id, package="manywheel", python="3.11", cuda="cu130", env={},
              recipes_dir=tmp_path, source_dir=tmp_path, output_dir=tmp_path / "out",
              work_dir=tmp_path / "work", timeout_s=60, image=build_image)
    own, tests = preflight_jobs(c, WHEEL, job)
    assert own is job
    assert (tests.image, tests.build_id) == (runtime.tag(c.builders["demo"]),
                                             f"{WHEEL.id} (its tests)")
    assert [j.image for j in preflight_jobs(c, WHEEL, job, "gputest")] == [build_image, tests.image]
    # Tests in the build's own image, a libtorch zip, a host build: nothing more to look for.
    at_build = _load(tmp_path, CONFIG.replace('import_name = "demo"',
                                              'import_name = "demo"\nimage = "@build"'))
    assert preflight_jobs(at_build, WHEEL, job) == [job]
    zip_job = Job(build_id=LIBTORCH.id, package="libtorch", python="3.11", cuda="cpu", env={},
                  recipes_dir=tmp_path, source_dir=tmp_path, output_dir=tmp_path / "out",
                  work_dir=tmp_path / "work", timeout_s=60, image=c.builders["demo"].tag_for("cpu"))
    assert preflight_jobs(c, LIBTORCH, zip_job) == [zip_job]
    host = Job(build_id=WHEEL.id, package="manywheel", python="3.11", cuda="cu130", env={},
               recipes_dir=tmp_path, source_dir=tmp_path, output_dir=tmp_path / "out",
               work_dir=tmp_path / "work", timeout_s=60)
    assert preflight_jobs(c, WHEEL, host) == [host]
