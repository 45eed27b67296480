"""[build] and [project] version_from: parsed, defaulted, checked, and handed to recipes."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from nightly.builds.run.jobs import build_env
from nightly.config import load
from nightly.core.matrix import nightly_version
from nightly.errors import ConfigError

WriteConfig = Callable[..., Path]
BUILDREQS = Path(__file__).resolve().parents[2] / "recipes" / "common" / "buildreqs.py"


def test_defaults_are_isolated_env_builds_from_the_hosts_pip_config(
    write_config: WriteConfig, minimal_config_text: str
) -> None:
    config = load(write_config(minimal_config_text))
    assert config.project.version_from == "auto"
    assert config.build.isolation is True
    assert config.build.wheelhouse is False
    env = build_env(config)
    # "auto" is resolved per night from the source (jobs.version_env), not here.
    assert env == {"NIGHTLY_VERSION_FROM": "auto", "NIGHTLY_BUILD_ISOLATION": "1",
                   "NIGHTLY_INSTALLER": "auto"}  # uv where found, else pip (envkey.py)
    assert not any(k.startswith("PIP_") for k in env)


def test_build_keys_reach_the_recipe_as_pip_settings(
    write_config: WriteConfig, minimal_config_text: str
) -> None:
    text = minimal_config_text.replace(
        'base_version = "1.0.0"', 'base_version = "1.0.0"\nversion_from = "setuptools-scm"'
    ) + (
        "\n[build]\nisolation = false\nindex_url = \"http://127.0.0.1:9/simple\"\n"
        'extra_index_urls = ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"]\n'
        'find_links = ["/srv/wheels"]\n'
    )
    config = load(write_config(text))
    env = build_env(config)
    assert env["NIGHTLY_VERSION_FROM"] == "setuptools-scm"
    assert env["NIGHTLY_BUILD_ISOLATION"] == "0"
    assert env["PIP_INDEX_URL"] == "http://127.0.0.1:9/simple"
    # pip reads several URLs from one variable, separated by whitespace.
    assert env["PIP_EXTRA_INDEX_URL"] == "http://127.0.0.1:9/a http://127.0.0.1:9/b"
    assert env["PIP_FIND_LINKS"] == "/srv/wheels"


def test_bad_version_from_names_the_choices(
    write_config: WriteConfig, minimal_config_text: str
) -> None:
    text = minimal_config_text.replace(
        'base_version = "1.0.0"', 'base_version = "1.0.0"\nversion_from = "setuptools_scm"'
    )
    with pytest.raises(ConfigError) as exc:
        load(write_config(text))
    assert exc.value.key == "project.version_from"
    assert "auto, env, setuptools-scm, rewrite, keep" in str(exc.value)
    assert "setuptools-scm" in (exc.value.hint or str(exc.value))


def test_unknown_build_key_is_rejected_with_the_closest(
    write_config: WriteConfig, minimal_config_text: str
) -> None:
    text = minimal_config_text + '\n[build]\nindex-url = "http://127.0.0.1:9/simple"\n'
    with pytest.raises(ConfigError) as exc:
        load(write_config(text))
    assert "index-url" in str(exc.value)
    assert "index_url" in str(exc.value)


def test_a_wheelhouse_needs_isolated_builds(
    write_config: WriteConfig, minimal_config_text: str
) -> None:
    text = minimal_config_text + "\n[build]\nisolation = false\nwheelhouse = true\n"
    with pytest.raises(ConfigError) as exc:
        load(write_config(text))
    assert exc.value.key == "build.wheelhouse"
    assert "isolation = true" in str(exc.value) + (exc.value.hint or "")


def test_keep_means_the_base_version_itself() -> None:
    date = dt.date(2026, 11, 21)
    assert nightly_version("3.0.2", date, "keep") == "3.0.2"
    assert nightly_version("3.0.2", date, "env") == "3.0.2.dev20261121"
    assert nightly_version("3.0.2", date, "setuptools-scm") == "3.0.2.dev20261121"


def _project(tmp_path: Path, requires: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(
        f'[build-system]\nrequires = {requires}\nbuild-backend = "setuptools.build_meta"\n'
    )
    return tmp_path


def _check(src: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BUILDREQS), "check", str(src)], capture_output=True, text=True
    )


def test_buildreqs_names_each_missing_or_too_old_requirement(tmp_path: Path) -> None:
    # An extra and a version pin in one array: the `]` of the extra must not end it.
    src = _project(
        tmp_path,
        '["pytest[testing]>=9999", "no-such-dist-here>=1", '
        '"skipped-by-marker; python_version < \'3\'", "packaging"]',
    )
    got = _check(src)
    assert got.returncode == 1, got.stdout
    have = pytest.__version__
    assert f"pytest[testing]>=9999 ([build-system] requires; installed: {have})" in got.stdout
    assert "no-such-dist-here>=1 ([build-system] requires; not installed)" in got.stdout
    assert "skipped-by-marker" not in got.stdout
    assert "packaging" not in got.stdout.split("not met:")[1].split("Install them")[0]
    assert "[build] isolation = true" in got.stdout


def _in_tree_backend(tmp_path: Path, dynamic: list[str]) -> Path:
    (tmp_path / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["packaging>=20"]\n'
        'build-backend = "backend"\nbackend-path = ["."]\n'
    )
    (tmp_path / "backend.py").write_text(
        f"def get_requires_for_build_wheel(config_settings=None):\n    return {dynamic!r}\n"
    )
    return tmp_path


def test_buildreqs_passes_when_everything_is_installed(tmp_path: Path) -> None:
    got = _check(_in_tree_backend(tmp_path, ["pytest>=7"]))
    assert got.returncode == 0, got.stdout + got.stderr
    assert "build requirements met" in got.stdout
    assert "pytest>=7" in got.stdout


def test_buildreqs_checks_what_the_backend_asks_for(tmp_path: Path) -> None:
    got = _check(_in_tree_backend(tmp_path, ["ninja-not-installed>=1.8.2"]))
    assert got.returncode == 1
    assert "ninja-not-installed>=1.8.2 (asked for by backend; not installed)" in got.stdout


def test_a_container_build_in_a_declared_builder_gets_its_interpreter_from_nightly(
    tmp_path: Path,
) -> None:
    """PYTHON is decided once, by nightly, where nightly made the image: the declared
    spec's interpreter under /opt/python; the local executor finds the host's itself."""
    from nightly.builds.run.jobs import interpreter_env
    from nightly.core.matrix import Build

    path = tmp_path / "nightly.toml"
    path.write_text("""\
[project]
name = "demo"
source = "."
base_version = "1.0.0"

[matrix.linux.manywheel]
pythons = ["3.12"]
cudas = ["cpu"]

[[machines]]
name = "a"
platform = "linux"
queues = 1
executor = "container"

[builders.b]
pythons = { "3.12" = "host:/opt/some/python3.12" }
suite = "bookworm"

[images.default]
default = "@b"
""")
    from nightly import config as cfg

    config = cfg.load(path)
    build = Build(package="manywheel", python="3.12", cuda="cpu")
    assert interpreter_env(config, build, "container") == {
        "PYTHON": "/opt/python/cp312-cp312/bin/python"}
    assert interpreter_env(config, build, "local") == {}
    other = Build(package="manywheel", python="3.11", cuda="cpu")
    assert interpreter_env(config, other, "container") == {}  # not in the image: the recipe looks
