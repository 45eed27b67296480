"""The 2026 axes: architectures, accelerator families, Python ABIs and PyTorch's names, on
Build and in the spellings; 2019's identifiers unchanged."""

from __future__ import annotations

import pytest

from nightly.core import axes
from nightly.core.matrix import (
    Build,
    PackageMatrix,
    SpellingError,
    normalize_accelerator,
    normalize_arch,
    normalize_python,
    parse_spec,
    select,
)


@pytest.mark.parametrize(
    ("build", "ident"),
    [
        (Build(package="manywheel", python="3.6m", cuda="cu90"), "manywheel_3.6m_cu90"),
        (Build(package="conda", python="3.7", cuda="cu100"), "conda_3.7_cu100"),
        (Build(package="wheel", python="3.7", cuda="cpu", platform="macos"), "wheel_3.7_cpu"),
        (Build(package="libtorch", python="3", cuda="cu100", variant="shared-with-deps"),
         "libtorch_shared-with-deps_cu100"),
        (Build(package="conda", python="3.7", cuda="cpu", platform="macos"),
         "conda_3.7_cpu_macos"),
        (Build(package="manywheel", python="3.12", cuda="cpu", arch="aarch64"),
         "manywheel_3.12_cpu_aarch64"),
        (Build(package="manywheel", python="3.14t", cuda="rocm7.2"), "manywheel_3.14t_rocm7.2"),
        (Build(package="wheel", python="3.12", cuda="cpu", platform="macos", arch="x86_64"),
         "wheel_3.12_cpu_x86_64"),
        (Build(package="libtorch", python="3", cuda="cpu", variant="all", platform="macos",
               arch="x86_64"), "libtorch_all_cpu_x86_64_macos"),
    ],
)
def test_ids_name_the_architecture_only_when_not_the_default(build: Build, ident: str) -> None:
    assert build.id == ident


def test_the_default_architecture_is_the_platforms() -> None:
    assert Build(package="manywheel", python="3.12", cuda="cpu").target_arch == "x86_64"
    assert Build(package="wheel", python="3.12", cuda="cpu", platform="macos").target_arch == "arm64"
    # Expansion writes "" for the default, so a build spelt either way is the same build.
    m = PackageMatrix(package="manywheel", platform="linux", pythons=("3.12",), cudas=("cpu",),
                      archs=("x86_64", "aarch64"))
    assert [b.id for b in m.expand()] == ["manywheel_3.12_cpu", "manywheel_3.12_cpu_aarch64"]
    assert m.expand()[0] == Build(package="manywheel", python="3.12", cuda="cpu")


@pytest.mark.parametrize(
    ("text", "want"),
    [("cpu", "cpu"), ("cu126", "cu126"), ("12.6", "cu126"), ("xpu", "xpu"), ("XPU", "xpu"),
     ("rocm7.2", "rocm7.2"), ("ROCm7.14", "rocm7.14"), ("rocm 6.4", "rocm6.4")],
)
def test_accelerator_spellings(text: str, want: str) -> None:
    assert normalize_accelerator(text) == want


@pytest.mark.parametrize("text", ["rocm7", "rocm", "rocm7.2.1", "gpu", "cuda", "npu"])
def test_bad_accelerators_say_how_to_write_one(text: str) -> None:
    with pytest.raises(SpellingError, match="rocm"):
        normalize_accelerator(text)


@pytest.mark.parametrize(
    ("acc", "family", "suffix", "tag"),
    [("cpu", "cpu", "", "cpu"), ("cu130", "cuda", "+cu130", "cuda13.0"),
     ("cu80", "cuda", "+cu80", "cuda8.0"), ("rocm7.2", "rocm", "+rocm7.2", "rocm7.2"),
     ("xpu", "xpu", "+xpu", "xpu")],
)
def test_families_suffixes_and_image_tags(acc: str, family: str, suffix: str, tag: str) -> None:
    b = Build(package="manywheel", python="3.12", cuda=acc)
    assert (b.family, b.local_suffix, axes.image_tag(acc)) == (family, suffix, tag)
    assert b.is_cuda == (family == "cuda")
    assert b.cuda_version == ("" if family != "cuda" else tag[4:])


@pytest.mark.parametrize(
    ("text", "platform", "want"),
    [("x86_64", "linux", "x86_64"), ("amd64", "linux", "x86_64"), ("arm64", "linux", "aarch64"),
     ("aarch64", "macos", "arm64"), ("ARM64", "macos", "arm64")],
)
def test_architecture_spellings(text: str, platform: str, want: str) -> None:
    assert normalize_arch(text, platform) == want


def test_an_unknown_architecture_names_the_platforms() -> None:
    with pytest.raises(SpellingError, match="x86_64 or aarch64"):
        normalize_arch("riscv64", "linux")


@pytest.mark.parametrize(
    ("python", "abi", "path"),
    [("3.14t", "cp314t", "/opt/python/cp314-cp314t/bin/python"),
     ("3.15t", "cp315t", "/opt/python/cp315-cp315t/bin/python"),
     ("3.14", "cp314", "/opt/python/cp314-cp314/bin/python"),
     ("3.6m", "cp36m", "/opt/python/cp36-cp36m/bin/python"),
     ("2.7mu", "cp27mu", "/opt/python/cp27-cp27mu/bin/python")],
)
def test_python_abis_and_their_interpreters(python: str, abi: str, path: str) -> None:
    assert normalize_python(python) == python
    assert axes.python_abi(python) == abi
    assert axes.manylinux_interpreter(python) == path
    assert Build(package="manywheel", python=python, cuda="cpu").python_abi == abi


@pytest.mark.parametrize("python", ["3.12t", "2.7t", "3.9t"])
def test_free_threading_before_313_is_refused(python: str) -> None:
    with pytest.raises(SpellingError, match=r"free-threaded CPython exists from 3\.13"):
        normalize_python(python)


@pytest.mark.parametrize(
    ("build", "label"),
    [
        (Build(package="manywheel", python="3.14t", cuda="rocm7.2"), "manywheel-py3_14t-rocm7_2"),
        (Build(package="manywheel", python="3.10", cuda="cu126"), "manywheel-py3_10-cuda12_6"),
        (Build(package="manywheel", python="3.15t", cuda="xpu"), "manywheel-py3_15t-xpu"),
        (Build(package="manywheel", python="3.10", cuda="cpu", arch="aarch64"),
         "wheel-py3_10-cpu-aarch64"),
        (Build(package="manywheel", python="3.14", cuda="cu130", arch="aarch64"),
         "wheel-py3_14-cuda-aarch6413_0-aarch64"),
        (Build(package="wheel", python="3.13", cuda="cpu", platform="macos"), "wheel-py3_13-cpu"),
        (Build(package="libtorch", python="3", cuda="cpu", variant="shared-with-deps"),
         "libtorch-cpu-shared-with-deps-cxx11-abi"),
        (Build(package="libtorch", python="3", cuda="rocm7.14", variant="shared-with-deps"),
         "libtorch-rocm7_14-shared-with-deps-cxx11-abi"),
    ],
)
def test_labels_are_pytorchs_build_names(build: Build, label: str) -> None:
    assert build.label == label


def test_selectors_match_labels_too() -> None:
    builds = [Build(package="manywheel", python="3.14t", cuda="rocm7.2"),
              Build(package="manywheel", python="3.14t", cuda="cpu", arch="aarch64"),
              Build(package="manywheel", python="3.12", cuda="cpu")]
    chosen, unmatched = select(builds, ["wheel-py3_14t-*", "manywheel_3.12_*"], [])
    assert [b.id for b in chosen] == ["manywheel_3.14t_cpu_aarch64", "manywheel_3.12_cpu"]
    assert unmatched == []
    _, unmatched = select(builds, ["*"], ["libtorch-*"])
    assert unmatched == ["libtorch-*"]


def test_one_off_specs_keep_2019s_spelling_and_take_new_accelerators() -> None:
    assert [b.id for b in parse_spec("conda", "3.7", "cu100", platform="linux")] == [
        "conda_3.7_cu100"]
    got = parse_spec("manywheel", "3.14t", "rocm7.2,xpu", platform="linux", arch="arm64")
    assert [b.id for b in got] == ["manywheel_3.14t_rocm7.2_aarch64", "manywheel_3.14t_xpu_aarch64"]
