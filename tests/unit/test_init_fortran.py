"""`nightly init` on a project with Fortran or BLAS/LAPACK (issue 57): what it detects, and
the configuration it writes: a Debian bullseye builder with gfortran (and LAPACK unless the
project brings scipy-openblas), the container executor, manylinux_2_31, Python 3.9, said in
words. On the code before issue 57 all of this was the C defaults (sysroot, 2_28)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nightly.cli.init_facts import read_facts
from nightly.config import load

Run = Callable[..., Any]

SKBUILD = ('[build-system]\nrequires = ["scikit-build-core"]\n'
           'build-backend = "scikit_build_core.build"\n'
           '[project]\nname = "flsolve"\nversion = "0.1.0"\nrequires-python = ">=3.9"\n')
MESON = ('[build-system]\nrequires = ["meson-python", "numpy"]\nbuild-backend = "mesonpy"\n'
         '[project]\nname = "mfort"\nversion = "2.0"\n')


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.mark.parametrize(
    ("files", "fortran", "lapack"),
    [
        ({"pyproject.toml": SKBUILD, "CMakeLists.txt": "project(x LANGUAGES C Fortran)\n"},
         "CMakeLists.txt: Fortran as a CMake language", ""),
        ({"pyproject.toml": SKBUILD, "CMakeLists.txt": "project(x C)\nenable_language(Fortran)\n"
          "find_package(LAPACK REQUIRED)\n"},
         "CMakeLists.txt: Fortran as a CMake language", "CMakeLists.txt: find_package(LAPACK)"),
        ({"pyproject.toml": MESON, "meson.build": "project('m', 'c')\nadd_languages('fortran')\n"},
         "meson.build: 'fortran' as a meson language", ""),
        ({"pyproject.toml": MESON, "meson.build": "project('m', 'c', 'fortran')\n"
          "lapack = dependency('openblas')\n"},
         "meson.build: 'fortran' as a meson language", "meson.build: dependency('openblas')"),
        ({"pyproject.toml": MESON, "meson.build": "project('m', 'c')\n"
          "run_command(py, ['-m', 'numpy.f2py', 'm.pyf'])\n"}, "meson.build: f2py", ""),
        ({"pyproject.toml": MESON, "meson.build": "project('m', 'c')\n"
          "add_languages('fortran', native: false)\n",
          "pkg/meson.build": "blas = dependency(['openblas', 'OpenBLAS'])\n"},
         "meson.build: 'fortran' as a meson language", "pkg/meson.build: dependency('openblas')"),
        ({"setup.py": "from setuptools import setup\nsetup(name='f', version='1')\n",
          "f/lib/dgemm.f": "      SUBROUTINE X\n      END\n"},
         "Fortran sources (f/lib/dgemm.f)", ""),
        ({"pyproject.toml": SKBUILD.replace('"scikit-build-core"',
                                            '"scikit-build-core", "scipy-openblas32>=0.3.27"'),
          "CMakeLists.txt": "project(x C)\n"}, "", "scipy-openblas32 in its build requirements"),
        ({"pyproject.toml": SKBUILD, "CMakeLists.txt": "project(x C CXX)\n", "x.c": ""}, "", ""),
    ],
    ids=["cmake-project", "cmake-enable-lapack", "meson-add", "meson-project-openblas", "f2py",
         "meson-list",
         "sources", "scipy-openblas", "plain-c"],
)
def test_init_reads_fortran_and_lapack_from_the_build_files(
    tmp_path: Path, files: dict[str, str], fortran: str, lapack: str
) -> None:
    found = read_facts(_write(tmp_path, files)).fortran
    assert (found.fortran, found.lapack) == (fortran, lapack)


def test_a_fortran_lapack_project_gets_a_bullseye_builder_and_policy_2_31(
    nightly: Run, tmp_path: Path
) -> None:
    src = _write(tmp_path / "src", {
        "pyproject.toml": SKBUILD,
        "CMakeLists.txt": "project(flsolve LANGUAGES C Fortran)\nfind_package(LAPACK REQUIRED)\n",
        "src/flsolve/solve.f90": "subroutine s\nend subroutine\n",
    })
    config_path = tmp_path / "nightly.toml"
    out = nightly("init", str(src), "--config", str(config_path))
    assert out.code == 0, out.err
    config = load(config_path)
    (matrix,) = [m for m in config.matrices if m.package == "manywheel"]
    assert (matrix.manylinux, matrix.pythons) == ("2_31", ("3.9",))
    assert [m.executor for m in config.machines] == ["container"]
    (spec,) = config.builders.values()
    assert spec.suite == "bullseye"
    assert "gfortran" in spec.compilers
    assert {"liblapack-dev", "libblas-dev"} <= set(spec.packages)
    assert [(p.version, p.kind) for p in spec.pythons] == [("3.9", "distro")]
    # The image's own glibc meets the policy: no sysroot or zig wrappers in it.
    assert spec.toolchain == "system"
    assert spec.manylinux_tag() == "manylinux_2_31_x86_64"
    # Said in words: what was chosen, the tag and why; the image before the first night.
    assert "Fortran and BLAS/LAPACK: built in a Debian bullseye builder image" in out.out
    assert "manylinux policy 2_31" in out.out
    assert "2_28 needs a manylinux_2_28" in out.out
    assert "nightly images build" in out.out.split("Try it")[1].splitlines()[1]
    assert "CMakeLists.txt: find_package(LAPACK)" in config_path.read_text()


def test_a_project_bringing_scipy_openblas_gets_no_debian_lapack(
    nightly: Run, tmp_path: Path
) -> None:
    src = _write(tmp_path / "src", {
        "pyproject.toml": MESON.replace('"numpy"', '"numpy", "scipy-openblas32"'),
        "meson.build": "project('mfort', 'c', 'fortran')\n",
    })
    config_path = tmp_path / "nightly.toml"
    out = nightly("init", str(src), "--config", str(config_path))
    assert out.code == 0, out.err
    (spec,) = load(config_path).builders.values()
    assert not {"liblapack-dev", "libblas-dev", "libopenblas-dev"} & set(spec.packages)
    assert "OpenBLAS from PyPI's scipy-openblas32" in out.out


def test_a_fortran_project_without_python_3_9_is_refused_with_the_way_out(
    nightly: Run, tmp_path: Path
) -> None:
    src = _write(tmp_path / "src", {
        "pyproject.toml": SKBUILD.replace(">=3.9", ">=3.11"),
        "CMakeLists.txt": "project(flsolve LANGUAGES C Fortran)\n",
    })
    out = nightly("init", str(src), "--config", str(tmp_path / "nightly.toml"))
    assert out.code == 2
    assert "excludes 3.9" in out.err
    assert "base_image" in out.err
    assert "Traceback" not in out.err
    assert not (tmp_path / "nightly.toml").exists()
