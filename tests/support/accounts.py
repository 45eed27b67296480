"""A build account and root's private home, for the tests of `[executor.local] user`
(docs/security.md): root runs nightly from its 0700 home, every build runs as the account.

    with build_account() as account, private_home() as home:
        ...

and what those tests set up alike: a one-build project built by the account
(`user_project_config`), nightly run as root from its install in the home (`root_env`,
`nightly_as_root`), and a folder both root and the account write (`world_writable_folder`).
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.projects import local_machine
from tests.support.staged import Staged

PY = f"{sys.version_info.major}.{sys.version_info.minor}"


@contextmanager
def build_account() -> Iterator[pwd.struct_passwd]:
    """A fresh unprivileged account, removed afterwards with its build area."""
    if os.geteuid() != 0:
        raise RuntimeError("run as root: these tests are about root building as another account")
    name = f"nb{secrets.token_hex(4)}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                   check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=False)
        shutil.rmtree(f"/var/tmp/nightly-{name}", ignore_errors=True)


@contextmanager
def private_home() -> Iterator[Path]:
    """Root's private home: a 0700 folder, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="nightly-roothome-", dir="/tmp"))
    path.chmod(0o700)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def account() -> Iterator[pwd.struct_passwd]:
    """A fresh build account for one test (import the fixture into the test module)."""
    with build_account() as a:
        yield a


@pytest.fixture
def home() -> Iterator[Path]:
    """Root's 0700 home for one test (import the fixture into the test module)."""
    with private_home() as h:
        yield h


def interpreter_in_home(home: Path, st: Staged) -> Path:
    """An interpreter that lives in the 0700 home, as pyenv's python3 lives in root's
    ~/.pyenv: a copy of the system's (`st.python`), which finds its standard library where
    it was built to. No other account can run it."""
    python = home / "pyenv" / "versions" / PY / "bin" / f"python{PY}"
    python.parent.mkdir(parents=True)
    shutil.copy2(st.python, python)
    return python


def venv_in_home(home: Path, st: Staged, base: Path | None = None) -> Path:
    """nightly installed the README's way: a venv in the home (its interpreter and its
    packages out of any other account's reach), made by `python3 -m venv` from `base`
    (default: the system's interpreter). The venv sees the staged nightly (`st`, staged
    under the home) through a .pth file. Returns the venv's python."""
    venv = home / "venv"
    subprocess.run([str(base or st.python), "-m", "venv", "--without-pip", str(venv)],
                   check=True)
    site = venv / "lib" / f"python{PY}" / "site-packages"
    (site / "staged-nightly.pth").write_text(f"{st.site}\n")
    return venv / "bin" / "python"


def user_project_config(project: Path, *, name: str, user: str, base_version: str = "0.1.0",
                        extra: str = "") -> Path:
    """`project`/nightly.toml: the project `name` (source src/, recipes recipes/), one
    manywheel build (this Python, cpu) on one local machine, built by `user`
    ([executor.local] user; "" for none); `extra`: more tables ([smoke], [publish]...)."""
    config = project / "nightly.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"""
root = "nightlies"
recipes = "recipes"

[project]
name = "{name}"
source = "src"
base_version = "{base_version}"

[matrix.linux.manywheel]
pythons = ["{PY}"]
cudas = ["cpu"]

{local_machine(user=user)}
{extra}
""")
    return config


def root_env(st: Staged, home: Path) -> dict[str, str]:
    """The environment of root running nightly from its install in the home (`st`, staged
    under it): HOME there, root's own interpreters (`home`/pyenv/bin, once
    `private_interpreters` made it) first on its PATH."""
    return {"HOME": str(home), "PATH": f"{home / 'pyenv' / 'bin'}:{st.bin}:/usr/bin:/bin",
            "PYTHONPATH": str(st.site), "LANG": "C.UTF-8"}


def private_interpreters(st: Staged, home: Path) -> Path:
    """`home`/pyenv/bin with python{PY} in it, as a venv or pyenv in root's home puts its own
    interpreter first on root's PATH (out of the build user's reach)."""
    private = home / "pyenv" / "bin"
    if not private.exists():
        private.mkdir(parents=True)
        (private / f"python{PY}").symlink_to(st.python)
    return private


def nightly_as_root(st: Staged, home: Path, *args: str, private_python: bool = True,
                    timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`nightly ARGS` as root, run from its install in the home, with HOME there (and, with
    `private_python`, root's own interpreter first on its PATH)."""
    if private_python:
        private_interpreters(st, home)
    return subprocess.run([st.python, "-m", "nightly", *args], env=root_env(st, home),
                          capture_output=True, text=True, timeout=timeout, cwd=home,
                          check=False)


@contextmanager
def world_writable_folder(label: str) -> Iterator[Path]:
    """A sticky folder root and the build account both write, outside root's 0700 home and
    outside /tmp (a build's /tmp is its own: nightly.executors.box); removed afterwards."""
    path = Path(f"/var/tmp/nightlytest-{label}-{secrets.token_hex(4)}")
    path.mkdir(mode=0o700)
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


__all__ = ["PY", "account", "build_account", "home", "interpreter_in_home", "nightly_as_root",
           "private_home", "private_interpreters", "root_env", "user_project_config",
           "venv_in_home", "world_writable_folder"]
