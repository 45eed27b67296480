"""PyPI-style publishing against real servers and clients: pypiserver on a loopback port with
an htpasswd file, twine (through nightly.publish.pypi) uploading a wheel made in the test,
then pip installing it from the server into a fresh virtual environment.

pypiserver's htpasswd support needs passlib (`pypiserver[passlib]`).
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nightly.errors import PublishError
from nightly.publish.pypi import safe_url, twine_upload

USER = "uploader"
PASSWORD = "pypi-pass-3b8e1f-DO-NOT-LEAK"
PROJECT = "nightly_pypi_demo"
VENV_BIN = Path(sys.executable).parent
pytestmark = pytest.mark.filterwarnings("ignore:.crypt. is deprecated:DeprecationWarning")


def make_wheel(out: Path, name: str, version: str, body: str) -> Path:
    """A minimal valid py3-none-any wheel with one module `name` (RECORD with hashes)."""
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": body.encode(),
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            f"Summary: a wheel made by the nightly tests\n"
        ).encode(),
        f"{dist_info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: nightly-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for arcname, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{arcname},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = out / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for arcname, data in files.items():
            zf.writestr(arcname, data)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PypiServer:
    url: str  # the upload URL (legacy API) is the root
    packages: Path
    log: Path

    @property
    def simple(self) -> str:
        return self.url + "simple/"


@pytest.fixture
def pypiserver(tmp_path: Path) -> Iterator[PypiServer]:
    from passlib.apache import HtpasswdFile

    packages = tmp_path / "packages"
    packages.mkdir()
    htpasswd = tmp_path / "htpasswd"
    ht = HtpasswdFile(str(htpasswd), new=True, default_scheme="sha256_crypt")
    ht.set_password(USER, PASSWORD)
    ht.save()
    log = tmp_path / "pypiserver.log"
    port = _free_port()
    cmd = [
        str(VENV_BIN / "pypi-server"), "run", "-i", "127.0.0.1", "-p", str(port),
        "-P", str(htpasswd), "-a", "update", "--disable-fallback", "--hash-algo", "sha256",
        str(packages),
    ]  # fmt: skip
    with open(log, "wb") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url + "simple/", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"pypiserver did not start:\n{log.read_text()}")
            time.sleep(0.2)
        yield PypiServer(url, packages, log)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _fresh_venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path / "bin" / "python"


def _pip_install(python: Path, index: str, requirement: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-cache-dir"]
    cmd += ["--disable-pip-version-check", "--index-url", index, "--no-deps", requirement]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def test_twine_upload_then_pip_install(
    pypiserver: PypiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[list[str], dict[str, str]]] = []
    real_run = subprocess.run

    def spy(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[bytes]:
        env = kw.get("env")
        if "twine" in cmd:  # (this patches the subprocess module itself)
            assert isinstance(env, dict)
            calls.append((list(cmd), dict(env)))
        return real_run(cmd, **kw)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(subprocess, "run", spy)
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

    python = _fresh_venv(tmp_path / "venv")
    proc = _pip_install(python, pypiserver.simple, f"{PROJECT}==2.0.0", tmp_path)
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
