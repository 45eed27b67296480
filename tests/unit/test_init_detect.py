"""version_from = "auto" (nightly.config.detect) and `nightly init` (nightly.cli.scaffold):
what is read from a project's source, and the file written from it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nightly.cli.init_facts import allowed_pythons, read_facts
from nightly.config import load
from nightly.config.detect import detect_version_strategy, resolve_version_from

Run = Callable[..., Any]


def _project(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.mark.parametrize(
    ("files", "strategy", "said"),
    [
        ({"pyproject.toml": '[build-system]\nrequires = ["setuptools>=64", "setuptools-scm[simple]>=8"]\n'},
         "setuptools-scm", "setuptools-scm"),
        ({"pyproject.toml": '[build-system]\nrequires = ["setuptools"]\n[tool.setuptools_scm]\n'},
         "setuptools-scm", "setuptools-scm"),
        ({"pyproject.toml": '[build-system]\nrequires = ["hatchling", "hatch-vcs"]\n'
                            '[tool.hatch.version]\nsource = "vcs"\n'}, "setuptools-scm", "hatch-vcs"),
        ({"pyproject.toml": '[build-system]\nrequires = ["hatchling", "hatch-vcs"]\n'
                            '[tool.hatch.version]\nsource = "vcs"\n',
          "PKG-INFO": "Metadata-Version: 2.1\nName: x\nVersion: 1.0\n"}, "rewrite", "PKG-INFO"),
        ({"pyproject.toml": '[build-system]\nrequires = ["setuptools", "versioningit"]\n'},
         "rewrite", "versioningit"),
        ({"setup.py": "import os\nsetup(version=os.environ['BUILD_VERSION'])\n"}, "env", "BUILD_VERSION"),
        ({"setup.py": "from setuptools import setup\nsetup(use_scm_version=True)\n"},
         "setuptools-scm", "setup.py uses setuptools-scm"),
        ({"setup.py": "setup(name='x', version='1.0')\n"}, "rewrite", "its own version"),
        ({"pyproject.toml": '[project]\nname = "x"\ndynamic = ["version"]\n'}, "rewrite",
         "a dynamic version"),
        ({"CMakeLists.txt": "project(x)\n"}, "env", "no pyproject.toml or setup.py"),
    ],
    ids=["scm-requires", "scm-tool", "hatch-vcs", "hatch-vcs-sdist", "versioningit", "env", "scm-setup-py",
         "literal", "attr", "cmake"],
)
def test_auto_detects_how_the_project_takes_its_version(
    tmp_path: Path, files: dict[str, str], strategy: str, said: str
) -> None:
    found = detect_version_strategy(_project(tmp_path, files))
    assert found.strategy == strategy
    assert said in found.reason


def test_a_configured_strategy_is_used_as_is(tmp_path: Path) -> None:
    _project(tmp_path, {"setup.py": "setup(version='1.0')\n"})
    assert resolve_version_from("keep", tmp_path).strategy == "keep"
    auto = resolve_version_from("auto", tmp_path)
    assert auto.strategy == "rewrite"
    assert auto.reason.startswith('version_from = "auto": ')


def test_allowed_pythons_follow_requires_python() -> None:
    assert allowed_pythons(">=3.10,<3.13") == ["3.10", "3.11", "3.12"]
    assert allowed_pythons(">=3.9.2") == ["3.9", "3.10", "3.11", "3.12", "3.13", "3.14",
                                          "3.15"]
    assert allowed_pythons("!=3.12.*,>=3.11") == ["3.11", "3.13", "3.14", "3.15"]
    assert allowed_pythons("") == allowed_pythons("not a specifier")


def test_facts_of_a_compiled_setup_py_project(tmp_path: Path) -> None:
    _project(tmp_path, {
        "setup.py": "from setuptools import setup, Extension\n"
                    "setup(name='fast-thing', python_requires='>=3.9',\n"
                    "      ext_modules=[Extension('fast_thing._c', ['src/c.c'])])\n",
        "src/c.c": "int x;\n",
        "pkg/fast_thing/__init__.py": '__version__ = "2.4.1rc1"\n',
        "tests/helper/__init__.py": "",
    })
    facts = read_facts(tmp_path)
    assert (facts.name, facts.version, facts.base_version) == ("fast-thing", "2.4.1rc1", "2.4.1")
    assert facts.requires_python == ">=3.9"
    assert facts.compiled
    assert "src/c.c" in facts.compiled_why
    assert facts.import_name == "fast_thing"
    assert facts.strategy.strategy == "rewrite"


def test_init_writes_a_loadable_file_and_never_overwrites(
    nightly: Run, tmp_path: Path
) -> None:
    src = _project(tmp_path / "purelib", {
        "pyproject.toml": '[build-system]\nrequires = ["setuptools", "setuptools-scm"]\n'
                          '[project]\nname = "pure-lib"\ndynamic = ["version"]\n'
                          f'requires-python = ">={sys.version_info[0]}.{sys.version_info[1]}"\n',
        "PKG-INFO": "Metadata-Version: 2.1\nName: pure-lib\nVersion: 0.3.0\n",
        "src/pure_lib/__init__.py": "",
    })
    config = tmp_path / "conf" / "nightly.toml"
    config.parent.mkdir()
    out = nightly("init", str(src), "--config", str(config))
    assert out.code == 0, out.err
    assert "pure Python" in out.out
    assert "needs no matrix" in out.out
    for command in ("plan", "images build", "run"):
        assert f"nightly {command} --config {config}" in out.out
    loaded = load(config)
    assert loaded.project.name == "pure-lib"
    assert loaded.project.base_version == "0.3.0"
    assert loaded.project.version_from == "setuptools-scm"
    assert loaded.smoke.import_name == "pure_lib"
    assert (config.parent / loaded.project.source).resolve() == src.resolve()
    # Pure Python: one build, not a matrix.
    assert [b.id for b in loaded.builds] == [f"manywheel_{loaded.builds[0].python}_cpu"]
    assert "@pure-lib" in str(loaded.images)
    text = config.read_text()
    again = nightly("init", str(src), "--config", str(config))
    assert again.code == 2
    assert "never overwrites" in again.err
    assert config.read_text() == text


def test_init_offers_3_15_where_the_machine_has_it(
    nightly: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _project(tmp_path / "fast", {
        "setup.py": "from setuptools import setup, Extension\n"
                    "setup(name='fast', version='1.0', python_requires='>=3.14',\n"
                    "      ext_modules=[Extension('fast._c', ['c.c'])])\n",
        "c.c": "int x;\n",
    })
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3.14").symlink_to(sys.executable)  # named as the host's interpreters are
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.pyenv
    monkeypatch.delenv("PYENV_ROOT", raising=False)
    config = tmp_path / "without.toml"
    out = nightly("init", str(src), "--config", str(config))
    assert out.code == 0, out.err
    assert "manywheels for Python 3.14\n" in out.out
    assert "requires-python allows Python 3.15 too, not found on this machine" in out.out
    assert [b.python for b in load(config).builds] == ["3.14"]
    (bin_dir / "python3.15").symlink_to(sys.executable)
    config = tmp_path / "with.toml"
    out = nightly("init", str(src), "--config", str(config))
    assert out.code == 0, out.err
    assert "manywheels for Python 3.14, 3.15" in out.out
    assert [b.python for b in load(config).builds] == ["3.14", "3.15"]


def test_init_of_nothing_is_a_usage_error(nightly: Run, tmp_path: Path) -> None:
    out = nightly("init", str(tmp_path / "nope"), "--config", str(tmp_path / "n.toml"))
    assert out.code == 2
    assert "does not exist" in out.err
    assert not (tmp_path / "n.toml").exists()


def test_the_import_name_comes_from_what_the_project_installs(tmp_path: Path) -> None:
    # pyahocorasick's sdist: a C extension `ahocorasick`, no package folder.
    _project(tmp_path / "a", {
        "setup.py": "setup(name='pyahocorasick', version='2.3.1',\n"
                    "      ext_modules=[Extension('ahocorasick', sources=['src/x.c'])])\n",
        "pyahocorasick.egg-info/top_level.txt": "ahocorasick\n",
    })
    assert read_facts(tmp_path / "a").import_name == "ahocorasick"
    # No egg-info: the extension's name.
    _project(tmp_path / "b", {
        "setup.py": "setup(name='py-thing', ext_modules=[Extension(name='thing.core', sources=[])])\n",
    })
    assert read_facts(tmp_path / "b").import_name == "thing"
