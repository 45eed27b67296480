"""recipes/common/policymiss.py: a wheel that misses its manylinux policy is explained by
the file that needs the newer glibc symbol, the symbol version, the library it comes from,
and the fix for the wheel's languages (issue 57: the recipe suggested zig for every miss,
which compiles no Fortran).

Real ELF files: the host's gcc compiles a shared object that calls a function of glibc 2.34
(pthread_create moved into libc then), and one that links a library named libgfortran.so.5
which does; bookworm's glibc (2.36) versions them so.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HELPER = REPO / "recipes" / "common" / "policymiss.py"

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("objdump") is None,
                                reason="needs gcc and binutils")

THREADED = r"""
#include <pthread.h>
static void *run(void *arg) { return arg; }
int start(void) { pthread_t t; int r = pthread_create(&t, 0, run, 0); pthread_join(t, 0); return r; }
"""


def _so(tmp: Path, name: str, source: str, *args: str) -> Path:
    c = tmp / f"{name}.c"
    c.write_text(source)
    out = tmp / name
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(c), *args], check=True)
    return out


def _wheel(tmp: Path, member: str, so: Path) -> Path:
    wheel = tmp / "pkg-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(so, member)
        zf.writestr("pkg/__init__.py", "")
    return wheel


def _explain(wheel: Path, glibc: str, env: dict[str, str] | None = None) -> str:
    p = subprocess.run([sys.executable, str(HELPER), str(wheel), glibc], capture_output=True,
                       text=True, env=env, check=True)
    return p.stdout.strip()


def _glibc_234() -> bool:
    import os

    text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    major, minor = (int(x) for x in text.split()[-1].split(".")[:2])
    return (major, minor) >= (2, 34)


needs_234 = pytest.mark.skipif(not _glibc_234(), reason="the host's glibc predates 2.34")


@needs_234
def test_a_c_extension_is_named_with_its_symbol_version_and_gets_the_c_fix(tmp_path: Path) -> None:
    so = _so(tmp_path, "ext.so", THREADED, "-pthread")
    said = _explain(_wheel(tmp_path, "pkg/_ext.cpython-311-x86_64-linux-gnu.so", so), "2.28")
    assert said.startswith("pkg/_ext.cpython-311-x86_64-linux-gnu.so needs GLIBC_2.34 from libc.so.6")
    assert "(policy: glibc 2.28)" in said
    assert 'C/C++: toolchain = "zig"' in said


@needs_234
def test_a_fortran_runtime_is_named_as_the_cause_and_the_fix_is_not_zig(tmp_path: Path) -> None:
    libs = tmp_path / "libs"
    libs.mkdir()
    # A stand-in for a newer distribution's libgfortran: it needs glibc 2.34, the
    # extension itself does not.
    _so(libs, "libgfortran.so.5", THREADED, "-pthread", "-Wl,-soname,libgfortran.so.5")
    ext = _so(tmp_path, "ext.so", "int start(void);\nint go(void) { return start(); }\n",
              f"-L{libs}", "-l:libgfortran.so.5")
    wheel = _wheel(tmp_path, "pkg/_solve.so", ext)
    said = _explain(wheel, "2.31", env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(libs)})
    # Not a Debian package's file: the loader's path says where it comes from.
    assert said.startswith(f"libgfortran.so.5 ({libs}/libgfortran.so.5) needs GLIBC_2.34")
    assert "needs GLIBC_2.34 from libc.so.6" in said
    assert "Fix for Fortran" in said
    assert "bullseye" in said
    assert "zig\" reaches" not in said


GETTID = "#define _GNU_SOURCE\n#include <unistd.h>\nint tid(void) { return gettid(); }\n"


@needs_234
def test_a_function_glibc_added_after_the_policy_gets_a_policy_fix_not_a_toolchain(
    tmp_path: Path,
) -> None:
    """gettid is glibc 2.30's own (no older version of it exists): no toolchain links it for
    glibc 2.28, so the fix is a newer policy or code without it (the helper said zig). Under
    2.31 the same wheel's pthread_create (2.34, an older version exists) is zig's to fix."""
    so = _so(tmp_path, "ext.so", THREADED + GETTID, "-pthread")
    wheel = _wheel(tmp_path, "pkg/_ext.so", so)
    said = _explain(wheel, "2.28")
    assert said.startswith("pkg/_ext.so needs GLIBC_2.34 from libc.so.6 for pthread_create")
    assert 'Fix: manylinux = "2_30" or newer, or code without gettid' in said
    assert "zig" not in said
    said = _explain(wheel, "2.31")
    assert 'C/C++: toolchain = "zig"' in said


def test_a_wheel_within_its_policy_has_no_cause(tmp_path: Path) -> None:
    so = _so(tmp_path, "plain.so", "int one(void) { return 1; }\n")
    assert _explain(_wheel(tmp_path, "pkg/plain.so", so), "2.28") == ""


@needs_234
def test_a_library_of_the_machine_is_named_and_its_fix_is_a_library_built_for_the_policy(
    tmp_path: Path,
) -> None:
    """A linked library's own symbols (bullseye's liblapack3 needs libm's GLIBC_2.29): no
    toolchain fixes that. When that library is Fortran (it links libgfortran, as reference
    LAPACK does, while the extension itself need not: --as-needed), the fix is Fortran's."""
    libs = tmp_path / "libs"
    libs.mkdir()
    _so(libs, "libfoo.so.1", THREADED, "-pthread", "-Wl,-soname,libfoo.so.1")
    ext = _so(tmp_path, "ext.so", "int start(void);\nint go(void) { return start(); }\n",
              f"-L{libs}", "-l:libfoo.so.1")
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(libs)}
    said = _explain(_wheel(tmp_path, "pkg/_c.so", ext), "2.28", env=env)
    assert said.startswith(f"libfoo.so.1 ({libs}/libfoo.so.1) needs GLIBC_2.34 from libc.so.6")
    assert "Fix for a library the wheel links: no toolchain changes libfoo.so.1's own" in said
    # The same library linking a Fortran runtime: Fortran's fix.
    _so(libs, "libgfortran.so.5", "int g(void) { return 0; }\n", "-Wl,-soname,libgfortran.so.5")
    _so(libs, "libfoo.so.1", THREADED + "int g(void);\nint h(void) { return g(); }\n",
        "-pthread", "-Wl,-soname,libfoo.so.1", f"-L{libs}", "-l:libgfortran.so.5")
    said = _explain(_wheel(tmp_path, "pkg/_c.so", ext), "2.28", env=env)
    assert "Fix for Fortran" in said
