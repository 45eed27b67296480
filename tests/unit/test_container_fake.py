"""ContainerExecutor against a small fake docker client: what it asks the engine for (env,
mounts, user, limits), how it maps what happens (exit status, OOM, timeout, cancel, engine
errors) and that the container is removed on every path. The real engine is exercised in
tests/integration/test_container.py."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from docker.errors import APIError, DockerException, ImageNotFound, NotFound

from nightly.errors import ExecutorError
from nightly.executors import container as container_module
from nightly.executors.base import Job
from nightly.executors.container import (
    CUDA_MOUNT,
    HOME_DIR,
    LABEL_BUILD_ID,
    LABEL_JOB,
    LABEL_MANAGED,
    OUTPUT_MOUNT,
    RECIPES_MOUNT,
    SOURCE_MOUNT,
    WORK_DIR,
    ContainerExecutor,
    ContainerSettings,
)
from nightly.executors.container_engine import CA_MOUNT

IMAGE = "nightly-builder:bookworm"


# ---------------------------------------------------------------------------- the fake


@dataclass
class Behaviour:
    """What the next container does once started."""

    output: list[bytes] = field(default_factory=lambda: [b"hello\n"])
    exit_code: int = 0
    hang: bool = False  # run until killed
    oom_killed: bool = False  # State.OOMKilled after the exit
    start_error: BaseException | None = None
    # How the followed log stream misbehaves, as Podman's sometimes does:
    stream_breaks_once: bool = False  # the first stream breaks after one chunk
    stream_stops_after: int | None = None  # streams end after this many chunks (lost tail)
    stream_hangs: bool = False  # a follow request never answers
    wait_error: BaseException | None = None  # the waiting request breaks
    exit_after: float = 0.0  # seconds from start to exit (when not hanging)


class FakeContainer:
    def __init__(self, client: FakeClient, kwargs: dict[str, Any], behaviour: Behaviour) -> None:
        self.client = client
        self.kwargs = kwargs
        self.behaviour = behaviour
        n = len(client.created)
        self.id = f"{n:064x}"
        self.short_id = self.id[:12]
        self.name = kwargs["name"]
        self.status = "created"
        self.attrs: dict[str, Any] = {}
        self.oom_killed = False
        self.starts = 0
        self.follows = 0
        self.killed = False
        self.removed = False
        self.exit_code: int | None = None
        self.exited = threading.Event()

    def start(self) -> None:
        self.starts += 1
        if self.behaviour.start_error is not None:
            raise self.behaviour.start_error
        self.status = "running"
        if self.starts == 1 and not self.behaviour.hang:
            b = self.behaviour
            if b.exit_after:
                threading.Timer(b.exit_after, self._exit, (b.exit_code, b.oom_killed)).start()
            else:
                self._exit(b.exit_code, oom=b.oom_killed)

    def _exit(self, code: int, oom: bool = False) -> None:
        self.exit_code = code
        self.status = "exited"
        self.oom_killed = oom
        self.exited.set()

    def logs(self, **kwargs: Any) -> Any:
        if not kwargs.get("stream"):
            return b"".join(self.behaviour.output)
        assert kwargs.get("follow")
        self.follows += 1
        return self._follow(first=self.follows == 1)

    def _follow(self, first: bool) -> Iterator[bytes]:
        b = self.behaviour
        if b.stream_hangs:
            threading.Event().wait(5)
            raise ConnectionError("read timed out")
        chunks = b.output if b.stream_stops_after is None else b.output[: b.stream_stops_after]
        for i, chunk in enumerate(chunks):
            if first and b.stream_breaks_once and i == 1:
                raise ConnectionError("read timed out")
            yield chunk
        if b.stream_stops_after is None:
            self.exited.wait(30)

    def wait(self, timeout: float | None = None) -> dict[str, Any]:
        if self.behaviour.wait_error is not None:
            raise self.behaviour.wait_error
        if not self.exited.wait(timeout if timeout is not None else 30):
            raise TimeoutError("fake wait timed out")
        return {"StatusCode": self.exit_code, "Error": None}

    def kill(self) -> None:
        self.killed = True
        if self.status == "running":
            self._exit(137)

    def reload(self) -> None:
        if self.removed:
            raise NotFound("no such container")
        self.attrs = {
            "State": {
                "Status": self.status,
                "ExitCode": self.exit_code or 0,
                "OOMKilled": self.oom_killed,
            }
        }

    def remove(self, force: bool = False, v: bool = False) -> None:
        assert force, "removal must be forced (the container may still run)"
        if self.client.remove_error is not None:
            raise self.client.remove_error
        self.removed = True
        if self.status == "running":
            self._exit(137)


class FakeContainers:
    def __init__(self, client: FakeClient) -> None:
        self.client = client

    def create(self, **kwargs: Any) -> FakeContainer:
        if kwargs["image"] in self.client.missing:
            raise ImageNotFound(f"No such image: {kwargs['image']}")
        c = FakeContainer(self.client, kwargs, self.client.behaviour)
        self.client.created.append(c)
        return c


class FakeImages:
    def __init__(self, client: FakeClient) -> None:
        self.client = client

    def get(self, name: str) -> object:
        self.client.looked_up.append(name)
        if name in self.client.missing:
            raise ImageNotFound(f"No such image: {name}")
        return object()

    def pull(self, name: str) -> object:
        self.client.pulled.append(name)
        if name not in self.client.pullable:
            raise APIError(f"pull access denied for {name}")
        self.client.missing.discard(name)
        return object()


class FakeClient:
    def __init__(self) -> None:
        self.behaviour = Behaviour()
        self.created: list[FakeContainer] = []
        self.missing: set[str] = set()
        self.pullable: set[str] = set()
        self.looked_up: list[str] = []  # images asked for (preflight checks each one)
        self.pulled: list[str] = []
        self.remove_error: BaseException | None = None
        self.containers = FakeContainers(self)
        self.images = FakeImages(self)
        self.closed = False

    def ping(self) -> bool:
        return True

    def version(self) -> dict[str, Any]:
        return {"Components": [{"Name": "Podman Engine", "Version": "4.3.1"}]}

    def close(self) -> None:
        self.closed = True

    @property
    def last(self) -> FakeContainer:
        return self.created[-1]


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture
def client() -> FakeClient:
    return FakeClient()


@pytest.fixture
def make_job(tmp_path: Path) -> Any:
    def make(**overrides: Any) -> Job:
        for d in ("src", "recipes", "out", "work"):
            (tmp_path / d).mkdir(exist_ok=True)
        fields: dict[str, Any] = {
            "build_id": "manywheel_3.11_cpu",
            "package": "manywheel",
            "python": "3.11",
            "cuda": "cpu",
            "env": {"PACKAGE_TYPE": "manywheel", "DESIRED_PYTHON": "3.11", "DESIRED_CUDA": "cpu"},
            "recipes_dir": tmp_path / "recipes",
            "source_dir": tmp_path / "src",
            "output_dir": tmp_path / "out",
            "work_dir": tmp_path / "work",
            "timeout_s": 30.0,
            "image": IMAGE,
        }
        fields.update(overrides)
        return Job(**fields)

    return make


def executor(client: FakeClient, **settings: Any) -> ContainerExecutor:
    return ContainerExecutor(ContainerSettings(**settings), client_factory=lambda: client)  # type: ignore[arg-type,return-value]


class Sink:
    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def __call__(self, data: bytes) -> None:
        self.chunks.append(data)

    @property
    def text(self) -> str:
        return b"".join(self.chunks).decode()


def run(ex: ContainerExecutor, job: Job, cancel: threading.Event | None = None) -> tuple[Any, Sink]:
    sink = Sink()
    return ex.run(job, sink, cancel or threading.Event()), sink


# ---------------------------------------------------------------------------- the container


def test_environment_is_the_job_env_plus_paths_and_nothing_of_the_host(
    client: FakeClient, make_job: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(container_module, "host_ca_bundle", lambda: None)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
    monkeypatch.setenv("HOME", "/root/private")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy:3128")
    job = make_job()
    run(executor(client), job)
    env = client.last.kwargs["environment"]
    assert env == {
        **job.env,
        "SOURCE_DIR": SOURCE_MOUNT,
        "OUTPUT_DIR": OUTPUT_MOUNT,
        "WORK_DIR": WORK_DIR,
        "HOME": HOME_DIR,
    }
    assert "s3cr3t" not in repr(client.last.kwargs)
    assert "/root/private" not in repr(client.last.kwargs)
    # The SDK would otherwise add proxy variables from ~/.docker/config.json.
    assert client.last.kwargs["use_config_proxy"] is False


def test_mounts_are_source_and_recipes_read_only_and_output_read_write(
    client: FakeClient, make_job: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(container_module, "host_ca_bundle", lambda: None)
    job = make_job()
    run(executor(client), job)
    mounts = {(m["Source"], m["Target"], m["ReadOnly"], m["Type"]) for m in client.last.kwargs["mounts"]}
    assert mounts == {
        (str(job.source_dir), SOURCE_MOUNT, True, "bind"),
        (str(job.recipes_dir), RECIPES_MOUNT, True, "bind"),
        (str(job.output_dir), OUTPUT_MOUNT, False, "bind"),
    }
    kwargs = client.last.kwargs
    for forbidden in ("volumes", "privileged", "network_mode", "pid_mode", "volumes_from"):
        assert forbidden not in kwargs
    assert kwargs["command"][-1] == f"{RECIPES_MOUNT}/manywheel/build.sh"


def test_cuda_toolkit_mounted_read_only_only_for_its_cuda(
    client: FakeClient, make_job: Any, tmp_path: Path
) -> None:
    toolkit = tmp_path / "cuda-13.0"
    toolkit.mkdir()
    ex = executor(client, cuda_mounts={"cu130": toolkit})
    run(ex, make_job(cuda="cu130", build_id="manywheel_3.11_cu130"))
    cuda = [m for m in client.last.kwargs["mounts"] if m["Target"] == CUDA_MOUNT]
    assert [(m["Source"], m["ReadOnly"]) for m in cuda] == [(str(toolkit), True)]
    run(ex, make_job())
    assert all(m["Target"] != CUDA_MOUNT for m in client.last.kwargs["mounts"])


def test_runs_as_the_invoking_user_by_default(client: FakeClient, make_job: Any) -> None:
    run(executor(client), make_job())
    assert client.last.kwargs["user"] == f"{os.getuid()}:{os.getgid()}"


def test_user_override(client: FakeClient, make_job: Any) -> None:
    run(executor(client, user="4242:4242"), make_job())
    assert client.last.kwargs["user"] == "4242:4242"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can hand a folder to another uid")
def test_output_folder_handed_to_the_build_user(client: FakeClient, make_job: Any) -> None:
    job = make_job()
    run(executor(client, user="4242:4242"), job)
    st = job.output_dir.stat()
    assert (st.st_uid, st.st_gid) == (4242, 4242)


@pytest.mark.parametrize("bad", ["root", "1000", "1000:", "a:b", "1000:1000:1"])
def test_bad_user_rejected(bad: str) -> None:
    with pytest.raises(ValueError, match="uid:gid"):
        ContainerSettings(user=bad)


def test_limits_labels_and_no_gpu_unless_asked(client: FakeClient, make_job: Any) -> None:
    ex = executor(client, memory_limit="8g", labels={"team": "release"})
    job = make_job()
    run(ex, job)
    kw = client.last.kwargs
    assert kw["oom_score_adj"] == 1000
    assert kw["mem_limit"] == kw["memswap_limit"] == "8g"
    assert kw["labels"] == {
        LABEL_MANAGED: "true",
        LABEL_BUILD_ID: "manywheel_3.11_cpu",
        LABEL_JOB: str(job.output_dir),
        "team": "release",
    }
    assert "device_requests" not in kw
    assert "runtime" not in kw
    # The job's own limit wins over the default.
    run(ex, make_job(memory_limit="64m"))
    assert client.last.kwargs["mem_limit"] == "64m"


def test_gpu_requested_when_configured(client: FakeClient, make_job: Any) -> None:
    run(executor(client), make_job(gpu=True))
    (request,) = client.last.kwargs["device_requests"]
    assert request["Capabilities"] == [["gpu"]]
    assert request["Count"] == -1
    run(executor(client, gpu=True), make_job())
    assert "device_requests" in client.last.kwargs


def test_host_ca_bundle_is_mounted_read_only_and_named_to_pip(
    client: FakeClient, make_job: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Isolated builds in a container reach the index the host reaches: the host's CA bundle
    (pip's PIP_CERT first) is mounted read-only and pip/requests/ssl are pointed at it."""
    bundle = tmp_path / "site-ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    for var in ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PIP_CERT", str(bundle))
    job = make_job()
    run(executor(client), job)
    mounts = {(m["Source"], m["Target"], m["ReadOnly"]) for m in client.last.kwargs["mounts"]}
    assert (str(bundle), CA_MOUNT, True) in mounts
    env = client.last.kwargs["environment"]
    assert {k: env[k] for k in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")} == dict.fromkeys(
        ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"), CA_MOUNT)
    assert str(bundle) not in repr(env)  # the container sees its own path, not the host's


def test_describe_for_dry_run(client: FakeClient, make_job: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(container_module, "host_ca_bundle", lambda: None)
    job = make_job()
    d = executor(client).describe(job)
    assert d["image"] == IMAGE
    assert d["command"] == client_command(job)
    assert d["env"]["OUTPUT_DIR"] == OUTPUT_MOUNT  # type: ignore[index]
    assert {m["target"] for m in d["mounts"]} == {SOURCE_MOUNT, RECIPES_MOUNT, OUTPUT_MOUNT}  # type: ignore[attr-defined]
    assert client.created == []  # describing creates nothing


def client_command(job: Job) -> list[str]:
    return ContainerExecutor(ContainerSettings()).command_for(job)


# ---------------------------------------------------------------------------- outcomes


def test_success_streams_output_and_removes(client: FakeClient, make_job: Any) -> None:
    client.behaviour = Behaviour(output=[b"one\n", b"two\n"])
    result, sink = run(executor(client), make_job())
    assert result.ok
    assert result.exit_status == 0
    assert sink.text == "one\ntwo\n"
    assert client.last.removed


def test_broken_stream_is_followed_again_without_repeating_output(client: FakeClient, make_job: Any) -> None:
    client.behaviour = Behaviour(output=[b"one\n", b"two\n", b"three\n"], stream_breaks_once=True, hang=True)
    ex = executor(client)
    cancel = threading.Event()
    sink = Sink()
    t = threading.Thread(target=lambda: ex.run(make_job(), sink, cancel))
    t.start()
    deadline = time.monotonic() + 10
    while "three" not in sink.text and time.monotonic() < deadline:
        time.sleep(0.01)
    # Delivered while the build still runs, once each, in order.
    assert client.last.follows == 2
    assert sink.text == "one\ntwo\nthree\n"
    cancel.set()
    t.join(10)
    assert sink.text.startswith("one\ntwo\nthree\n")
    assert sink.text.count("one") == 1


def test_output_the_stream_missed_is_collected_at_the_end(client: FakeClient, make_job: Any) -> None:
    client.behaviour = Behaviour(output=[b"a\n", b"b\n", b"c\n"], stream_stops_after=1)
    result, sink = run(executor(client), make_job())
    assert result.ok
    assert sink.text == "a\nb\nc\n"


def test_output_of_a_stream_that_never_answers_is_collected_at_the_end(
    client: FakeClient, make_job: Any
) -> None:
    client.behaviour = Behaviour(output=[b"x\n", b"y\n"], stream_hangs=True)
    result, sink = run(executor(client), make_job())
    assert result.ok
    assert sink.text == "x\ny\n"


def test_exit_seen_by_looking_when_the_wait_request_breaks(client: FakeClient, make_job: Any) -> None:
    client.behaviour = Behaviour(exit_code=5, exit_after=0.5, wait_error=ConnectionError("reset"))
    result, _ = run(executor(client), make_job())
    assert (result.exit_status, result.reason) == (5, None)
    assert client.last.removed


def test_recipe_failure_is_its_exit_status(client: FakeClient, make_job: Any) -> None:
    client.behaviour = Behaviour(output=[b"error: boom\n"], exit_code=3)
    result, sink = run(executor(client), make_job())
    assert (result.exit_status, result.reason, result.infra) == (3, None, False)
    assert "boom" in sink.text
    assert client.last.removed


def test_exit_137_under_a_memory_limit_is_out_of_memory(client: FakeClient, make_job: Any) -> None:
    # Podman leaves State.OOMKilled false: the status and the limit are enough.
    client.behaviour = Behaviour(output=[b"allocating\n"], exit_code=137, oom_killed=False)
    result, sink = run(executor(client), make_job(memory_limit="64m"))
    assert result.reason == "out of memory (limit 64m)"
    assert result.infra
    assert result.exit_status == 137
    assert "allocating" in sink.text
    assert client.last.removed


def test_oom_killed_flag_without_limit_is_out_of_memory(client: FakeClient, make_job: Any) -> None:
    client.behaviour = Behaviour(exit_code=137, oom_killed=True)
    result, _ = run(executor(client), make_job())
    assert result.reason is not None
    assert result.reason.startswith("out of memory")


def test_exit_137_without_limit_is_a_kill_not_a_verdict(client: FakeClient, make_job: Any) -> None:
    client.behaviour = Behaviour(exit_code=137)
    result, _ = run(executor(client), make_job())
    assert result.infra
    assert result.reason is not None
    assert "137" in result.reason
    assert not result.reason.startswith("out of memory")


@pytest.mark.timeout(120)  # a hang is the failure this test looks for
def test_timeout_kills_and_removes(client: FakeClient, make_job: Any) -> None:
    client.behaviour = Behaviour(output=[b"started\n"], hang=True)
    result, sink = run(executor(client), make_job(timeout_s=0.3))
    assert result.reason == "timeout after 0.3 s"
    assert result.infra
    assert result.exit_status is None
    assert not result.interrupted
    assert client.last.killed
    assert client.last.removed
    assert "started" in sink.text
    assert "timeout after 0.3 s" in sink.text


def test_timeout_reason_in_whole_seconds(client: FakeClient, make_job: Any) -> None:
    client.behaviour = Behaviour(hang=True)
    result, _ = run(executor(client), make_job(timeout_s=1.0))
    assert result.reason == "timeout after 1 s"


@pytest.mark.timeout(120)  # a hang is the failure this test looks for
def test_cancel_kills_promptly_and_removes(client: FakeClient, make_job: Any) -> None:
    client.behaviour = Behaviour(hang=True)
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    result, _ = run(executor(client), make_job(timeout_s=60), cancel)
    assert result.interrupted  # not the 60 s timeout
    assert result.reason is None or "timeout" not in result.reason
    assert result.exit_status is None
    assert client.last.killed
    assert client.last.removed


class ExplodingEvent(threading.Event):
    """A cancel event whose check raises: an exception in the orchestrator mid-build."""

    def is_set(self) -> bool:
        raise KeyboardInterrupt


def test_exception_in_the_orchestrator_still_removes(client: FakeClient, make_job: Any) -> None:
    client.behaviour = Behaviour(hang=True)
    with pytest.raises(KeyboardInterrupt):
        executor(client).run(make_job(), Sink(), ExplodingEvent())
    assert client.last.removed


def test_engine_error_during_the_build_is_an_infra_result(client: FakeClient, make_job: Any) -> None:
    client.behaviour = Behaviour(start_error=APIError("OCI runtime error: boom"))
    result, _ = run(executor(client), make_job())
    assert result.exit_status is None
    assert result.infra
    assert result.reason.startswith("executor error: ")
    assert "boom" in result.reason
    assert client.last.removed


def test_missing_image_at_run_is_an_infra_result(client: FakeClient, make_job: Any) -> None:
    client.missing.add(IMAGE)
    result, _ = run(executor(client), make_job())
    assert result.infra
    assert IMAGE in (result.reason or "")
    assert client.created == []


def test_unreachable_engine_at_run_is_an_infra_result(make_job: Any) -> None:
    def factory() -> Any:
        raise DockerException("Error while fetching server API version: connection refused")

    ex = ContainerExecutor(ContainerSettings(base_url="unix:///nowhere.sock"), client_factory=factory)
    result, _ = run(ex, make_job())
    assert result.infra
    assert "not reachable" in (result.reason or "")


def test_removal_failure_is_noted(client: FakeClient, make_job: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("nightly.config.retry.time.sleep", lambda s: None)
    client.remove_error = APIError("device busy")
    result, sink = run(executor(client), make_job())
    assert result.exit_status == 0
    assert any("could not remove" in n and client.last.name in n for n in result.notes)
    assert "could not remove" in sink.text


def test_keep_container_keeps_it_running_and_says_how_to_enter(client: FakeClient, make_job: Any) -> None:
    client.behaviour = Behaviour(exit_code=2)
    result, sink = run(executor(client, keep_container=True, base_url="unix:///x/podman.sock"), make_job())
    c = client.last
    assert result.exit_status == 2
    assert not c.removed
    assert c.starts == 2  # restarted: the wrapper keeps it up, the recipe does not run again
    (note,) = result.notes
    assert f"docker exec -it {c.name} bash" in note
    assert "DOCKER_HOST=unix:///x/podman.sock" in note
    assert f"podman exec -it {c.name} bash" in note
    assert note in sink.text


def test_close_removes_containers_still_running(client: FakeClient, make_job: Any) -> None:
    client.behaviour = Behaviour(hang=True)
    ex = executor(client)
    results: list[Any] = []
    t = threading.Thread(target=lambda: results.append(run(ex, make_job(timeout_s=60))[0]))
    t.start()
    deadline = time.monotonic() + 5
    while not (client.created and client.last.status == "running") and time.monotonic() < deadline:
        time.sleep(0.01)
    ex.close()
    t.join(10)
    assert not t.is_alive()
    assert client.last.removed
    assert results
    assert not results[0].ok


# ---------------------------------------------------------------------------- preflight


def test_preflight_lists_every_missing_image_with_its_builds(client: FakeClient, make_job: Any) -> None:
    client.missing |= {"old/manylinux-cuda100", "old/conda-cuda"}
    jobs = [
        make_job(build_id="manywheel_3.7m_cu100", image="old/manylinux-cuda100"),
        make_job(build_id="manywheel_3.6m_cu100", image="old/manylinux-cuda100"),
        make_job(build_id="conda_3.7_cu100", image="old/conda-cuda"),
        make_job(build_id="manywheel_3.11_cpu"),
    ]
    with pytest.raises(ExecutorError) as err:
        executor(client).preflight(jobs)
    text = str(err.value)
    needed = "needed by: manywheel_3.7m_cu100, manywheel_3.6m_cu100"
    assert f"missing image old/manylinux-cuda100, {needed}" in text
    assert "missing image old/conda-cuda, needed by: conda_3.7_cu100" in text
    assert f"missing image {IMAGE}" not in text
    assert "2 problem(s)" in text
    assert client.pulled == []


def test_preflight_pulls_when_allowed(client: FakeClient, make_job: Any) -> None:
    client.missing |= {"reg/a:1", "reg/b:1"}
    client.pullable.add("reg/a:1")
    jobs = [make_job(build_id="x", image="reg/a:1"), make_job(build_id="y", image="reg/b:1")]
    with pytest.raises(ExecutorError) as err:
        executor(client, pull=True).preflight(jobs)
    assert sorted(client.pulled) == ["reg/a:1", "reg/b:1"]
    assert "reg/a:1" not in str(err.value)
    assert "missing image reg/b:1 (pull failed: " in str(err.value)
    assert "needed by: y" in str(err.value)


def test_preflight_passes_when_everything_is_there(client: FakeClient, make_job: Any) -> None:
    job = make_job()
    executor(client).preflight([job])  # raises nothing
    assert job.image in client.looked_up  # the image was really checked
    assert client.pulled == []  # and, being there, not pulled


def test_preflight_unreachable_engine_says_what_to_do(make_job: Any) -> None:
    def factory() -> Any:
        raise DockerException("Error while fetching server API version: connection refused")

    settings = ContainerSettings(base_url="unix:///tmp/nowhere/podman.sock")
    ex = ContainerExecutor(settings, client_factory=factory)
    with pytest.raises(ExecutorError) as err:
        ex.preflight([make_job()])
    text = str(err.value)
    assert "unix:///tmp/nowhere/podman.sock" in text
    assert "scripts/container-engine.sh" in text
    assert isinstance(err.value.__cause__, DockerException)


def test_preflight_names_docker_host_when_no_base_url(make_job: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/elsewhere.sock")

    def factory() -> Any:
        raise DockerException("connection refused")

    with pytest.raises(ExecutorError, match=re.escape("unix:///run/elsewhere.sock (DOCKER_HOST)")):
        ContainerExecutor(client_factory=factory).preflight([make_job()])


def test_preflight_checks_cuda_toolkit_folders(client: FakeClient, make_job: Any, tmp_path: Path) -> None:
    ex = executor(client, cuda_mounts={"cu130": tmp_path / "no-such-cuda"})
    with pytest.raises(ExecutorError, match=r"no-such-cuda.*needed by: manywheel_3\.11_cu130"):
        ex.preflight([make_job(cuda="cu130", build_id="manywheel_3.11_cu130")])


def test_module_import_does_not_import_docker() -> None:
    import subprocess
    import sys

    code = "import sys, nightly.executors.container; print('docker' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
