"""What `nightly init` reads of a project's Fortran and BLAS/LAPACK needs, and what it
chooses for them (issue 57).

Fortran: CMake (`enable_language(Fortran)`, `project(... Fortran)`), meson
(`add_languages('fortran')`, `'fortran'` in `project()`), f2py (`numpy.f2py`, `.pyf`
signature files) and Fortran sources (.f, .f90, .F ...). BLAS/LAPACK: CMake
`find_package(BLAS|LAPACK)`, meson `dependency('blas'|'lapack'|'openblas')`, a
scipy-openblas package in the build requirements (the project then brings its own OpenBLAS
from PyPI, as NumPy and SciPy do).

Why a Debian bullseye builder: no zig or sysroot compiles Fortran, and gfortran's runtime
(libgfortran, libquadmath, bundled into the wheel by auditwheel) is built against the
glibc of the distribution it comes from. Bullseye (glibc 2.31) is the oldest Debian
release these machines can reach, so its gfortran 10 and its LAPACK give wheels tagged
manylinux_2_31; the only interpreter that runs there is bullseye's own Python 3.9 (the
host's pyenv builds need glibc 2.35). docs/building.md ("Fortran and LAPACK") says what
2_28 needs (a manylinux_2_28 base image, or conda-forge).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# Fortran's file suffixes (fixed and free form, preprocessed or not) and f2py's signatures.
FORTRAN_SUFFIXES = (".f", ".for", ".f77", ".f90", ".f95", ".f03", ".f08",
                    ".F", ".FOR", ".F77", ".F90", ".F95", ".F03", ".F08")
SUITE = "bullseye"
POLICY = "2_31"  # bullseye's glibc: the newest symbol versions its gfortran and LAPACK give
PYTHON = "3.9"  # bullseye's python3: the one interpreter here that runs on glibc 2.31
MAX_READ = 1024 * 1024

_CMAKE_FORTRAN = re.compile(
    r"(?is)\benable_language\s*\([^)]*\bFortran\b|\bproject\s*\([^)]*\bFortran\b")
_MESON_FORTRAN = re.compile(
    r"""(?is)\badd_languages\s*\([^)]*['"]fortran['"]|\bproject\s*\([^)]*['"]fortran['"]""")
_F2PY = re.compile(r"\bnumpy\.f2py\b|\bf2py\b", re.IGNORECASE)
_CMAKE_BLAS = re.compile(r"(?i)\bfind_package\s*\(\s*(BLAS|LAPACK)\b")
# dependency('lapack') or a list of names: dependency(['openblas', 'OpenBLAS']).
_MESON_BLAS = re.compile(
    r"""(?i)\bdependency\s*\(\s*\[?\s*['"]((?:scipy-)?openblas|blas|lapack)\w*['"]""")
_OPENBLAS_WHEEL = re.compile(r"(?i)^\s*(scipy[-_]openblas(?:32|64))\b")


@dataclass(frozen=True, kw_only=True)
class FortranFacts:
    """A project's Fortran and BLAS/LAPACK use, each with where it was seen ("": none)."""

    fortran: str = ""  # e.g. "CMakeLists.txt: project(... Fortran)"
    lapack: str = ""  # e.g. "CMakeLists.txt: find_package(LAPACK)"
    openblas_wheel: str = ""  # scipy-openblas32/64 in the build requirements: its own OpenBLAS
    openblas: bool = False  # it asks for OpenBLAS by name (meson dependency('openblas'))

    @property
    def needed(self) -> bool:
        return bool(self.fortran or self.lapack)


def _text(path: Path) -> str:
    """A file of the project, never through a symbolic link, its first MAX_READ bytes."""
    if path.is_symlink():
        return ""
    try:
        with path.open("rb") as f:
            return f.read(MAX_READ).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _rel(source: Path, path: Path) -> str:
    try:
        return str(path.relative_to(source))
    except ValueError:
        return path.name


def detect(source: Path, files: list[Path], build_requires: tuple[str, ...]) -> FortranFacts:
    """What the project's build files and sources say about Fortran and BLAS/LAPACK."""
    fortran = lapack = ""
    openblas = False
    builds = sorted(f for f in files if f.name in ("CMakeLists.txt", "meson.build", "setup.py"))
    for f in builds:
        text, where = _text(f), _rel(source, f)
        if f.name == "CMakeLists.txt":
            if not fortran and _CMAKE_FORTRAN.search(text):
                fortran = f"{where}: Fortran as a CMake language"
            m = _CMAKE_BLAS.search(text)
            if m and not lapack:
                lapack = f"{where}: find_package({m.group(1)})"
        elif f.name == "meson.build":
            if not fortran and _MESON_FORTRAN.search(text):
                fortran = f"{where}: 'fortran' as a meson language"
            m = _MESON_BLAS.search(text)
            if m:
                lapack = lapack or f"{where}: dependency('{m.group(1)}')"
                openblas = openblas or "openblas" in m.group(1).lower()
        if not fortran and f.name != "CMakeLists.txt" and _F2PY.search(text):
            fortran = f"{where}: f2py"
    sources = sorted(_rel(source, f) for f in files
                     if f.suffix in FORTRAN_SUFFIXES or f.suffix == ".pyf")
    if not fortran and sources:
        more = f" and {len(sources) - 2} more" if len(sources) > 2 else ""
        fortran = f"Fortran sources ({', '.join(sources[:2])}{more})"
    wheel = next((m.group(1) for r in build_requires if (m := _OPENBLAS_WHEEL.match(r))), "")
    if wheel and not lapack:
        lapack = f"{wheel} in its build requirements"
    return FortranFacts(fortran=fortran, lapack=lapack, openblas_wheel=wheel, openblas=openblas)


def debs(found: FortranFacts) -> list[str]:
    """The Debian packages the builder needs beyond the C defaults: gfortran's runtime comes
    with the compiler; LAPACK from the builder unless the project brings its own OpenBLAS."""
    if not found.lapack or found.openblas_wheel:
        return []
    return ["libopenblas-dev"] if found.openblas else ["liblapack-dev", "libblas-dev"]


def what(found: FortranFacts) -> str:
    """What the project needs, in words ("Fortran and LAPACK")."""
    parts = (["Fortran"] if found.fortran else []) + (["BLAS/LAPACK"] if found.lapack else [])
    return " and ".join(parts)


def lapack_source(found: FortranFacts) -> str:
    if not found.lapack:
        return ""
    if found.openblas_wheel:
        return f"OpenBLAS from PyPI's {found.openblas_wheel} (its build requirement)"
    return f"bullseye's {', '.join(debs(found))}"


def policy_lines(found: FortranFacts) -> list[str]:
    """The matrix's policy for a Fortran/LAPACK project, commented with the why."""
    said = "; ".join(x for x in (found.fortran, found.lapack) if x)
    return [f"# {what(found)} ({said}): built in the Debian {SUITE} builder below, with",
            "# its gfortran and glibc 2.31 (zig and nightly's sysroot compile no Fortran; a",
            "# newer distribution's libgfortran would need its newer glibc). auditwheel bundles",
            "# libgfortran, libquadmath" + (" and the BLAS/LAPACK libraries" if found.lapack
                                             and not found.openblas_wheel else "")
            + " into each wheel, tagged manylinux_2_31:",
            "# it installs where glibc is 2.31 or newer (Debian 11, Ubuntu 20.04, RHEL 9).",
            "# manylinux_2_28 needs a manylinux_2_28 base image ([builders] base_image),",
            '# docs/building.md, "Fortran and LAPACK".',
            f'manylinux = "{POLICY}"']


def lines(found: FortranFacts) -> list[str]:
    """What `nightly init` prints about it."""
    out = [f"  {what(found)}: built in a Debian {SUITE} builder image (gfortran 10, glibc "
           f"2.31; {lapack_source(found) or 'no LAPACK'}), executor = \"container\"",
           f"  manylinux policy {POLICY}: the oldest glibc these machines can build Fortran "
           "for (auditwheel bundles libgfortran"
           + (" and LAPACK" if found.lapack and not found.openblas_wheel else "")
           + "); 2_28 needs a manylinux_2_28 base image (docs/building.md)",
           f"  Python {PYTHON} only: {SUITE}'s own interpreter is the one here that runs on "
           "glibc 2.31"]
    return out


__all__ = ["FORTRAN_SUFFIXES", "POLICY", "PYTHON", "SUITE", "FortranFacts", "debs", "detect",
           "lines", "policy_lines", "what"]
