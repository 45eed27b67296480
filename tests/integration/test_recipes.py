"""The four recipes build the demo project for real, and the packages work as a user uses them.

Each test runs recipes/<package>/build.sh directly with a clean recipe environment
(recipe_env.py): no orchestrator involved, so a failure here is the recipe's. Packages are
then checked from the outside: wheels installed into fresh virtual environments and
imported, the conda package installed from a local channel by a conda client (py-rattler),
libtorch zips unpacked and linked into a C++ program.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import shutil
import stat
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration import recipe_env as renv

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(platform.system() != "Linux", reason="the Linux recipes build on Linux"),
]

CUDA_RELEASE = "13.0"
DESIRED_CUDA = "cu130"

PROBE = """
import json, nightlydemo
print(json.dumps({
    "version": nightlydemo.__version__,
    "cuda": nightlydemo.built_with_cuda(),
    "cuda_version": nightlydemo.cuda_version(),
    "add": nightlydemo.add(2, 40),
    "sum": nightlydemo.vector_sum([0.5, 1.5, 2.0]),
    "file": nightlydemo.__file__,
}))
"""


def need_python(xy: str) -> Path:
    python = renv.pyenv_python(xy)
    if python is None:
        pytest.fail(f"no Python {xy} interpreter on this machine (pyenv provides 3.10-3.12 here)")
    return python


def probe(python: Path, pythonpath: Path | None = None) -> dict[str, Any]:
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    # Run from a folder without the source tree, so only the installed package can answer.
    out = subprocess.run(
        [str(python), "-c", PROBE], env=env, cwd="/", capture_output=True, text=True, check=True
    ).stdout
    found: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return found


@pytest.fixture(scope="module")
def source_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A read-only copy of examples/demo, as the day folder's source/ is to a recipe."""
    root = tmp_path_factory.mktemp("source")
    src = renv.readonly_copy_of_demo(root / "demo")
    before = renv.snapshot(src)
    yield src
    # No recipe may write into its source: same files, same sizes, same times.
    assert renv.snapshot(src) == before
    renv.make_writable(src)


def the_package(run: renv.RecipeRun, suffix: str) -> Path:
    """The one package a run produced; OUTPUT_DIR must hold nothing else."""
    assert run.returncode == 0, run.describe()
    assert [p.name for p in run.packages if not p.name.endswith(suffix)] == [], run.describe()
    assert len(run.packages) == 1, run.describe()
    package = run.packages[0]
    # Readable by the upload step and web servers (rattler-build writes 0600 files).
    assert stat.S_IMODE(package.stat().st_mode) == 0o644
    return package


def auditwheel_available() -> bool:
    return shutil.which("auditwheel", path=renv.RECIPE_PATH) is not None


@pytest.mark.parametrize("xy", ["3.10", "3.11", "3.12"])
def test_manywheel_cpu_installs_and_imports(xy: str, source_dir: Path, tmp_path: Path) -> None:
    python = need_python(xy)
    env = renv.contract_env(
        package_type="manywheel",
        source_dir=source_dir,
        output_dir=tmp_path / "out",
        work_dir=tmp_path / "work",
        desired_python=xy,
        python=python,
    )
    run = renv.run_recipe("manywheel", env)
    wheel = the_package(run, ".whl")
    nodot = xy.replace(".", "")
    assert wheel.name.startswith(f"nightlydemo-{renv.BUILD_VERSION}-cp{nodot}-cp{nodot}-"), wheel.name
    if auditwheel_available():
        assert "manylinux" in wheel.name, run.describe()
    else:
        assert wheel.name.endswith("linux_x86_64.whl")
        assert "auditwheel is not installed" in run.output

    venv_python = renv.fresh_venv(python, tmp_path / "venv")
    renv.pip_install_offline(python, venv_python, wheel)
    got = probe(venv_python)
    assert got["version"] == renv.BUILD_VERSION
    assert got["cuda"] is False
    assert got["cuda_version"] is None
    assert (got["add"], got["sum"]) == (42, 4.0)
    assert got["file"].startswith(str(tmp_path / "venv"))


def test_manywheel_cuda_compiles_with_nvcc(source_dir: Path, tmp_path: Path) -> None:
    toolkit = renv.cuda_toolkit(CUDA_RELEASE)
    if toolkit is None:
        pytest.fail(f"no CUDA {CUDA_RELEASE} toolkit at /usr/local/cuda-{CUDA_RELEASE}")
    python = need_python("3.12")
    env = renv.contract_env(
        package_type="manywheel",
        source_dir=source_dir,
        output_dir=tmp_path / "out",
        work_dir=tmp_path / "work",
        desired_python="3.12",
        desired_cuda=DESIRED_CUDA,
        cuda_version=CUDA_RELEASE,
        python=python,
        cuda_home=toolkit,
    )
    run = renv.run_recipe("manywheel", env)
    wheel = the_package(run, ".whl")
    assert wheel.name.startswith(f"nightlydemo-{renv.BUILD_VERSION}+{DESIRED_CUDA}-cp312-cp312-")
    assert "kernel.cu" in run.output  # really compiled by nvcc
    assert "/bin/nvcc -c cuda/kernel.cu" in run.output

    venv_python = renv.fresh_venv(python, tmp_path / "venv")
    renv.pip_install_offline(python, venv_python, wheel)
    got = probe(venv_python)
    assert got["version"] == f"{renv.BUILD_VERSION}+{DESIRED_CUDA}"
    assert got["cuda"] is True
    assert got["cuda_version"] == CUDA_RELEASE
    # No GPU needed to import; launching the kernel without one is a clean Python error.
    launch = subprocess.run(
        [
            str(venv_python),
            "-c",
            "import nightlydemo\n"
            "try:\n    print(nightlydemo.vector_add_cuda([1.0, 2.0], [3.0, 4.0]))\n"
            "except RuntimeError as e:\n    print('RuntimeError', e)\n",
        ],
        cwd="/",
        capture_output=True,
        text=True,
        check=True,
    )
    assert launch.stdout.startswith(("[4.0, 6.0]", "RuntimeError")), launch.stdout


def test_conda_package_installs_from_local_channel(source_dir: Path, tmp_path: Path) -> None:
    import rattler  # the [conda] extra, part of [test]
    import rattler_build  # noqa: F401
    from rattler.index import index_fs

    python = need_python("3.11")
    env = renv.contract_env(
        package_type="conda",
        source_dir=source_dir,
        output_dir=tmp_path / "out",
        work_dir=tmp_path / "work",
        desired_python="3.11",
        python=python,
    )
    run = renv.run_recipe("conda", env)
    package = the_package(run, ".conda")
    assert package.name == f"nightlydemo-{renv.BUILD_VERSION}-py311_cpu_1.conda"

    # A local channel holding only this package, indexed like a self-hosted channel.
    channel = tmp_path / "channel"
    (channel / "linux-64").mkdir(parents=True)
    (channel / "noarch").mkdir()
    shutil.copy(package, channel / "linux-64")
    asyncio.run(index_fs(channel, write_zst=False, write_shards=False))
    repodata = json.loads((channel / "linux-64" / "repodata.json").read_text())
    assert package.name in repodata.get("packages.conda", {})

    async def solve_and_install(prefix: Path) -> list[Any]:
        records: list[Any] = await rattler.solve(
            sources=[rattler.Channel(channel.as_uri())],
            specs=["nightlydemo"],
            platforms=["linux-64", "noarch"],
            virtual_packages=rattler.VirtualPackage.detect(),
        )
        await rattler.install(records, target_prefix=prefix, cache_dir=tmp_path / "pkgs", show_progress=False)
        return records

    prefix = tmp_path / "env"
    records = asyncio.run(solve_and_install(prefix))
    assert [(r.name.normalized, str(r.version), str(r.build)) for r in records] == [
        ("nightlydemo", renv.BUILD_VERSION, "py311_cpu_1")
    ]
    site = prefix / "lib" / "python3.11" / "site-packages"
    assert list((site / "nightlydemo").glob("_native.cpython-311-*.so"))
    assert (site / "nightlydemo" / "__init__.py").exists()
    assert list((prefix / "conda-meta").glob(f"nightlydemo-{renv.BUILD_VERSION}-py311_cpu_1.json"))

    # The installed files are the package: Python 3.11 imports it from the prefix.
    got = probe(python, pythonpath=site)
    assert got["version"] == renv.BUILD_VERSION
    assert got["cuda"] is False
    assert got["file"].startswith(str(site))


CONSUMER = r"""
#include <demo/demo.h>
#include <cstdio>
int main() {
  std::printf("%s %d %d\n", demo::version(), demo::add(40, 2), demo::built_with_cuda() ? 1 : 0);
  return 0;
}
"""


@pytest.mark.parametrize(
    ("variant", "library"),
    [
        ("shared-with-deps", "libdemo.so"),
        ("static-without-deps", "libdemo.a"),
    ],
)
def test_libtorch_zip_holds_library_and_headers(
    variant: str, library: str, source_dir: Path, tmp_path: Path
) -> None:
    env = renv.contract_env(
        package_type="libtorch",
        source_dir=source_dir,
        output_dir=tmp_path / "out",
        work_dir=tmp_path / "work",
        libtorch_variant=variant,
    )
    run = renv.run_recipe("libtorch", env)
    zipped = the_package(run, ".zip")
    assert zipped.name == f"libtorch-{variant}-{renv.BUILD_VERSION}.zip"
    with zipfile.ZipFile(zipped) as archive:
        names = set(archive.namelist())
    assert f"libtorch/lib/{library}" in names
    assert "libtorch/include/demo/demo.h" in names
    assert "libtorch/include/demo/config.h" in names
    assert "libtorch/build-version" in names
    bundled = {"libtorch/lib/libstdc++.so.6", "libtorch/lib/libgcc_s.so.1"}
    if variant.endswith("with-deps"):
        assert bundled <= names
    else:
        assert not bundled & names
    assert not [n for n in names if "libc.so" in n or "libm.so" in n]  # glibc never bundled

    # As a user: unpack (unzip keeps the soname symlinks), build a program against it, run it.
    unpacked = tmp_path / "unpacked"
    subprocess.run(["unzip", "-q", str(zipped), "-d", str(unpacked)], check=True)
    home = unpacked / "libtorch"
    (tmp_path / "main.cpp").write_text(CONSUMER)
    exe = tmp_path / "consumer"
    link = [f"-L{home / 'lib'}", "-ldemo"]
    if library.endswith(".so"):
        link.append(f"-Wl,-rpath,{home / 'lib'}")
    subprocess.run(
        ["g++", "-std=c++14", str(tmp_path / "main.cpp"), f"-I{home / 'include'}", *link, "-o", str(exe)],
        check=True,
    )
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    assert out == [renv.BUILD_VERSION, "42", "0"]
    if library.endswith(".so"):
        # The program loads the libdemo of the zip, not some other copy.
        ldd = subprocess.run(["ldd", str(exe)], capture_output=True, text=True).stdout
        assert str(home / "lib" / "libdemo.so") in ldd


def test_wheel_recipe_fails_fast_on_linux(source_dir: Path, tmp_path: Path) -> None:
    env = renv.contract_env(
        package_type="wheel",
        source_dir=source_dir,
        output_dir=tmp_path / "out",
        work_dir=tmp_path / "work",
        desired_python="3.11",
        python=renv.pyenv_python("3.11"),
    )
    run = renv.run_recipe("wheel", env, timeout=30)
    assert run.returncode == 1
    assert "wheel builds are macOS builds; use manywheel on Linux" in run.output
    # Failed before anything else: nothing was made in its work folder.
    work = tmp_path / "work"
    assert not work.exists() or not any(work.iterdir())
    assert run.packages == []


def test_missing_interpreter_says_where_it_looked(source_dir: Path, tmp_path: Path) -> None:
    # No PYTHON: the recipe searches itself, as inside a container.
    env = renv.contract_env(
        package_type="manywheel",
        source_dir=source_dir,
        output_dir=tmp_path / "out",
        work_dir=tmp_path / "work",
        desired_python="3.4",
    )
    run = renv.run_recipe("manywheel", env, timeout=60)
    assert run.returncode == 1
    assert "no interpreter for DESIRED_PYTHON=3.4" in run.output
    assert "/opt/python/cp34-cp34/bin/python (not found)" in run.output
    assert "python3.4 on PATH (not found)" in run.output
    assert run.packages == []


def test_missing_cuda_toolkit_says_where_it_looked(source_dir: Path, tmp_path: Path) -> None:
    env = renv.contract_env(
        package_type="libtorch",
        source_dir=source_dir,
        output_dir=tmp_path / "out",
        work_dir=tmp_path / "work",
        desired_cuda="cu999",
        cuda_version="99.9",
        libtorch_variant="shared-without-deps",
    )
    run = renv.run_recipe("libtorch", env, timeout=60)
    assert run.returncode == 1
    assert "no CUDA 99.9 toolkit for DESIRED_CUDA=cu999" in run.output
    assert "/usr/local/cuda-99.9/bin/nvcc (not there)" in run.output
    assert run.packages == []


def test_project_that_ignores_build_version_fails(tmp_path: Path) -> None:
    """Any setuptools project builds; one whose version is not BUILD_VERSION is refused
    rather than published under the wrong version."""
    python = need_python("3.11")
    src = tmp_path / "src"
    (src / "otherpkg").mkdir(parents=True)
    (src / "otherpkg" / "__init__.py").write_text("")
    (src / "otherpkg" / "fast.c").write_text(
        '#include <Python.h>\nstatic struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "fast"};\n'
        "PyMODINIT_FUNC PyInit_fast(void) { return PyModule_Create(&m); }\n"
    )
    (src / "setup.py").write_text(
        "from setuptools import setup, Extension\n"
        "setup(name='otherpkg', version='1.0', packages=['otherpkg'],\n"
        "      ext_modules=[Extension('otherpkg.fast', ['otherpkg/fast.c'])])\n"
    )
    env = renv.contract_env(
        package_type="manywheel",
        source_dir=src,
        output_dir=tmp_path / "out",
        work_dir=tmp_path / "work",
        desired_python="3.11",
        python=python,
    )
    run = renv.run_recipe("manywheel", env)
    assert run.returncode == 1, run.describe()
    assert f"the wheel has version 1.0 but {renv.BUILD_VERSION} was expected" in run.output
    # The message names the setting to change.
    assert 'set version_from = "rewrite"' in run.output
    assert run.packages == []


def test_rewrite_gives_a_project_with_its_own_version_the_nightly_version(tmp_path: Path) -> None:
    """version_from = rewrite: the project builds 1.0 (a literal it compiles in), the recipe
    rewrites the wheel to BUILD_VERSION (+cpu has no local part), warns about the code, and
    the wheel installs with that version."""
    python = need_python("3.11")
    src = tmp_path / "src"
    (src / "litpkg").mkdir(parents=True)
    (src / "litpkg" / "__init__.py").write_text('__version__ = "1.0"\n')
    (src / "setup.py").write_text(
        "from setuptools import setup\nsetup(name='lit-pkg', version='1.0', packages=['litpkg'])\n"
    )
    env = renv.contract_env(
        package_type="manywheel", source_dir=src, output_dir=tmp_path / "out",
        work_dir=tmp_path / "work", desired_python="3.11", python=python,
        extra={"NIGHTLY_VERSION_FROM": "rewrite", "NIGHTLY_VERSION_REASON": "on purpose"},
    )
    run = renv.run_recipe("manywheel", env)
    assert run.returncode == 0, run.describe()
    assert "version strategy: rewrite (on purpose)" in run.output
    assert f"rewrote the wheel's version 1.0 to {renv.BUILD_VERSION}" in run.output
    assert "still says 1.0" in run.output
    (wheel,) = run.packages
    assert wheel.name.startswith(f"lit_pkg-{renv.BUILD_VERSION}-py3-none-any")
    site = tmp_path / "site"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--target", str(site), str(wheel)], check=True)
    got = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('lit-pkg'))"],
        env={"PYTHONPATH": str(site)}, capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert got == renv.BUILD_VERSION
