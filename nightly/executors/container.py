"""Run each build in a fresh container through the Docker Engine API (Docker or Podman).

One container per build, from `job.image`:

- mounts: the source read-only at /nightly/source, the recipes read-only at /nightly/recipes,
  the build's output folder read-write at /nightly/output, optionally a host CUDA toolkit
  read-only at /usr/local/cuda; nothing else of the host (no home, no engine socket);
- environment: `job.env` plus SOURCE_DIR, OUTPUT_DIR, WORK_DIR and HOME (writable folders
  inside the container), nothing of the host's; PATH is the image's own (the engine's default
  when the image sets none), so images that put their toolchains on PATH keep working;
- user: the invoking process's uid:gid (or the configured one), so what the build writes to
  its output folder belongs to whoever runs `nightly`, not root;
- output streamed from the engine into the log as it comes (a thread follows the container's
  logs, and follows them again when the stream breaks), so a build that dies or runs out of
  memory still leaves its log; once the container stopped its whole log is read and what the
  stream missed is passed on (Podman's follow stream can lose the tail or never answer),
  each byte exactly once;
- timeout and cancel kill the container; a memory limit that is hit is reported as "out of
  memory" (exit status 137 under a limit: Podman does not set State.OOMKilled);
- the container is removed on every path (success, failure, timeout, cancel, an exception in
  the orchestrator), unless `keep_container` is set: then it is restarted in a keep-alive mode
  (the recipe does not run again) so `docker exec -it ID bash` can enter it.

The docker SDK is imported only where it is used, so `nightly --help` stays fast.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nightly.errors import ExecutorError
from nightly.executors.base import ExecResult, Executor, Job, OutputSink

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container

ClientFactory = Callable[[], "DockerClient"]

# Where things are inside the container.
SOURCE_MOUNT = "/nightly/source"
RECIPES_MOUNT = "/nightly/recipes"
OUTPUT_MOUNT = "/nightly/output"
CUDA_MOUNT = "/usr/local/cuda"
# Scratch space lives in the container's own writable layer (on disk, not in memory, and gone
# with the container); /tmp is writable by any uid in every image we know of.
SCRATCH = "/tmp/nightly"
WORK_DIR = f"{SCRATCH}/work"
HOME_DIR = f"{SCRATCH}/home"
STARTED_MARKER = f"{SCRATCH}/.started"

# Labels on every container this executor creates.
LABEL_MANAGED = "nightly.managed"
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


def _engine_errors() -> tuple[type[BaseException], ...]:
    """The exceptions the docker SDK raises when the engine fails or cannot be reached."""
    from docker.errors import DockerException
    from requests.exceptions import RequestException

    return (DockerException, RequestException)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _seconds(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


@dataclass
class _Watch:
    """What the helper threads of one build report back to its supervisor."""

    done: threading.Event = field(default_factory=threading.Event)
    status: Mapping[str, Any] | None = None
    wait_error: BaseException | None = None
    log_error: BaseException | None = None
    log_done: threading.Event = field(default_factory=threading.Event)
    reconnects: int = 0
    out_lock: threading.Lock = field(default_factory=threading.Lock)
    emitted: int = 0  # bytes of the engine's log passed on so far
    closed: bool = False  # set once run() returns: no output after that


class ContainerExecutor(Executor):
    """Run each job's recipe in a fresh container from job.image."""

    name = "container"

    def __init__(
        self,
        settings: ContainerSettings | None = None,
        *,
        client: DockerClient | None = None,
        client_factory: ClientFactory | None = None,
    ) -> None:
        self.settings = settings or ContainerSettings()
        self._client = client
        self._owns_client = client is None
        self._factory = client_factory or default_client_factory(self.settings)
        self._lock = threading.Lock()
        self._live: dict[str, Container] = {}
        self._engine_cli: str | None = None

    # -- engine -----------------------------------------------------------------------------

    def engine_address(self) -> str:
        """The engine this executor talks to, in words for messages."""
        if self.settings.base_url:
            return self.settings.base_url
        host = os.environ.get("DOCKER_HOST")
        if host:
            return f"{host} (DOCKER_HOST)"
        return "the default engine socket (DOCKER_HOST is not set)"

    def _unreachable(self, exc: BaseException) -> ExecutorError:
        return ExecutorError(
            f"container engine not reachable at {self.engine_address()}: {_first_line(exc)}. "
            "Start the engine (Docker, or Podman's API service: on a test machine run "
            "scripts/container-engine.sh and export the DOCKER_HOST it prints), or point "
            "DOCKER_HOST / the executor's base_url at a running one."
        )

    def client(self) -> DockerClient:
        """The engine client, created on first use. Raises ExecutorError when unreachable."""
        with self._lock:
            if self._client is None:
                try:
                    self._client = self._factory()
                except _engine_errors() as e:
                    raise self._unreachable(e) from e
            return self._client

    def close(self) -> None:
        """Remove containers of builds still running (unless kept); close the client."""
        with self._lock:
            live = list(self._live.values())
            self._live.clear()
        for container in live:
            self._dispose(container, out=None)
        with self._lock:
            client, self._client = self._client, None
        if client is not None and self._owns_client:
            with contextlib.suppress(Exception):
                client.close()

    # -- what a job's container looks like ------------------------------------------------

    def user_for(self) -> str:
        return self.settings.user or f"{os.getuid()}:{os.getgid()}"

    def memory_for(self, job: Job) -> str | None:
        return job.memory_limit or self.settings.memory_limit

    def cuda_dir_for(self, job: Job) -> Path | None:
        host = self.settings.cuda_mounts.get(job.cuda)
        return Path(host) if host is not None else None

    def command_for(self, job: Job) -> list[str]:
        recipe = f"{RECIPES_MOUNT}/{job.package}/build.sh"
        if job.cache is not None:  # the compiler cache's `run` starts the recipe
            return ["bash", "-c", WRAPPER, *job.cache.command(recipe, container=True)[1:]]
        return ["bash", "-c", WRAPPER, recipe]

    def env_for(self, job: Job) -> dict[str, str]:
        env = dict(job.env)
        env.update(
            SOURCE_DIR=SOURCE_MOUNT,
            OUTPUT_DIR=OUTPUT_MOUNT,
            WORK_DIR=WORK_DIR,
            HOME=HOME_DIR,
        )
        if job.cache is not None:
            env.update(job.cache.env(container=True))
        return env

    def mounts_for(self, job: Job) -> list[tuple[str, str, bool]]:
        """(host path, container path, read-only) for each bind mount."""
        mounts = [
            (str(job.source_dir), SOURCE_MOUNT, True),
            (str(job.recipes_dir), RECIPES_MOUNT, True),
            (str(job.output_dir), OUTPUT_MOUNT, False),
        ]
        cuda = self.cuda_dir_for(job)
        if cuda is not None:
            mounts.append((str(cuda), CUDA_MOUNT, True))
        if job.cache is not None:
            mounts += job.cache.mounts()
        return mounts

    def create_kwargs(self, job: Job) -> dict[str, Any]:
        """Keyword arguments for `client.containers.create` (the SDK's names)."""
        from docker.types import DeviceRequest, Mount

        labels = {
            LABEL_MANAGED: "true",
            LABEL_BUILD_ID: job.build_id,
            LABEL_JOB: str(job.output_dir),
            **self.settings.labels,
        }
        kwargs: dict[str, Any] = {
            "image": job.image,
            "command": self.command_for(job),
            "name": _container_name(job.build_id),
            "user": self.user_for(),
            "environment": self.env_for(job),
            "mounts": [
                Mount(target, source, type="bind", read_only=ro)
                for source, target, ro in self.mounts_for(job)
            ],
            "labels": labels,
            "oom_score_adj": self.settings.oom_score_adj,
            # Never inject proxy settings from ~/.docker/config.json: no host environment.
            "use_config_proxy": False,
            "stdin_open": False,
            "tty": False,
        }
        memory = self.memory_for(job)
        if memory is not None:
            kwargs["mem_limit"] = memory
            kwargs["memswap_limit"] = memory  # no swap on top: the limit is the limit
        if job.gpu or self.settings.gpu:
            kwargs["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
        return kwargs

    def reap(self, job: Job) -> list[str]:
        """Remove the containers a killed run left for this job (same day, same build)."""
        try:
            stale = self.client().containers.list(
                all=True, filters={"label": [f"{LABEL_MANAGED}=true", f"{LABEL_JOB}={job.output_dir}"]}
            )
        except ExecutorError:
            return []  # no engine: nothing of ours can be running on it
        except Exception as e:  # the engine's own error types vary (docker/requests)
            return [f"could not list stale containers of {job.build_id}: {e}"]
        lines = []
        for c in stale:
            try:
                c.remove(force=True)
                lines.append(f"removed container {c.name} left by a killed run of {job.build_id}")
            except Exception as e:
                lines.append(f"could not remove stale container {c.name}: {e}")
        return lines

    def describe(self, job: Job) -> dict[str, object]:
        return {
            "executor": self.name,
            "engine": self.engine_address(),
            "image": job.image,
            "command": self.command_for(job),
            "user": self.user_for(),
            "mounts": [{"source": s, "target": t, "read_only": ro} for s, t, ro in self.mounts_for(job)],
            "env": self.env_for(job),
            "memory_limit": self.memory_for(job),
            "gpu": job.gpu or self.settings.gpu,
            "keep_container": self.settings.keep_container,
        }

    # -- before the night -------------------------------------------------------------------

    def preflight(self, jobs: Sequence[Job]) -> None:
        client = self.client()
        errors = _engine_errors()
        try:
            client.ping()
        except errors as e:
            raise self._unreachable(e) from e

        from docker.errors import ImageNotFound

        problems: list[str] = []
        no_image = [job.build_id for job in jobs if not job.image]
        if no_image:
            problems.append(f"no container image configured for: {', '.join(no_image)}")
        needed: dict[str, list[str]] = {}
        for job in jobs:
            if job.image:
                needed.setdefault(job.image, []).append(job.build_id)
        for image, build_ids in needed.items():
            try:
                client.images.get(image)
                continue
            except ImageNotFound:
                pass
            except errors as e:
                raise ExecutorError(
                    f"could not look up image {image} on {self.engine_address()}: "
                    f"{_first_line(e)}; check that the engine is healthy"
                ) from e
            detail = ""
            if self.settings.pull:
                try:
                    client.images.pull(image)
                    continue
                except errors as e:
                    detail = f" (pull failed: {_first_line(e)})"
            problems.append(f"missing image {image}{detail}, needed by: {', '.join(build_ids)}")
        bad_cuda: dict[str, list[str]] = {}
        for job in jobs:
            cuda = self.cuda_dir_for(job)
            if cuda is not None and not cuda.is_dir():
                bad_cuda.setdefault(str(cuda), []).append(job.build_id)
        for path, build_ids in bad_cuda.items():
            problems.append(
                f"CUDA toolkit folder {path} (mounted at {CUDA_MOUNT}) does not exist, "
                f"needed by: {', '.join(build_ids)}"
            )
        if problems:
            hint = (
                "Build or pull the missing images on this engine "
                "(scripts/container-engine.sh builds nightly-builder:bookworm; "
                "with pull enabled, preflight pulls from the registry), "
                "or point those builds at images that exist."
                if needed
                else ""
            )
            lines = "\n".join(f"  - {p}" for p in problems)
            raise ExecutorError(
                f"container preflight on {self.engine_address()} found "
                f"{len(problems)} problem(s):\n{lines}" + (f"\n{hint}" if hint else "")
            )

    # -- one build --------------------------------------------------------------------------

    def run(self, job: Job, out: OutputSink, cancel: threading.Event) -> ExecResult:
        if not job.image:
            return _infra(f"no container image configured for {job.build_id}")
        try:
            client = self.client()
            self._prepare_output(job)
        except ExecutorError as e:
            return _infra(str(e))
        errors = _engine_errors()
        from docker.errors import ImageNotFound

        try:
            container = client.containers.create(**self.create_kwargs(job))
        except ImageNotFound as e:
            return _infra(
                f"image {job.image} not found on {self.engine_address()} "
                f"({_first_line(e)}); build or pull it (nightly checks images before a night)"
            )
        except errors as e:
            return _infra(f"could not create the container: {_first_line(e)}")

        with self._lock:
            self._live[container.id or ""] = container
        watch = _Watch()
        result: ExecResult
        notes: tuple[str, ...] = ()
        try:
            result = self._supervise(job, container, out, cancel, watch)
        except errors as e:
            result = _infra(f"engine failed during the build: {_first_line(e)}")
        finally:
            try:
                notes = self._dispose(container, out=lambda b: _emit(watch, out, b))
            finally:
                with self._lock:
                    self._live.pop(container.id or "", None)
                with watch.out_lock:
                    watch.closed = True
        return replace(result, notes=result.notes + notes)

    def _prepare_output(self, job: Job) -> None:
        """Make the output folder writable by the build's user when that is someone else."""
        uid, gid = (int(x) for x in self.user_for().split(":"))
        try:
            st = job.output_dir.stat()
        except OSError as e:
            raise ExecutorError(f"output folder {job.output_dir}: {e.strerror}") from e
        if st.st_uid != uid and os.geteuid() == 0:
            try:
                os.chown(job.output_dir, uid, gid)
            except OSError as e:
                raise ExecutorError(
                    f"could not hand output folder {job.output_dir} to {uid}:{gid}: {e.strerror}"
                ) from e

    def _supervise(
        self,
        job: Job,
        container: Container,
        out: OutputSink,
        cancel: threading.Event,
        watch: _Watch,
    ) -> ExecResult:
        container.start()
        threading.Thread(
            target=_pump_logs,
            args=(container, out, watch),
            daemon=True,
            name=f"logs-{job.build_id}",
        ).start()
        waiter = threading.Thread(
            target=_wait_for_exit,
            args=(container, watch),
            daemon=True,
            name=f"wait-{job.build_id}",
        )
        waiter.start()

        # The exit is noticed by whichever comes first: the waiter thread (one long request;
        # Podman answers it up to ~0.5 s late), or looking at the container's state, often
        # at first and then less and less (and at once when the output stream ends).
        deadline = time.monotonic() + job.timeout_s
        gap = FIRST_LOOK_S
        next_look = time.monotonic() + gap
        looked_at_stream_end = False
        failures = 0
        state: Mapping[str, Any] | None = None
        stopped_for: str | None = None
        while not (watch.done.is_set() and watch.wait_error is None):
            if cancel.is_set():
                stopped_for = "cancel"
                break
            now = time.monotonic()
            if now >= deadline:
                stopped_for = "timeout"
                break
            stream_ended = watch.log_done.is_set() and not looked_at_stream_end
            if now >= next_look or stream_ended:
                looked_at_stream_end = watch.log_done.is_set()
                try:
                    state = _stopped_state(container)
                    failures = 0
                except _engine_errors() as e:
                    failures += 1
                    if watch.done.is_set() and failures >= 5:
                        _collect_rest(container, out, watch)
                        return _infra(f"lost track of the container: {_first_line(e)}")
                if state is not None:
                    break
                gap = min(gap * 2, MAX_LOOK_GAP_S)
                next_look = now + gap
            watch.done.wait(max(0.0, min(POLL_S, deadline - now, next_look - now)))

        if stopped_for is not None:
            why = "interrupted" if stopped_for == "cancel" else f"timeout after {_seconds(job.timeout_s)} s"
            line = f"\n[nightly] {why}: killing container {container.short_id}\n"
            _emit(watch, out, line.encode())
            _kill(container)
            _await_stop(container, watch, KILL_WAIT_S)
            log_note = _collect_rest(container, out, watch)
            if stopped_for == "cancel":
                return ExecResult(exit_status=None, reason="interrupted", interrupted=True, notes=log_note)
            return ExecResult(exit_status=None, reason=why, infra=True, notes=log_note)

        log_note = _collect_rest(container, out, watch)
        if state is None:  # the waiter saw the exit first
            if watch.status is None:
                return _infra("lost track of the container: no exit status")
            status = int(watch.status.get("StatusCode", -1))
            try:
                state = _stopped_state(container)
            except _engine_errors():
                state = None
        else:
            status = int(state.get("ExitCode", -1))
        oom_killed = bool((state or {}).get("OOMKilled"))
        memory = self.memory_for(job)
        notes = log_note
        if oom_killed or (status == 137 and memory is not None):
            reason = (
                f"out of memory (limit {memory})"
                if memory is not None
                else "out of memory (killed by the kernel's OOM killer)"
            )
            return ExecResult(exit_status=status, reason=reason, infra=True, notes=notes)
        if status == 137:
            return ExecResult(
                exit_status=status,
                reason="killed (SIGKILL, exit status 137; the host may be out of memory)",
                infra=True,
                notes=notes,
            )
        return ExecResult(exit_status=status, notes=notes)

    def _dispose(self, container: Container, out: OutputSink | None) -> tuple[str, ...]:
        """Remove the container, or keep it (restarted for `exec`) with a note saying how."""
        cid = container.name or container.id or "?"
        if self.settings.keep_container:
            note = self._keep(container)
        else:
            note = None
            last: BaseException | None = None
            for attempt in range(3):
                try:
                    container.remove(force=True, v=True)
                    last = None
                    break
                except _engine_errors() as e:
                    from docker.errors import NotFound

                    if isinstance(e, NotFound):
                        last = None
                        break
                    last = e
                    time.sleep(0.5 * (attempt + 1))
            if last is not None:
                note = (
                    f"could not remove container {cid}: {_first_line(last)}; "
                    f"remove it with `{self._cli_prefix()}docker rm -f {cid}`"
                )
        if note is None:
            return ()
        if out is not None:
            with contextlib.suppress(Exception):
                out(f"[nightly] {note}\n".encode())
        return (note,)

    def _keep(self, container: Container) -> str:
        cid = container.name or container.id or "?"
        prefix = self._cli_prefix()
        try:
            container.reload()
            if container.status == "running":  # an exception in the orchestrator: stop the build
                _kill(container)
                container.wait(timeout=KILL_WAIT_S)
            container.start()  # the wrapper sees its marker and just stays up
        except _engine_errors() as e:
            return (
                f"container {cid} kept but not running ({_first_line(e)}); inspect it with "
                f"`{prefix}docker cp` or remove it with `{prefix}docker rm -f {cid}`"
            )
        also = f" (or `podman exec -it {cid} bash`)" if self._is_podman() else ""
        return (
            f"container {cid} kept: enter it with `{prefix}docker exec -it {cid} bash`{also}; "
            f"remove it with `{prefix}docker rm -f {cid}`"
        )

    def _cli_prefix(self) -> str:
        """What to put before `docker ...` so the CLI talks to the same engine."""
        if self.settings.base_url and self.settings.base_url != os.environ.get("DOCKER_HOST"):
            return f"DOCKER_HOST={shlex.quote(self.settings.base_url)} "
        return ""

    def _is_podman(self) -> bool:
        if self._engine_cli is None:
            self._engine_cli = "docker"
            try:
                version = self.client().version()
                names = [str(c.get("Name", "")) for c in version.get("Components", [])]
                if any("podman" in n.lower() for n in names):
                    self._engine_cli = "podman"
            except Exception:
                pass
        return self._engine_cli == "podman"


def _container_name(build_id: str) -> str:
    safe = re.sub(r"[^a-zA-Z0-9_.-]", "-", build_id).strip("-.") or "build"
    return f"nightly-{safe}-{secrets.token_hex(3)}"


def _infra(message: str) -> ExecResult:
    return ExecResult(exit_status=None, reason=f"executor error: {message}", infra=True)


def _emit(watch: _Watch, out: OutputSink, data: bytes) -> None:
    """Pass output on, unless run() has returned (the log may be closed by then)."""
    with watch.out_lock:
        if not watch.closed:
            out(data)


def _emit_log(watch: _Watch, out: OutputSink, chunk: bytes, position: int) -> int:
    """Pass on the part of `chunk` (at byte `position` of the engine's log) not yet passed on.

    The log is read more than once (followed again after the stream broke, read whole once
    the container stopped); counting bytes makes each byte reach `out` exactly once.
    """
    end = position + len(chunk)
    with watch.out_lock:
        if end > watch.emitted and not watch.closed:
            out(chunk[max(0, watch.emitted - position) :])
            watch.emitted = end
    return end


def _pump_logs(container: Container, out: OutputSink, watch: _Watch) -> None:
    """Follow the container's output as it comes, until the container stops.

    The stream can break while the build runs: the client's read timeout after a long
    silence, or Podman's API sometimes never answering a follow request that races with a
    container event. Then it is followed again from the start, skipping what was passed on.
    """
    try:
        while not watch.closed:
            position = 0
            try:
                for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
                    position = _emit_log(watch, out, chunk, position)
                return  # the stream ended: the container stopped
            except Exception as e:
                watch.log_error = e
                if watch.done.is_set():
                    return  # stopped: the supervisor reads what is left
                watch.reconnects += 1
                time.sleep(RECONNECT_PAUSE_S)
    finally:
        watch.log_done.set()


def _collect_rest(container: Container, out: OutputSink, watch: _Watch) -> tuple[str, ...]:
    """After the container stopped: pass on whatever output the stream did not deliver.

    Once the engine reports the container stopped its log is complete (conmon, like
    Docker's log copier, flushes it first), so it is read whole rather than waiting for the
    follow stream, which Podman ends up to a second later (or, rarely, never).
    """
    try:
        whole = container.logs(stream=False, stdout=True, stderr=True)
    except _engine_errors() as e:
        watch.log_done.wait(LOG_GRACE_S)
        if watch.log_done.is_set() and watch.log_error is None:
            return ()  # the stream ended normally: it delivered everything
        return (f"the build's output may be incomplete: {_first_line(e)}",)
    _emit_log(watch, out, whole, 0)
    return ()


_STOPPED = frozenset({"exited", "stopped", "dead"})


def _stopped_state(container: Container) -> Mapping[str, Any] | None:
    """The container's State when it has stopped (ExitCode is final then), else None."""
    container.reload()
    state: Mapping[str, Any] = container.attrs.get("State") or {}
    return state if state.get("Status") in _STOPPED else None


def _await_stop(container: Container, watch: _Watch, limit_s: float) -> None:
    """Wait (at most limit_s) until a killed container is reported stopped."""
    end = time.monotonic() + limit_s
    while not watch.done.is_set() and time.monotonic() < end:
        try:
            if _stopped_state(container) is not None:
                return
        except _engine_errors():
            pass
        watch.done.wait(POLL_S)


def _wait_for_exit(container: Container, watch: _Watch) -> None:
    try:
        watch.status = container.wait()
    except Exception as e:
        watch.wait_error = e
    finally:
        watch.done.set()


def _kill(container: Container) -> None:
    try:
        container.kill()
    except _engine_errors():
        pass  # already stopped, or gone: removal follows anyway
