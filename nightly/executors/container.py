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

The engine side (settings, client, constants) is in container_engine.py, the supervision of
one build's container in container_watch.py, the images and toolkits checked before a night
in container_preflight.py. The docker SDK is imported only where it is used,
so `nightly --help` stays fast.
"""
from __future__ import annotations

import contextlib
import os
import shlex
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nightly.errors import ExecutorError
from nightly.executors.base import ExecResult, Executor, Job, OutputSink
from nightly.executors.container_engine import (
    CA_ENV,
    CA_MOUNT,
    CUDA_MOUNT,
    HOME_DIR,
    KILL_WAIT_S,
    LABEL_BUILD_ID,
    LABEL_JOB,
    LABEL_MANAGED,
    OUTPUT_MOUNT,
    RECIPES_MOUNT,
    SOURCE_MOUNT,
    WHEELHOUSE_MOUNT,
    WORK_DIR,
    WRAPPER,
    ClientFactory,
    ContainerSettings,
    container_name,
    default_client_factory,
    engine_errors,
    first_line,
    host_ca_bundle,
    infra,
    kill,
)
from nightly.executors.container_preflight import check_images
from nightly.executors.container_watch import Watch, emit, supervise
from nightly.format import say_err

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container

# What tests and callers import from here, besides the executor.
__all__ = [
    "CUDA_MOUNT",
    "HOME_DIR",
    "LABEL_BUILD_ID",
    "LABEL_JOB",
    "LABEL_MANAGED",
    "OUTPUT_MOUNT",
    "RECIPES_MOUNT",
    "SOURCE_MOUNT",
    "WORK_DIR",
    "ContainerExecutor",
    "ContainerSettings",
]


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
        # The toolkit each image was built with (its nvcc label), read when preflight looks
        # the image up, so each build's log header says which nvcc compiled it.
        self._toolkits: dict[str, str] = {}

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
            f"container engine not reachable at {self.engine_address()}: {first_line(exc)}. "
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
                except engine_errors() as e:
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
        if "NIGHTLY_WHEELHOUSE" in env:
            env["NIGHTLY_WHEELHOUSE"] = WHEELHOUSE_MOUNT
        if job.cache is not None:
            env.update(job.cache.env(container=True))
        if host_ca_bundle():
            env.update(dict.fromkeys(CA_ENV, CA_MOUNT))
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
        # The night's wheelhouse of build requirements (offline builds), read-only.
        if "NIGHTLY_WHEELHOUSE" in job.env:
            mounts.append((job.env["NIGHTLY_WHEELHOUSE"], WHEELHOUSE_MOUNT, True))
        if job.cache is not None:
            mounts += job.cache.mounts()
        ca = host_ca_bundle()
        if ca:
            mounts.append((ca, CA_MOUNT, True))
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
        kwargs: dict[str, object] = {
            "image": job.image,
            "command": self.command_for(job),
            "name": container_name(job.build_id),
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
        """Remove the containers a killed run left for this job (same day, same build): its
        recipe's, and its smoke and GPU tests' (their jobs' OUTPUT_DIR is in the build's
        folder's `smoke-<build id>-*` scratch folders, nightly.builds.test.smoke)."""
        tests = f"{job.work_dir.parent}/smoke-{job.build_id}-"
        try:
            stale = [c for c in self.client().containers.list(
                all=True, filters={"label": [f"{LABEL_MANAGED}=true"]})
                if (where := str((c.labels or {}).get(LABEL_JOB, ""))) == str(job.output_dir)
                or (where.startswith(tests) and where.endswith("/out"))]
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
            "toolkit": self._toolkits.get(job.image or "", ""),
        }

    # -- before the night -------------------------------------------------------------------

    def preflight(self, jobs: Sequence[Job]) -> None:
        client = self.client()
        errors = engine_errors()
        try:
            client.ping()
        except errors as e:
            raise self._unreachable(e) from e

        check_images(client, jobs, address=self.engine_address(), pull=self.settings.pull,
                     cuda_dir_for=self.cuda_dir_for, toolkits=self._toolkits)

    # -- one build --------------------------------------------------------------------------

    def run(self, job: Job, out: OutputSink, cancel: threading.Event) -> ExecResult:
        if not job.image:
            return infra(f"no container image configured for {job.build_id}")
        try:
            client = self.client()
            self._prepare_output(job)
        except ExecutorError as e:
            return infra(str(e))
        errors = engine_errors()
        from docker.errors import ImageNotFound

        try:
            container = client.containers.create(**self.create_kwargs(job))
        except ImageNotFound as e:
            return infra(
                f"image {job.image} not found on {self.engine_address()} "
                f"({first_line(e)}); build or pull it (nightly checks images before a night)"
            )
        except errors as e:
            return infra(f"could not create the container: {first_line(e)}")

        with self._lock:
            self._live[container.id or ""] = container
        watch = Watch()
        result: ExecResult
        notes: tuple[str, ...] = ()
        try:
            result = supervise(job, container, out, cancel, watch, memory=self.memory_for(job))
        except errors as e:
            result = infra(f"engine failed during the build: {first_line(e)}")
        finally:
            try:
                notes = self._dispose(container, out=lambda b: emit(watch, out, b))
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

    def _dispose(self, container: Container, out: OutputSink | None) -> tuple[str, ...]:
        """Remove the container, or keep it (restarted for `exec`) with a note saying how."""
        cid = container.name or container.id or "?"
        if self.settings.keep_container:
            note = self._keep(container)
        else:
            note = None
            last: BaseException | None = None
            for _ in self.settings.engine_backoff.tries():
                try:
                    container.remove(force=True, v=True)
                    last = None
                    break
                except engine_errors() as e:
                    from docker.errors import NotFound

                    if isinstance(e, NotFound):
                        last = None
                        break
                    last = e
            if last is not None:
                note = (
                    f"could not remove container {cid}: {first_line(last)}; "
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
                kill(container)
                container.wait(timeout=KILL_WAIT_S)
            container.start()  # the wrapper sees its marker and just stays up
        except engine_errors() as e:
            return (
                f"container {cid} kept but not running ({first_line(e)}); inspect it with "
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
            except Exception as e:  # the engine's error types vary (docker/requests)
                # Only the hint we print (`docker` or `podman` commands) depends on this.
                say_err(f"[nightly] could not ask the engine its name ({e}); hints say `docker`")
        return self._engine_cli == "podman"
