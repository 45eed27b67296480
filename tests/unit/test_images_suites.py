"""Builder specs beyond bookworm and CUDA: sid's Python 3.14 (`distro`), the host compiler
nvcc takes on a suite whose gcc is newer than it accepts, ROCm images (`rocms`), and what the
runtime image needs for them; the configurations that declare them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nightly.config import load
from nightly.core.spec import SpecError
from nightly.core.specparse import parse_spec
from nightly.images import commands, rocm, runtime

REPO = Path(__file__).resolve().parents[2]

SID: dict[str, Any] = {
    "suite": "sid", "packages": ["python3-dev"], "compilers": ["gcc", "g++", "gcc-14", "g++-14"],
    "cudas": ["cpu", "13.0"], "manylinux": "2_28", "pythons": {"3.14": "distro"},
}
ROCM: dict[str, Any] = {"suite": "trixie", "rocms": ["5.7"], "pythons": {"3.13": "distro"},
                        "manylinux": "2_28"}


def test_sid_gives_python_3_14_as_its_distro_interpreter() -> None:
    spec = parse_spec("py314", SID)
    (p,) = spec.pythons
    assert (p.version, p.kind, p.dest) == ("3.14", "distro", "/opt/python/cp314-cp314")
    assert p.describe_in(spec.suite) == "distro:sid/python3.14"
    assert spec.other_distro_pythons == ()  # sid's python3 is 3.14: nothing more to install
    assert spec.manylinux_tag() == "manylinux_2_31_x86_64"  # the sysroot, not sid's 2.43
    assert spec.manylinux_tag(arch="aarch64") == "manylinux_2_31_aarch64"
    # Another Python sid packages comes with its -dev and -venv, and in the runtime image.
    both = parse_spec("py", {**SID, "pythons": {"3.13": "distro", "3.14": "distro"}})
    assert {"python3.13", "python3.13-dev", "python3.13-venv"} <= set(both.base_packages)
    assert both.runtime_debs == ("python3.13", "python3.13-venv")
    assert runtime.base_hash(both) != runtime.base_hash(spec)
    with pytest.raises(SpecError, match=r"trixie.s python3 is 3\.13") as e:
        parse_spec("x", {**SID, "suite": "trixie"})
    assert 'suite = "sid"' in str(e.value.hint)


def test_sid_gives_python_3_15_beside_its_python3() -> None:
    spec = parse_spec("py315", {**SID, "pythons": {"3.15": "distro"}})
    (p,) = spec.pythons
    assert (p.version, p.kind, p.dest) == ("3.15", "distro", "/opt/python/cp315-cp315")
    assert p.describe_in(spec.suite) == "distro:sid/python3.15"
    assert spec.other_distro_pythons == ("3.15",)
    assert {"python3.15", "python3.15-dev", "python3.15-venv"} <= set(spec.base_packages)
    assert spec.runtime_debs == ("python3.15", "python3.15-venv")
    with pytest.raises(SpecError, match=r"trixie.s python3 is 3\.13") as e:
        parse_spec("x", {**SID, "suite": "trixie", "pythons": {"3.15": "distro"}})
    assert "3.15 are packaged by sid" in str(e.value.hint)
    # The shipped demo config declares it so.
    config = load(REPO / "configs" / "demo-py315.toml")
    assert [b.id for b in config.builds] == ["manywheel_3.15_cpu", "manywheel_3.15_cu130"]
    assert config.builders["py315"].pythons == (p,)


def test_nvcc_gets_the_newest_declared_gcc_it_accepts() -> None:
    sid = parse_spec("py314", SID)
    assert sid.host_gcc_for("cu130") == "14"  # sid's gcc is 16; CUDA 13 takes <= 15
    assert sid.host_gcc_for("cpu") is None
    bookworm = parse_spec("b", {"compilers": ["gcc-11", "g++-11"], "cudas": ["11.8", "13.0"]})
    assert (bookworm.host_gcc_for("cu118"), bookworm.host_gcc_for("cu130")) == ("11", None)
    with pytest.raises(SpecError, match="needs gcc 15") as e:
        parse_spec("x", {**SID, "compilers": ["gcc", "g++"]})
    assert e.value.key == "builders.x.compilers"


def test_rocm_images_are_declared_hashed_and_tested_with_the_hip_runtime() -> None:
    spec = parse_spec("rocm", ROCM)
    assert spec.accelerators == ("cpu", "rocm5.7")
    assert {"hipcc", "libamdhip64-dev", "rocm-device-libs-17"} <= set(spec.base_packages)
    assert spec.runtime_debs == ("libamdhip64-5",)
    tag = spec.tag_for("rocm5.7")
    assert tag.startswith("nightly-rocm:rocm5.7-")
    other = parse_spec("rocm", {**ROCM, "rocm_targets": ["gfx942"]})
    assert other.tag_for("rocm5.7") != tag
    assert other.cpu_tag() == spec.cpu_tag()
    env = rocm.image_env(spec, "5.7")
    assert env["PYTORCH_ROCM_ARCH"] == "gfx90a;gfx1100"
    assert env["ROCM_VERSION"] == "5.7"
    with pytest.raises(SpecError, match=r"no rocm6\.4 image") as e:
        spec.tag_for("rocm6.4")
    assert e.value.key == "builders.rocm.rocms"
    # A CUDA-only builder's tags are what they were (no ROCm in its hashes).
    assert "rocm" not in str(parse_spec("b", {}).base_packages)


@pytest.mark.parametrize(("changes", "key", "words"), [
    ({"rocms": ["6.2"]}, "builders.r.rocms", "cannot be had"),
    ({"suite": "bookworm", "pythons": {}}, "builders.r.suite", "trixie"),
    ({"rocm_targets": ["sm_90"]}, "builders.r.rocm_targets", "not an AMD GPU target"),
])
def test_bad_rocm_specs_name_the_key(changes: dict[str, Any], key: str, words: str) -> None:
    with pytest.raises(SpecError, match=words) as e:
        parse_spec("r", {**ROCM, **changes})
    assert e.value.key == key


def test_the_configs_declare_their_images() -> None:
    py314 = load(REPO / "configs" / "demo-py314.toml")
    tags = [n.tag for n in commands.needed(py314)]
    spec = py314.builders["py314"]
    assert tags == [spec.tag_for("cpu"), runtime.tag(spec), spec.tag_for("cu130")]
    beyond = load(REPO / "configs" / "demo-beyond-cuda.toml")
    rocm_spec = beyond.builders["rocm"]
    wanted = {n.tag: n for n in commands.needed(beyond)}
    assert rocm_spec.tag_for("rocm5.7") in wanted  # declared, built by `images build`
    assert runtime.tag(rocm_spec) in wanted
    only = commands.needed(beyond, cudas=commands.parse_cudas("rocm5.7"))
    assert [n.tag for n in only] == [rocm_spec.tag_for("rocm5.7"), runtime.tag(rocm_spec)]
