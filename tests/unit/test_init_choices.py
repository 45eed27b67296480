"""What `nightly init` declares beyond the project's identity: the manylinux policy with the
toolchain that meets it, the smoke test's runtime dependencies, the install command."""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nightly.cli.init_choices import install_command
from nightly.config import load

Run = Callable[..., Any]
PY = f"{sys.version_info[0]}.{sys.version_info[1]}"


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _init(nightly: Run, tmp_path: Path, files: dict[str, str]) -> tuple[Any, Any]:
    src = _write(tmp_path / "src", files)
    config = tmp_path / "conf" / "nightly.toml"
    config.parent.mkdir()
    out = nightly("init", str(src), "--config", str(config))
    assert out.code == 0, out.err
    return out, load(config)


def test_a_cpp_project_with_dependencies_gets_the_policy_zig_and_its_dependencies(
    nightly: Run, tmp_path: Path
) -> None:
    before = dt.date.today()
    out, config = _init(nightly, tmp_path, {
        "pyproject.toml": '[build-system]\nrequires = ["scikit-build-core"]\n'
                          'build-backend = "scikit_build_core.build"\n'
                          '[project]\nname = "Geo-Lib"\nversion = "1.4.0"\n'
                          f'requires-python = ">={PY}"\n'
                          'dependencies = ["numpy>=1.20", "attrs; python_version > \'3\'"]\n'
                          '[project.optional-dependencies]\ntest = ["pytest"]\n',
        "src/geo.cpp": "int f() { return 1; }\n",
    })
    (matrix,) = [m for m in config.matrices if m.package == "manywheel"]
    assert (matrix.manylinux, matrix.toolchain) == ("2_28", "zig")
    assert config.smoke.dependencies == "index"
    assert "manylinux policy 2_28, toolchain zig (C++ (geo.cpp))" in out.out
    # An absolute index URL (it works from any folder); tonight's version, said in words.
    index = f"{(tmp_path / 'conf' / 'mirror').as_uri()}/whl/nightly/cpu/"
    want = (f'pip install --index-url {index} --extra-index-url https://pypi.org/simple '
            '"geo-lib==1.4.0.dev{}"')
    nights = {f"{d:%Y%m%d}" for d in (before, dt.date.today())}  # midnight may pass
    assert any(want.format(n) in out.out for n in nights), out.out
    assert any(f"tonight's wheels: Geo-Lib 1.4.0.dev{n} for Python" in out.out for n in nights)
    assert want.format("YYYYMMDD") in (tmp_path / "conf" / "nightly.toml").read_text()
    # The dependencies named in the config's comments, without their environment markers.
    text = (tmp_path / "conf" / "nightly.toml").read_text()
    assert "# Geo-Lib needs numpy, attrs at run time" in text, text
    assert "python_version" not in text
    assert "2 runtime dependencies installed" in out.out


def test_a_c_project_without_libm_keeps_the_sysroot_and_installs_its_wheel_alone(
    nightly: Run, tmp_path: Path
) -> None:
    _, config = _init(nightly, tmp_path, {
        "setup.py": "from setuptools import setup, Extension\n"
                    "setup(name='tinyc', version='0.2', ext_modules=[Extension('tinyc', ['tinyc.c'])])\n",
        "tinyc.c": "int add(int a, int b) { return a + b; }\n",
    })
    (matrix,) = [m for m in config.matrices if m.package == "manywheel"]
    assert (matrix.manylinux, matrix.toolchain) == ("2_28", "sysroot")
    assert config.smoke.dependencies == "none"


def test_a_c_project_calling_pow_gets_zig(nightly: Run, tmp_path: Path) -> None:
    _, config = _init(nightly, tmp_path, {
        "setup.py": "from setuptools import setup, Extension\n"
                    "setup(name='mathc', version='0.2', install_requires=['six'],"
                    " ext_modules=[Extension('mathc', ['m.c'])])\n",
        "m.c": "#include <math.h>\ndouble f(double x) { return pow(x, 2.5); }\n",
    })
    (matrix,) = [m for m in config.matrices if m.package == "manywheel"]
    assert matrix.toolchain == "zig"
    assert config.smoke.dependencies == "index"


def test_a_pure_project_declares_no_policy(nightly: Run, tmp_path: Path) -> None:
    _, config = _init(nightly, tmp_path, {
        "pyproject.toml": f'[project]\nname = "pure"\nversion = "1.0"\nrequires-python = ">={PY}"\n',
        "pure/__init__.py": "",
    })
    (matrix,) = [m for m in config.matrices if m.package == "manywheel"]
    assert matrix.manylinux == ""


def test_the_install_command_pins_the_night_when_dependencies_come_from_pypi() -> None:
    assert install_command("Pkg_A", "1.0", (), "URL/") == "pip install --pre --index-url URL/ pkg-a"
    # init prints tonight's line: pinned, as the README says, dependencies or not (issue 57)
    assert install_command("Pkg_A", "1.0", (), "URL/", "1.0.dev20260101") == (
        'pip install --index-url URL/ "pkg-a==1.0.dev20260101"')
    assert install_command("pkg", "1.0", ("x",), "URL/", "1.0.dev20260101") == (
        'pip install --index-url URL/ --extra-index-url https://pypi.org/simple '
        '"pkg==1.0.dev20260101"')
