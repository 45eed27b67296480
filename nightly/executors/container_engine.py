"""The container engine side of the container executor (container.py): where things are inside
a build's container, the executor's settings, the engine client and its errors, and the small
operations on one container (its name, its state once stopped, killing it).

The docker SDK is imported only where it is used, so `nightly --help` stays fast.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from nightly.config.retry import Backoff, default_backoffs
from nightly.executors.base import ExecResult

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container

ClientFactory = Callable[[], "DockerClient"]

# Where things are inside the container.
SOURCE_MOUNT = "/nightly/source"
RECIPES_MOUNT = "/nightly/recipes"
OUTPUT_MOUNT = "/nightly/output"
CUDA_MOUNT = "/usr/local/cuda"
WHEELHOUSE_MOUNT = "/nightly/wheelhouse"
# The host's CA bundle, so pip in a build reaches the index the host reaches (a site whose
# egress goes through a TLS-inspecting proxy trusts that proxy's CA on the host only).
CA_MOUNT = "/nightly/ca-certificates.crt"
CA_ENV = ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")
# Scratch space lives in the container's own writable layer (on disk, not in memory, and gone
# with the container); /tmp is writable by any uid in every image we know of.
SCRATCH = "/tmp/nightly"
WORK_DIR = f"{SCRATCH}/work"
HOME_DIR = f"{SCRATCH}/home"
STARTED_MARKER = f"{SCRATCH}/.started"

# Labels on every container this executor creates.
LABEL_MANAGED = "nightly.managed"
# A builder image's toolkit (nvcc's "release" line), set by nightly.images when it builds one.
NVCC_LABEL = "org.nightly.nvcc"
LABEL_BUILD_ID = "nightly.build-id"
# The job's own output folder on the host: unique per day and build, so reaping after a
# killed run never touches a container another day's live run has for the same build id.
LABEL_JOB = "nightly.job"

# The container's command: `bash -c WRAPPER RECIPE`. The first start records that it ran,
# makes HOME and WORK_DIR and runs the recipe; a second start (only --keep-container does
# that) keeps the container up for `exec` instead of running the recipe again.
WRAPPER = (
    f'if [ -e {STARTED_MARKER} ]; then echo "[nightly] kept for debugging"; '
    "while :; do sleep 3600; done; fi; "
    f'mkdir -p -- "$HOME" "$WORK_DIR" && : > {STARTED_MARKER} && cd -- "$WORK_DIR" '
    '&& exec bash -- "$0" "$@"'
)

POLL_S = 0.1  # how often the supervisor looks at the cancel event and the deadline
FIRST_LOOK_S = 0.05  # first look at the container's state after the start; then doubling
MAX_LOOK_GAP_S = 5.0  # ... up to this
KILL_WAIT_S = 30.0  # how long to wait for a killed container to be reported stopped
LOG_GRACE_S = 2.0  # how long the log stream may take to end after the container stopped
RECONNECT_PAUSE_S = 0.5  # between attempts to follow the logs again after the stream broke
POOL_SIZE = 32  # HTTP connections to the engine (each running build holds two)

USER_RE = re.compile(r"^\d+:\d+$")
MEMORY_RE = re.compile(r"^\d+(\.\d+)?[bkmg]?$", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class ContainerSettings:
    """How the container executor talks to the engine and shapes each build's container."""

    # Engine address, e.g. "unix:///tmp/nightly-engine/podman.sock"; None: DOCKER_HOST, else
    # the Docker CLI's current context, else the default socket.
    base_url: str | None = None
    # Default memory limit per build ("8g"); a job's own memory_limit wins.
    memory_limit: str | None = None
    # "uid:gid" to run builds as; None: the uid:gid of the process running nightly.
    user: str | None = None
    # CUDA id ("cu130") -> host toolkit folder, mounted read-only at /usr/local/cuda.
    cuda_mounts: Mapping[str, Path | str] = field(default_factory=dict)
    # Request GPU access (device_requests) for every job; a job can also ask with job.gpu.
    gpu: bool = False
    # Keep each container after its build (for debugging) instead of removing it.
    keep_container: bool = False
    # In preflight, try to pull images that are missing.
    pull: bool = False
    # High, so memory pressure on the host kills a build rather than the orchestrator.
    oom_score_adj: int = 1000
    # Extra labels on every container.
    labels: Mapping[str, str] = field(default_factory=dict)
    # How removing a container is retried: the configuration's [backoff.engine].
    engine_backoff: Backoff = field(default_factory=lambda: default_backoffs().engine)

    def __post_init__(self) -> None:
        if self.user is not None and not USER_RE.match(self.user):
            raise ValueError(f"container user must be 'uid:gid' (numbers), got {self.user!r}")
        if self.memory_limit is not None and not MEMORY_RE.match(self.memory_limit):
            raise ValueError(f"memory limit must look like 512m or 8g, got {self.memory_limit!r}")
        if not -1000 <= self.oom_score_adj <= 1000:
            raise ValueError(f"oom_score_adj must be in -1000..1000, got {self.oom_score_adj}")


def default_client_factory(settings: ContainerSettings) -> ClientFactory:
    """A factory for a docker SDK client to the engine the settings name."""

    def make() -> DockerClient:
        import docker

        if settings.base_url:
            return docker.DockerClient(base_url=settings.base_url, max_pool_size=POOL_SIZE)
        return docker.from_env(max_pool_size=POOL_SIZE)

    return make


def engine_errors() -> tuple[type[BaseException], ...]:
    """The exceptions the docker SDK raises when the engine fails or cannot be reached."""
    from docker.errors import DockerException
    from requests.exceptions import RequestException

    return (DockerException, RequestException)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def seconds(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def container_name(build_id: str) -> str:
    safe = re.sub(r"[^a-zA-Z0-9_.-]", "-", build_id).strip("-.") or "build"
    return f"nightly-{safe}-{secrets.token_hex(3)}"


def infra(message: str) -> ExecResult:
    return ExecResult(exit_status=None, reason=f"executor error: {message}", infra=True)


STOPPED = frozenset({"exited", "stopped", "dead"})


def stopped_state(container: Container) -> Mapping[str, object] | None:
    """The container's State when it has stopped (ExitCode is final then), else None."""
    container.reload()
    state: Mapping[str, object] = container.attrs.get("State") or {}
    return state if state.get("Status") in STOPPED else None


def kill(container: Container) -> None:
    try:
        container.kill()
    except engine_errors():
        pass  # already stopped, or gone: removal follows anyway


def host_ca_bundle() -> str | None:
    """The CA bundle pip trusts on this host (PIP_CERT, then the TLS variables, then Debian's
    bundle), or None: mounted into builds so isolated builds use the host's trust."""
    for var in CA_ENV:
        value = os.environ.get(var, "")
        if value and os.path.isfile(value):
            return value
    default = "/etc/ssl/certs/ca-certificates.crt"
    return default if os.path.isfile(default) else None

