"""recipes/common/envkey.py: the build environment's key, and whether uv or pip fills it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.modules import load_file

SCRIPT = Path(__file__).resolve().parents[2] / "recipes" / "common" / "envkey.py"


envkey = load_file("envkey", SCRIPT)


@pytest.fixture
def uv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(envkey, "SYSTEM_FILES", [])  # this machine's /etc/pip.conf left out
    binary = tmp_path / "uv"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    return str(binary)


def _env(uv: str, home: Path, **more: str) -> dict[str, str]:
    # No configuration file of this machine's: a HOME and XDG folders of the test's own.
    return {"NIGHTLY_UV": uv, "HOME": str(home), "XDG_CONFIG_DIRS": str(home / "xdg"),
            "PIP_CONFIG_FILE": "", **more}


def test_uv_is_chosen_with_pips_sources_handed_on(uv: str, tmp_path: Path) -> None:
    env = _env(uv, tmp_path, PIP_INDEX_URL="https://idx.example/simple",
               PIP_EXTRA_INDEX_URL="https://a.example/simple https://b.example/simple",
               PIP_FIND_LINKS="/wheels", PIP_NO_INDEX="0")
    tool, reason, args = envkey.choose(env, (3, 12))
    assert (tool, reason) == ("uv", f"uv {uv}")
    assert args == ["--index-url", "https://idx.example/simple",
                    "--extra-index-url", "https://a.example/simple",
                    "--extra-index-url", "https://b.example/simple",
                    "--find-links", "/wheels",
                    "--index-strategy", "unsafe-best-match"]  # pip's rule across indexes


def test_a_wheelhouse_is_no_index_for_uv_too(uv: str, tmp_path: Path) -> None:
    env = _env(uv, tmp_path, PIP_NO_INDEX="1", PIP_FIND_LINKS="/day/wheelhouse")
    assert envkey.choose(env, (3, 12))[2] == ["--find-links", "/day/wheelhouse", "--no-index"]


def test_pip_conf_naming_an_index_is_handed_on(uv: str, tmp_path: Path) -> None:
    conf = tmp_path / ".config" / "pip" / "pip.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("[global]\nindex-url = https://mirror.example/simple\ncert = /ca.pem\n"
                    "[install]\nconstraint = /c.txt\n[freeze]\nall = true\n")
    tool, _, args = envkey.choose(_env(uv, tmp_path), (3, 12))
    assert tool == "uv"
    assert args == ["SSL_CERT_FILE=/ca.pem", "--index-url", "https://mirror.example/simple",
                    "--constraint", "/c.txt"]


def test_the_environment_wins_over_pip_conf(uv: str, tmp_path: Path) -> None:
    conf = tmp_path / "named.conf"
    conf.write_text("[global]\nindex-url = https://conf.example/simple\n")
    env = _env(uv, tmp_path, PIP_CONFIG_FILE=str(conf), PIP_INDEX_URL="https://env.example/s")
    assert envkey.choose(env, (3, 12))[2] == ["--index-url", "https://env.example/s"]


@pytest.mark.parametrize(("setting", "why"), [
    ("[global]\ntrusted-host = mirror.example\n", "pip's configuration sets trusted-host"),
    ("[install]\nno-binary = :all:\n", "pip's configuration sets no-binary"),
])
def test_pip_configured_beyond_what_uv_takes_keeps_pip(
    uv: str, tmp_path: Path, setting: str, why: str
) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text(setting)
    tool, reason, args = envkey.choose(_env(uv, tmp_path, PIP_CONFIG_FILE=str(conf)), (3, 12))
    assert (tool, args) == ("pip", [])
    assert reason.startswith(why)


def test_pip_without_uv_for_old_pythons_or_when_asked(uv: str, tmp_path: Path) -> None:
    assert envkey.choose(_env("", tmp_path), (3, 12))[:2] == (
        "pip", "no uv here (NIGHTLY_UV unset or not runnable)")
    assert envkey.choose(_env(str(tmp_path / "missing"), tmp_path), (3, 12))[0] == "pip"
    assert envkey.choose(_env(uv, tmp_path), (3, 7))[:2] == (
        "pip", "uv does not make environments of Python 3.7")
    assert envkey.choose(_env(uv, tmp_path, NIGHTLY_INSTALLER="pip"), (3, 12))[0] == "pip"
    assert envkey.choose(_env(uv, tmp_path, NIGHTLY_INSTALLER="auto"), (3, 12))[0] == "uv"


def test_devnull_config_file_means_no_configuration(uv: str, tmp_path: Path) -> None:
    conf = tmp_path / ".config" / "pip" / "pip.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("[global]\ntrusted-host = x\n")
    assert envkey.choose(_env(uv, tmp_path, PIP_CONFIG_FILE=os.devnull), (3, 12))[0] == "uv"


def _key(tmp_path: Path, reqs: list[str], installer: str = "uv 0.9", **env: str) -> list[str]:
    lines: list[str] = envkey.key_lines({"HOME": str(tmp_path), **env}, sys.executable,
                                        installer, reqs, [])
    return lines


def test_the_key_names_interpreter_requirements_sources_and_installer(tmp_path: Path) -> None:
    key = _key(tmp_path, ["setuptools>=64", "cython"], PIP_INDEX_URL="https://i.example/s")
    fields = dict(line.split(": ", 1) for line in key)
    assert fields["interpreter"] == os.path.realpath(sys.executable)
    assert fields["python version"] == sys.version.replace("\n", " ")
    assert fields["build requirements"] == "setuptools>=64 cython"
    assert fields["source PIP_INDEX_URL"] == "https://i.example/s"
    assert fields["installer"] == "uv 0.9"
    assert fields["isolation"] == "1"
    assert key == _key(tmp_path, ["setuptools>=64", "cython"], PIP_INDEX_URL="https://i.example/s")


def test_what_changed_is_named(tmp_path: Path) -> None:
    old = _key(tmp_path, ["setuptools>=64"])
    assert envkey.why_different(old, old) is None
    assert envkey.why_different(old, _key(tmp_path, ["setuptools>=70"])) == (
        "its build requirements changed (setuptools>=64 -> setuptools>=70)")
    secret = _key(tmp_path, ["setuptools>=64"], PIP_INDEX_URL="https://u:tok@i.example/s")
    why = envkey.why_different(old, secret)
    assert why == "its key changed: source PIP_INDEX_URL"  # never the URL: a credential
    assert envkey.why_different(old, _key(tmp_path, ["setuptools>=64"], "pip")) == (
        "its key changed: installer")


def test_a_pip_conf_change_changes_the_key(tmp_path: Path) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://a.example/simple\n")
    first = envkey.key_lines({}, sys.executable, "pip", [], [str(conf)])
    conf.write_text("[global]\nindex-url = https://b.example/simple\n")
    assert envkey.why_different(first, envkey.key_lines({}, sys.executable, "pip", [], [str(conf)])) \
        == "its key changed: source pip configuration files"


def test_compare_reads_the_key_file_and_ignores_the_backends_line(tmp_path: Path) -> None:
    def compare(key_file: Path, new: list[str]) -> tuple[int, str]:
        proc = subprocess.run([sys.executable, str(SCRIPT), "compare", str(key_file)],
                              input="\n".join(new) + "\n", capture_output=True, text=True,
                              check=False)
        return proc.returncode, proc.stdout.strip()

    key = _key(tmp_path, ["setuptools"])
    key_file = tmp_path / "key"
    assert compare(key_file, key) == (
        1, "it has no key file (its fill did not finish, or the key was removed)")
    key_file.write_text("\n".join([*key, "backend asks for: wheel"]) + "\n")
    assert compare(key_file, key) == (0, "")
    assert compare(key_file, _key(tmp_path, ["setuptools", "numpy"]))[0] == 1
    key_file.write_text("garbage\n")
    assert compare(key_file, key)[0] == 1
