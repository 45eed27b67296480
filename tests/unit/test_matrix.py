"""Spellings, Build identifiers, expansion, command-line specs and selectors."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from nightly.core.matrix import (
    LIBTORCH_VARIANTS,
    Build,
    PackageMatrix,
    SpellingError,
    cuda_version,
    expand,
    near_misses,
    nightly_version,
    normalize_cuda,
    normalize_python,
    parse_spec,
    python_number,
    select,
)

# ---------------------------------------------------------------------------- CUDA spellings


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cpu", "cpu"),
        ("CPU", "cpu"),
        ("cu80", "cu80"),
        ("8.0", "cu80"),
        ("cu90", "cu90"),
        ("9.2", "cu92"),
        ("cu100", "cu100"),
        ("10.0", "cu100"),
        ("cu126", "cu126"),
        ("12.6", "cu126"),
        ("12.8", "cu128"),
        ("13.0", "cu130"),
        ("cu130", "cu130"),
        (" cu126 ", "cu126"),
    ],
)
def test_cuda_spellings_are_normalised(text: str, expected: str) -> None:
    assert normalize_cuda(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "gpu", "cu", "cu1", "cu10x", "cu012", "10", "100", "12.6.1", "12.", ".6", "12,6",
     "cu 100", "cuda", "cu100a", "1O.0", "12.10"],
)
def test_malformed_cuda_spellings_are_rejected(text: str) -> None:
    with pytest.raises(SpellingError, match="is not a CUDA version") as exc:
        normalize_cuda(text)
    # The message says how to write it.
    assert "cu126" in str(exc.value)
    assert "12.6" in str(exc.value)


@pytest.mark.parametrize(
    ("cuda", "version"),
    [("cpu", ""), ("cu80", "8.0"), ("cu90", "9.0"), ("cu100", "10.0"), ("cu126", "12.6"),
     ("cu130", "13.0")],
)
def test_cuda_version_of_a_normalised_spelling(cuda: str, version: str) -> None:
    assert cuda_version(cuda) == version
    if version:
        assert normalize_cuda(version) == cuda  # the two spellings round-trip


# ---------------------------------------------------------------------------- Python spellings


@pytest.mark.parametrize("text", ["2.7mu", "2.7m", "2.7", "3.5m", "3.6m", "3.7", "3.10", "3.11",
                                  "3.13t", "3.14"])
def test_python_spellings_with_abi_suffixes_are_accepted(text: str) -> None:
    assert normalize_python(text) == text


@pytest.mark.parametrize(
    "text",
    ["", "3", "3.", "python3.7", "3.7x", "3.6mu2", "3.13tt", "4.0", "3.111", "2.7 mu", "3,7",
     "v3.7"],
)
def test_malformed_python_spellings_are_rejected(text: str) -> None:
    with pytest.raises(SpellingError, match="is not a Python version"):
        normalize_python(text)


@pytest.mark.parametrize(
    ("text", "number"),
    [("2.7mu", "2.7"), ("3.6m", "3.6"), ("3.11", "3.11"), ("3.13t", "3.13")],
)
def test_python_number_drops_the_abi_suffix(text: str, number: str) -> None:
    assert python_number(text) == number


# ---------------------------------------------------------------------------- versions


def test_nightly_version_is_base_dot_dev_date() -> None:
    assert nightly_version("1.0.0", dt.date(2019, 1, 31)) == "1.0.0.dev20190131"
    # Zero-padded month and day, so versions sort by date.
    assert nightly_version("2.13.0", dt.date(2026, 2, 3)) == "2.13.0.dev20260203"
    assert nightly_version("2.13.0", dt.date(2026, 2, 3)) < nightly_version(
        "2.13.0", dt.date(2026, 11, 1)
    )


# ---------------------------------------------------------------------------- identifiers


@pytest.mark.parametrize(
    ("build", "ident"),
    [
        (Build(package="manywheel", python="3.6m", cuda="cu90"), "manywheel_3.6m_cu90"),
        (Build(package="manywheel", python="2.7mu", cuda="cpu"), "manywheel_2.7mu_cpu"),
        (Build(package="conda", python="3.7", cuda="cu100"), "conda_3.7_cu100"),
        (Build(package="wheel", python="3.7", cuda="cpu", platform="macos"), "wheel_3.7_cpu"),
        (
            Build(package="libtorch", python="2.7m", cuda="cu100", variant="shared-with-deps"),
            "libtorch_shared-with-deps_cu100",
        ),
        (Build(package="libtorch", python="2.7m", cuda="cu80", variant="all"), "libtorch_all_cu80"),
        # conda and libtorch exist on both platforms: the macOS ones carry _macos.
        (Build(package="conda", python="3.7", cuda="cpu", platform="macos"), "conda_3.7_cpu_macos"),
        (
            Build(package="libtorch", python="2.7", cuda="cpu", variant="all", platform="macos"),
            "libtorch_all_cpu_macos",
        ),
        (Build(package="manywheel", python="3.13t", cuda="cu130"), "manywheel_3.13t_cu130"),
    ],
)
def test_build_identifiers(build: Build, ident: str) -> None:
    assert build.id == ident


def test_libtorch_python_is_not_part_of_the_identifier() -> None:
    a = Build(package="libtorch", python="2.7m", cuda="cpu", variant="all")
    b = Build(package="libtorch", python="3.12", cuda="cpu", variant="all")
    assert a.id == b.id == "libtorch_all_cpu"


def test_build_is_frozen_hashable_and_ordered() -> None:
    b = Build(package="conda", python="3.7", cuda="cu100")
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.cuda = "cpu"  # type: ignore[misc]
    assert {b, Build(package="conda", python="3.7", cuda="cu100")} == {b}
    builds = [Build(package="conda", python="3.7", cuda="cu100"),
              Build(package="conda", python="3.5", cuda="cpu")]
    assert [x.id for x in sorted(builds)] == ["conda_3.5_cpu", "conda_3.7_cu100"]


def test_build_cuda_properties() -> None:
    cpu = Build(package="conda", python="3.7", cuda="cpu")
    gpu = Build(package="conda", python="3.7", cuda="cu100")
    assert (cpu.is_cuda, cpu.cuda_version) == (False, "")
    assert (gpu.is_cuda, gpu.cuda_version) == (True, "10.0")


def test_libtorch_all_stands_for_the_four_variants() -> None:
    all_ = Build(package="libtorch", python="2.7m", cuda="cpu", variant="all")
    one = Build(package="libtorch", python="2.7m", cuda="cpu", variant="static-with-deps")
    assert all_.variants == LIBTORCH_VARIANTS
    assert len(all_.variants) == 4
    assert one.variants == ("static-with-deps",)
    assert Build(package="conda", python="3.7", cuda="cpu").variants == ()


# ---------------------------------------------------------------------------- expansion


def test_expansion_is_pythons_by_cudas_in_configuration_order() -> None:
    m = PackageMatrix(
        package="manywheel", platform="linux", pythons=("3.6m", "3.7m"), cudas=("cpu", "cu100")
    )
    assert [b.id for b in m.expand()] == [
        "manywheel_3.6m_cpu",
        "manywheel_3.6m_cu100",
        "manywheel_3.7m_cpu",
        "manywheel_3.7m_cu100",
    ]


def test_each_libtorch_variant_is_its_own_build() -> None:
    m = PackageMatrix(
        package="libtorch",
        platform="linux",
        pythons=(),
        cudas=("cpu", "cu126"),
        variants=LIBTORCH_VARIANTS,
        python="3.12",
        devtoolset="gcc-toolset-13",
    )
    builds = m.expand()
    assert [b.id for b in builds] == [
        "libtorch_shared-with-deps_cpu",
        "libtorch_shared-without-deps_cpu",
        "libtorch_static-with-deps_cpu",
        "libtorch_static-without-deps_cpu",
        "libtorch_shared-with-deps_cu126",
        "libtorch_shared-without-deps_cu126",
        "libtorch_static-with-deps_cu126",
        "libtorch_static-without-deps_cu126",
    ]
    assert {b.python for b in builds} == {"3.12"}
    assert {b.devtoolset for b in builds} == {"gcc-toolset-13"}
    assert all(len(b.variants) == 1 for b in builds)


def test_libtorch_all_is_one_build_per_cuda() -> None:
    m = PackageMatrix(
        package="libtorch", platform="linux", pythons=(), cudas=("cpu", "cu80", "cu90", "cu100"),
        variants=("all",), python="2.7m",
    )
    assert [b.id for b in m.expand()] == [
        "libtorch_all_cpu", "libtorch_all_cu80", "libtorch_all_cu90", "libtorch_all_cu100",
    ]


def test_macos_builds_carry_the_platform() -> None:
    ms = [
        PackageMatrix(package="wheel", platform="macos", pythons=("3.7",), cudas=("cpu",)),
        PackageMatrix(package="conda", platform="macos", pythons=("3.7",), cudas=("cpu",)),
        PackageMatrix(package="conda", platform="linux", pythons=("3.7",), cudas=("cpu",)),
    ]
    builds = expand(ms)
    assert [b.id for b in builds] == ["wheel_3.7_cpu", "conda_3.7_cpu_macos", "conda_3.7_cpu"]
    assert [b.platform for b in builds] == ["macos", "macos", "linux"]


def test_expand_drops_duplicates_and_keeps_first_order() -> None:
    a = PackageMatrix(package="conda", platform="linux", pythons=("3.7", "3.6"), cudas=("cpu",))
    b = PackageMatrix(package="conda", platform="linux", pythons=("3.6", "3.5"), cudas=("cpu",))
    assert [x.id for x in expand([a, b])] == ["conda_3.7_cpu", "conda_3.6_cpu", "conda_3.5_cpu"]


# ---------------------------------------------------------------------------- specs


def test_spec_with_comma_lists() -> None:
    builds = parse_spec("manywheel", "3.6m,3.7m", "cpu,cu100", platform="linux")
    assert [b.id for b in builds] == [
        "manywheel_3.6m_cpu",
        "manywheel_3.6m_cu100",
        "manywheel_3.7m_cpu",
        "manywheel_3.7m_cu100",
    ]


def test_spec_normalises_cuda_spellings() -> None:
    builds = parse_spec("conda", "3.7", "10.0, 12.6 ,cpu", platform="linux")
    assert [b.id for b in builds] == ["conda_3.7_cu100", "conda_3.7_cu126", "conda_3.7_cpu"]


def test_spec_libtorch_variants() -> None:
    builds = parse_spec(
        "libtorch", "shared-with-deps,all", "cu100", platform="linux", libtorch_python="3.12"
    )
    assert [b.id for b in builds] == ["libtorch_shared-with-deps_cu100", "libtorch_all_cu100"]
    assert {b.python for b in builds} == {"3.12"}


def test_spec_libtorch_with_a_python_builds_the_configured_variants() -> None:
    builds = parse_spec(
        "libtorch", "2.7m", "cpu,cu80", platform="linux", libtorch_variants=("all",)
    )
    assert [(b.id, b.python) for b in builds] == [
        ("libtorch_all_cpu", "2.7m"),
        ("libtorch_all_cu80", "2.7m"),
    ]


def test_spec_macos() -> None:
    builds = parse_spec("conda", "3.5,3.6", "cpu", platform="macos")
    assert [b.id for b in builds] == ["conda_3.5_cpu_macos", "conda_3.6_cpu_macos"]


@pytest.mark.parametrize(
    ("args", "platform", "message"),
    [
        (("manywheels", "3.7m", "cpu"), "linux", "did you mean 'manywheel'?"),
        (("condaa", "3.7", "cpu"), "linux", "did you mean 'conda'?"),
        (("rpm", "3.7", "cpu"), "linux", "unknown package type 'rpm'"),
        (("wheel", "3.7", "cpu"), "linux", "on Linux build manywheel"),
        (("manywheel", "3.7m", "cpu"), "macos", "on macOS build wheel"),
        (("manywheel", "3.12", "cpu"), "windows", "Linux builds; on Windows build wheel"),
        (("conda", "3.12", "cpu"), "windows", "conda builds are Linux and macOS builds"),
        (("manywheel", "3.7q", "cpu"), "linux", "'3.7q' is not a Python version"),
        (("manywheel", "3.7m", "cpu,cu10x"), "linux", "'cu10x' is not a CUDA version"),
        (("manywheel", "", "cpu"), "linux", "empty list"),
        (("manywheel", "3.7m", " , "), "linux", "empty list"),
        (("libtorch", "all,2.7m", "cpu"), "linux", "mixes libtorch variants and Python"),
        (("libtorch", "2.7m,3.6m", "cpu"), "linux", "libtorch takes variants"),
    ],
)
def test_bad_specs(args: tuple[str, str, str], platform: str, message: str) -> None:
    with pytest.raises(SpellingError) as exc:
        parse_spec(*args, platform=platform)
    assert message in str(exc.value)


# ---------------------------------------------------------------------------- selectors

MATRIX = expand(
    [
        PackageMatrix(
            package="manywheel",
            platform="linux",
            pythons=("3.6m", "3.7m"),
            cudas=("cpu", "cu90", "cu100"),
        ),
        PackageMatrix(package="conda", platform="linux", pythons=("3.7",), cudas=("cpu", "cu100")),
        PackageMatrix(package="wheel", platform="macos", pythons=("3.7",), cudas=("cpu",)),
    ]
)
ALL_IDS = [b.id for b in MATRIX]


def _ids(include: list[str], exclude: list[str]) -> list[str]:
    chosen, unmatched = select(MATRIX, include, exclude)
    assert unmatched == []
    return [b.id for b in chosen]


def test_select_everything_by_default_glob() -> None:
    assert _ids(["*"], []) == ALL_IDS


def test_select_shell_style_globs() -> None:
    assert _ids(["manywheel_3.*_cu1*"], []) == ["manywheel_3.6m_cu100", "manywheel_3.7m_cu100"]
    assert _ids(["manywheel_3.?m_cpu"], []) == ["manywheel_3.6m_cpu", "manywheel_3.7m_cpu"]
    assert _ids(["*_cu[19]0*"], []) == [
        "manywheel_3.6m_cu90",
        "manywheel_3.6m_cu100",
        "manywheel_3.7m_cu90",
        "manywheel_3.7m_cu100",
        "conda_3.7_cu100",
    ]


def test_select_include_then_exclude() -> None:
    # Several includes are a union; an exclude removes even what an include names exactly.
    assert _ids(["conda_*", "wheel_*", "manywheel_3.6m_cpu"], ["*_cpu"]) == ["conda_3.7_cu100"]
    assert _ids(["manywheel_*"], ["*_3.7m_*", "*_cu90"]) == [
        "manywheel_3.6m_cpu",
        "manywheel_3.6m_cu100",
    ]


def test_select_keeps_matrix_order() -> None:
    assert _ids(["wheel_*", "conda_*"], []) == ["conda_3.7_cpu", "conda_3.7_cu100", "wheel_3.7_cpu"]


def test_select_is_case_sensitive_and_anchored() -> None:
    chosen, unmatched = select(MATRIX, ["MANYWHEEL_*", "wheel_3.7"], [])
    assert chosen == []
    assert unmatched == ["MANYWHEEL_*", "wheel_3.7"]


def test_select_reports_unmatched_includes_and_excludes() -> None:
    chosen, unmatched = select(MATRIX, ["conda_*", "libtorch_*"], ["conda_3.8_*"])
    assert [b.id for b in chosen] == ["conda_3.7_cpu", "conda_3.7_cu100"]
    assert unmatched == ["libtorch_*", "conda_3.8_*"]


def test_select_can_leave_nothing() -> None:
    chosen, unmatched = select(MATRIX, ["conda_*"], ["conda_*"])
    assert (chosen, unmatched) == ([], [])


def test_near_misses_of_an_exact_id() -> None:
    close = near_misses("manywheel_3.8m_cpu", ALL_IDS)
    assert close[0] in ("manywheel_3.6m_cpu", "manywheel_3.7m_cpu")
    assert set(close[:2]) == {"manywheel_3.6m_cpu", "manywheel_3.7m_cpu"}
    assert "wheel_3.7_cpu" not in close[:2]


def test_near_misses_of_a_glob() -> None:
    close = near_misses("manywheel_3.8*", ALL_IDS)
    assert close
    assert all(c.startswith("manywheel_3.") for c in close)


def test_near_misses_of_a_typo() -> None:
    assert near_misses("cnoda_3.7_cu100", ALL_IDS)[0] == "conda_3.7_cu100"


def test_near_misses_are_few_and_can_be_none() -> None:
    assert len(near_misses("manywheel_*", ALL_IDS)) <= 5
    assert near_misses("zzzzzz", ALL_IDS) == []
