"""The container engine side of the container executor (container.py): where things are inside
a build's container, the executor's settings, the engine client and its errors, and the small
operations on one container (its name, its state once stopped, killing it).

The docker SDK is imported only where it is used, so `nightly --help` stays fast.
"""

from __future__ import annotations

import math
import os
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from nightly.config.retry import Backoff, default_backoffs
from nightly.config.timeouts import default_timeouts
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
    # How a request to the engine is retried: the configuration's [backoff.engine].
    engine_backoff: Backoff = field(default_factory=lambda: default_backoffs().engine)
    # How long a request waits for the engine's answer: [external_timeouts] engine_read.
    read_timeout_s: float = field(default_factory=lambda: default_timeouts().engine_read)

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
        return engine_client(settings.base_url, read_timeout_s=settings.read_timeout_s,
                             backoff=settings.engine_backoff)

    return make


# Requests that change nothing when sent twice: only these are sent again after a read that
# timed out (a POST, a build or a container's creation, may have been done already).
_IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


def engine_client(base_url: str | None, *, read_timeout_s: float, backoff: Backoff,
                  pool: int = POOL_SIZE) -> DockerClient:
    """A docker SDK client whose requests wait `read_timeout_s` for an answer (the SDK's own
    60 s is too short for a busy engine: `nightly images build` ended in a ReadTimeout
    traceback) and whose requests that could not connect, or idempotent ones (_IDEMPOTENT)
    whose answer did not come in time, are tried again with `backoff`'s pauses, up to its
    tries in all. What still fails is the caller's to name (`engine_trouble`)."""
    import docker
    from docker.errors import DockerException
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    class _Retry(Retry):
        def get_backoff_time(self) -> float:  # nightly's policy (jittered), not urllib3's
            return backoff.delay(len(self.history)) if self.history else 0.0

    timeout = max(1, math.ceil(read_timeout_s))
    # The SDK asks the engine its API version as it is made, before any retry is set: that
    # first request is tried again here.
    for n in backoff.tries():
        try:
            client = (docker.DockerClient(base_url=base_url, timeout=timeout, max_pool_size=pool)
                      if base_url else docker.from_env(timeout=timeout, max_pool_size=pool))
            break
        except DockerException as e:
            if n == backoff.attempts or engine_fault(e) is None:
                raise
    retries = _Retry(total=None, connect=backoff.attempts - 1, read=backoff.attempts - 1,
                     status=0, other=0, redirect=0, allowed_methods=_IDEMPOTENT,
                     raise_on_status=False, respect_retry_after_header=False)
    for adapter in client.api.adapters.values():
        if isinstance(adapter, HTTPAdapter):  # the unix socket's and TCP's: requests passes
            adapter.max_retries = retries     # max_retries to each urlopen
    return client


def engine_fault(exc: BaseException) -> str | None:
    """"slow" when the engine did not answer in time, "unreachable" when no connection was
    made, None for anything else (an answer that is an error): read through the causes the
    SDK, requests and urllib3 wrap each other's exceptions in."""
    from requests.exceptions import ConnectionError as RequestsConnectionError
    from requests.exceptions import ReadTimeout
    from urllib3.exceptions import MaxRetryError, ReadTimeoutError

    seen: list[BaseException] = []
    todo: list[object] = [exc]
    while todo:
        e = todo.pop()
        if not isinstance(e, BaseException) or any(e is x for x in seen) or len(seen) > 20:
            continue
        seen.append(e)
        if isinstance(e, (ReadTimeout, ReadTimeoutError)):
            return "slow"
        todo += [e.__cause__, e.__context__, *(e.args[:1])]
        if isinstance(e, MaxRetryError):
            todo.append(e.reason)
    return "unreachable" if any(isinstance(e, RequestsConnectionError) for e in seen) else None


def engine_trouble(exc: BaseException, where: str, read_timeout_s: float,
                   backoff: Backoff) -> str:
    """One line naming the engine and what it did (no answer in time, no connection)."""
    fault = engine_fault(exc)
    tries = f"{backoff.attempts} tries, [backoff.engine]"
    if fault == "slow":
        return (f"the container engine at {where} did not answer within "
                f"{seconds(read_timeout_s)} s ({tries}): it is busy or stuck; run the command "
                "again later, or raise [external_timeouts] engine_read")
    if fault == "unreachable":
        return (f"the container engine at {where} could not be reached ({tries}): "
                f"{first_line(exc)[:300]}")
    return f"the container engine at {where} failed: {first_line(exc)[:300]}"


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

