"""Real servers and clients on loopback: pypiserver with an htpasswd file, `python -m
http.server` over a folder, fresh virtual environments and pip installing into them.

pypiserver's htpasswd support needs passlib (`pypiserver[passlib]`).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.net import free_port

PYPI_USER = "uploader"
PYPI_PASSWORD = "pypi-pass-3b8e1f-DO-NOT-LEAK"
VENV_BIN = Path(sys.executable).parent
Serve = Callable[[Path], str]  # serve(directory) -> base URL


@dataclass
class PypiServer:
    url: str  # the upload URL (legacy API) is the root
    packages: Path
    log: Path

    @property
    def simple(self) -> str:
        return self.url + "simple/"


@contextlib.contextmanager
def pypi_server(folder: Path) -> Iterator[PypiServer]:
    """pypiserver on a free loopback port, serving folder/packages, uploads allowed to
    PYPI_USER with PYPI_PASSWORD; its log in folder/pypiserver.log."""
    from passlib.apache import HtpasswdFile

    packages = folder / "packages"
    packages.mkdir()
    htpasswd = folder / "htpasswd"
    ht = HtpasswdFile(str(htpasswd), new=True, default_scheme="sha256_crypt")
    ht.set_password(PYPI_USER, PYPI_PASSWORD)
    ht.save()
    log = folder / "pypiserver.log"
    port = free_port()
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


@contextlib.contextmanager
def http_servers() -> Iterator[Serve]:
    """serve(directory) -> the base URL of `python -m http.server` over it; every server
    started is stopped at the end."""
    procs: list[subprocess.Popen[str]] = []

    def serve(directory: Path) -> str:
        proc = subprocess.Popen(
            [sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1",
             "--directory", str(directory)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )  # fmt: skip
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"port (\d+)", line)
        assert m, line
        # Keep draining stdout so the server never blocks on a full pipe.
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        return f"http://127.0.0.1:{m[1]}/"

    try:
        yield serve
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)


def download_tree(store: Any, dest: Path) -> None:
    """Every object of a nightly Store into the folder `dest`, under its key."""
    for obj in store.list(""):
        store.get(obj.key, dest / obj.key)


def fresh_venv(path: Path) -> Path:
    """A virtual environment without pip at `path`; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path / "bin" / "python"


def pip_install(python: Path, index: str, requirement: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """This interpreter's pip installing `requirement` (no dependencies, no cache) from the
    index `index` into the environment of `python`, with no PIP_* setting of the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-cache-dir"]
    cmd += ["--disable-pip-version-check", "--index-url", index, "--no-deps", requirement]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)
