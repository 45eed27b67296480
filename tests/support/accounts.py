"""A build account and root's private home, for the tests of `[executor.local] user`
(docs/security.md): root runs nightly from its 0700 home, every build runs as the account.

    with build_account() as account, private_home() as home:
        ...
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


__all__ = ["PY", "account", "build_account", "home", "interpreter_in_home", "private_home",
           "venv_in_home"]
