"""The pytest fixtures over tests/support, registered for every test folder by
tests/conftest.py (a test module takes them by name; none imports a conftest).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import (
    SECRET_NAME,
    SECRET_VALUE,
    Started,
    alive,
    run_nightly,
    start_nightly,
    wait_for,
)
from tests.support.engine import engine
from tests.support.fixture_types import IsAlive, MakeProject, MakeRecipe, RunCli, StartCli, WaitUntil
from tests.support.projects import Project, recipe_text, write_project
from tests.support.s3 import Moto, moto_server
from tests.support.servers import PypiServer, Serve, http_servers, pypi_server

# The S3 credentials of the `moto` fixture's server (tests check that they are never printed).
MOTO_ACCESS_KEY = "AKIANIGHTLYTESTKEY42"
MOTO_SECRET_KEY = "nightly-test-secret-DO-NOT-PRINT"

__all__ = [
    "bucket",
    "caller_secret",
    "engine",
    "http_server",
    "is_alive",
    "make_recipe",
    "moto",
    "moto_endpoint",
    "night_project",
    "pypiserver",
    "run_cli",
    "start_cli",
    "wait_until",
]


@pytest.fixture
def night_project(tmp_path: Path) -> Iterator[MakeProject]:
    """night_project(matrix=TOML, behaviours={build_id: spec}, queues=2, extra=TOML,
    recipes={package: bash text}, missing_pythons=(), name="p") -> Project in tmp_path.

    `extra` is appended to nightly.toml (e.g. "[retries]\\ninfra = 1"). At teardown every
    process a recipe recorded is killed (the test's own assertions come first)."""
    made: list[Project] = []

    def make(name: str = "p", **kwargs: Any) -> Project:
        p = write_project(tmp_path / name, **kwargs)
        made.append(p)
        return p

    yield make
    for p in made:
        for pid in p.pids():
            if alive(pid):
                with suppress(OSError):
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def make_recipe() -> MakeRecipe:
    """make_recipe(signals, behaviours, default="ok") -> the text of a configurable recipe."""
    return recipe_text


@pytest.fixture
def caller_secret() -> tuple[str, str]:
    """(name, value) of the secret in the environment of every `nightly` these tests run."""
    return SECRET_NAME, SECRET_VALUE


@pytest.fixture
def run_cli() -> RunCli:
    """run_cli(args, cwd=None, env=None, timeout=90) -> (code, stdout, stderr)."""
    return run_nightly


@pytest.fixture
def start_cli(tmp_path: Path) -> Iterator[StartCli]:
    """start_cli(args, cwd=None, env=None) -> Started: `nightly ARGS` running in the
    background (for kill -9, SIGINT and lock tests). Killed at teardown if still running."""
    started: list[Started] = []

    def start(args: Sequence[str], cwd: Path | None = None, *, env: dict[str, str] | None = None) -> Started:
        s = start_nightly(args, tmp_path, len(started), cwd, env=env)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def wait_until() -> WaitUntil:
    """wait_until(pred, timeout=30, what="") polls pred until true, else fails."""
    return wait_for


@pytest.fixture
def is_alive() -> IsAlive:
    return alive


@pytest.fixture(scope="module")
def moto() -> Iterator[Moto]:
    """moto's S3 server for a test module, MOTO_ACCESS_KEY/MOTO_SECRET_KEY in the environment."""
    with moto_server(MOTO_ACCESS_KEY, MOTO_SECRET_KEY) as m:
        yield m


@pytest.fixture
def moto_endpoint(moto: Moto) -> str:
    """The endpoint URL of the `moto` fixture's server."""
    return moto.endpoint


@pytest.fixture
def bucket(moto: Moto) -> str:
    """A new bucket on the `moto` server."""
    return moto.new_bucket()


@pytest.fixture
def pypiserver(tmp_path: Path) -> Iterator[PypiServer]:
    """pypiserver on loopback (servers.PYPI_USER / PYPI_PASSWORD may upload)."""
    with pypi_server(tmp_path) as server:
        yield server


@pytest.fixture
def http_server() -> Iterator[Serve]:
    """serve(directory) -> base URL of a `python -m http.server` over it (stopped at teardown)."""
    with http_servers() as serve:
        yield serve
