"""PyPI-style publishing against real servers and clients: pypiserver on a loopback port with
an htpasswd file, twine (through nightly.channels.pypi) uploading a wheel made in the test,
then pip installing it from the server into a fresh virtual environment.

pypiserver's htpasswd support needs passlib (`pypiserver[passlib]`).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from nightly import procs
from nightly.channels.pypi import safe_url, twine_upload
from nightly.errors import PublishError
from tests.support import wheels
from tests.support.servers import PYPI_PASSWORD, PYPI_USER, PypiServer, fresh_venv, pip_install

USER = PYPI_USER  # what the `pypiserver` fixture lets upload
PASSWORD = PYPI_PASSWORD
PROJECT = "nightly_pypi_demo"
pytestmark = pytest.mark.filterwarnings("ignore:.crypt. is deprecated:DeprecationWarning")


def make_wheel(out: Path, name: str, version: str, body: str) -> Path:
    """A minimal valid py3-none-any wheel with one module `name` (RECORD with hashes)."""
    return wheels.make_wheel(out, name, version, body=body, summary="a wheel made by the nightly tests")


def test_twine_upload_then_pip_install(
    pypiserver: PypiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[list[str], dict[str, str]]] = []
    real_call = procs.call

    def spy(cmd: list[str], **kw: Any) -> procs.Finished:
        env = kw.get("env")
        if "twine" in cmd:  # (every command nightly runs goes through procs.call)
            assert isinstance(env, dict)
            calls.append((list(cmd), dict(env)))
        return real_call(cmd, **kw)

    monkeypatch.setattr(procs, "call", spy)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-for-twine")
    dist = tmp_path / "dist"
    dist.mkdir()
    wheel = make_wheel(dist, PROJECT, "2.0.0", "VALUE = 'from pypiserver'\n")

    assert twine_upload([wheel], repository_url=pypiserver.url, username=USER, password=PASSWORD) == []
    assert (pypiserver.packages / wheel.name).read_bytes() == wheel.read_bytes()
    # Again, with a new file: the existing one is refused by the server ("already exists")
    # and counts as skipped; the new one goes up.
    other = make_wheel(dist, PROJECT, "2.0.1", "VALUE = 'newer'\n")
    skipped = twine_upload([wheel, other], repository_url=pypiserver.url, username=USER, password=PASSWORD)
    assert skipped == [wheel.name]
    assert (pypiserver.packages / other.name).read_bytes() == other.read_bytes()
    # Without skip_existing the second upload is an error.
    with pytest.raises(PublishError) as info:
        twine_upload(
            [wheel], repository_url=pypiserver.url, username=USER, password=PASSWORD, skip_existing=False
        )
    assert PASSWORD not in str(info.value)

    for argv, env in calls:
        assert not any(PASSWORD in a or USER in a for a in argv), argv
        assert env["TWINE_USERNAME"] == USER
        assert env["TWINE_PASSWORD"] == PASSWORD
        assert "AWS_SECRET_ACCESS_KEY" not in env

    assert len(calls) == 4

    python = fresh_venv(tmp_path / "venv")
    proc = pip_install(python, pypiserver.simple, f"{PROJECT}==2.0.0", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = subprocess.run(
        [str(python), "-c", f"import {PROJECT}; print({PROJECT}.VALUE, {PROJECT}.__file__)"],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    )  # fmt: skip
    value, where = out.stdout.split(" ", 2)[:2], out.stdout.split()[-1]
    assert " ".join(value) == "from pypiserver"
    assert where.startswith(str(tmp_path / "venv"))


def test_twine_wrong_password_is_an_error_without_the_password(
    pypiserver: PypiServer, tmp_path: Path
) -> None:
    wheel = make_wheel(tmp_path, PROJECT, "3.0.0", "")
    wrong = "wrong-pass-d00d-also-secret"
    with pytest.raises(PublishError) as info:
        twine_upload([wheel], repository_url=pypiserver.url, username=USER, password=wrong)
    text = str(info.value)
    assert "403" in text or "401" in text, text
    assert wrong not in text
    assert PASSWORD not in text
    assert not (pypiserver.packages / wheel.name).exists()

    # Credentials in the URL itself never show either.
    port = pypiserver.url.rsplit(":", 1)[1]
    url = f"http://{USER}:{wrong}@127.0.0.1:{port}"
    with pytest.raises(PublishError) as info:
        twine_upload([wheel], repository_url=url, username=USER, password=wrong)
    assert wrong not in str(info.value)
    assert safe_url(url) == f"http://***@127.0.0.1:{port}"


def test_twine_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PublishError, match="no such file"):
        twine_upload([tmp_path / "x.whl"], repository_url="http://127.0.0.1:9/", username="u", password="p")
