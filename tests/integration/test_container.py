"""ContainerExecutor against a real engine: Podman's Docker API service started by
scripts/container-engine.sh, with the builder image nightly-builder:bookworm.

Every container a test creates carries a label unique to the test; after each test no
container with it may be left (the fixture removes stragglers, then fails the test).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import threading
import time
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nightly.executors.base import ExecResult, Job
from nightly.executors.container import (
    HOME_DIR,
    OUTPUT_MOUNT,
    RECIPES_MOUNT,
    SOURCE_MOUNT,
    WORK_DIR,
    ContainerExecutor,
    ContainerSettings,
)
from nightly.executors.container_engine import CA_ENV, CA_MOUNT, host_ca_bundle
from tests.support.engine import Engine

pytestmark = pytest.mark.engine

TEST_LABEL = "nightly.test"
REPO = Path(__file__).resolve().parents[2]
HOST_CUDA = Path("/usr/local/cuda-13.0")
# What the engine and bash add to a process's environment on their own (not the host's):
# podman sets `container` and TERM, the engine HOSTNAME and (from the image) PATH; bash
# PWD, OLDPWD, SHLVL and `_`.
ENGINE_KEYS = {"PATH", "HOSTNAME", "container", "TERM"}
SHELL_KEYS = {"PWD", "OLDPWD", "SHLVL", "_"}


@dataclass
class Sink:
    """Collects a build's output with the time each chunk arrived."""

    chunks: list[tuple[float, bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, data: bytes) -> None:
        with self.lock:
            self.chunks.append((time.monotonic(), data))

    @property
    def text(self) -> str:
        with self.lock:
            return b"".join(c for _, c in self.chunks).decode(errors="replace")

    def first_time(self, needle: str) -> float | None:
        seen = b""
        with self.lock:
            for t, c in self.chunks:
                seen += c
                if needle.encode() in seen:
                    return t
        return None


@dataclass
class Box:
    """One test's corner of the engine: recipes, jobs and executors labelled for the test."""

    engine: Engine
    root: Path
    label: str
    demo_source: Path | None = None
    _n: int = 0

    def recipe(self, text: str, package: str = "t") -> None:
        path = self.root / "recipes" / package / "build.sh"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("set -euo pipefail\n" + text)
        path.chmod(0o755)

    def job(self, package: str = "t", **overrides: Any) -> Job:
        self._n += 1
        out = self.root / f"out{self._n}"
        work = self.root / f"work{self._n}"
        out.mkdir()
        work.mkdir()
        (self.root / "src").mkdir(exist_ok=True)
        (self.root / "src" / "README").write_text("the source\n")
        fields: dict[str, Any] = {
            "build_id": f"{package}_3.11_cpu",
            "package": package,
            "python": "3.11",
            "cuda": "cpu",
            "env": {"PACKAGE_TYPE": package, "DESIRED_PYTHON": "3.11", "DESIRED_CUDA": "cpu"},
            "recipes_dir": self.root / "recipes",
            "source_dir": self.root / "src",
            "output_dir": out,
            "work_dir": work,
            "timeout_s": 120.0,
            "image": self.engine.image,
        }
        fields.update(overrides)
        return Job(**fields)

    def executor(self, **settings: Any) -> ContainerExecutor:
        labels = {TEST_LABEL: self.label, **settings.pop("labels", {})}
        return ContainerExecutor(ContainerSettings(base_url=self.engine.base_url, labels=labels, **settings))

    def containers(self) -> list[Any]:
        # Filtered by this test's label, so only its own containers are listed (and inspected).
        return self.engine.client.containers.list(
            all=True, filters={"label": f"{TEST_LABEL}={self.label}"}
        )

    def run(
        self, job: Job, ex: ContainerExecutor | None = None, cancel: threading.Event | None = None
    ) -> tuple[ExecResult, Sink]:
        sink = Sink()
        with ex or self.executor() as executor:
            result = executor.run(job, sink, cancel or threading.Event())
        return result, sink


@pytest.fixture
def box(engine: Engine, tmp_path: Path) -> Iterator[Box]:
    b = Box(engine=engine, root=tmp_path, label=uuid.uuid4().hex[:12])
    yield b
    left = b.containers()
    for c in left:
        c.remove(force=True)
    assert not left, f"containers left behind: {[c.name for c in left]}"


def owner(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_uid, st.st_gid


# ---------------------------------------------------------------------------- basics


def test_success_files_owned_by_the_invoking_user(box: Box) -> None:
    box.recipe(
        """
echo "building in $PWD as $(id -u):$(id -g)"
mkdir -p "$OUTPUT_DIR/sub"
echo package > "$OUTPUT_DIR/sub/pkg.txt"
echo scratch > "$WORK_DIR/scratch.txt" && echo > "$HOME/.rc"
if touch "$SOURCE_DIR/x" 2>/dev/null; then echo "source is writable"; exit 9; fi
if touch /nightly/recipes/x 2>/dev/null; then echo "recipes are writable"; exit 9; fi
echo done
"""
    )
    job = box.job()
    result, sink = box.run(job)
    assert result.ok, sink.text
    assert f"as {os.getuid()}:{os.getgid()}" in sink.text
    assert f"building in {WORK_DIR}" in sink.text
    me = (os.getuid(), os.getgid())
    assert owner(job.output_dir / "sub" / "pkg.txt") == me
    assert owner(job.output_dir / "sub") == me
    assert (job.output_dir / "sub" / "pkg.txt").read_text() == "package\n"
    assert sorted(p.name for p in job.output_dir.rglob("*")) == ["pkg.txt", "sub"]
    assert list(job.source_dir.iterdir()) == [job.source_dir / "README"]
    assert not box.containers()


def test_non_root_user_override_owns_the_output(box: Box) -> None:
    box.recipe('id -u; id -g; echo x > "$OUTPUT_DIR/f"; mkdir -p "$WORK_DIR/a" "$HOME/.cache"\n')
    job = box.job()
    result, sink = box.run(job, box.executor(user="4242:4242"))
    assert result.ok, sink.text
    assert sink.text.split()[:2] == ["4242", "4242"]
    assert owner(job.output_dir / "f") == (4242, 4242)


def test_failure_keeps_its_exit_status_and_log(box: Box) -> None:
    box.recipe('echo "compiling"; echo "error: it broke" >&2; exit 3\n')
    result, sink = box.run(box.job())
    assert (result.exit_status, result.reason, result.infra) == (3, None, False)
    assert "compiling" in sink.text
    assert "error: it broke" in sink.text


def test_environment_has_no_host_variable(box: Box, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "s3cr3t-" + uuid.uuid4().hex
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("HOME", "/root/host-home")
    monkeypatch.setenv("USER", "host-user")
    monkeypatch.setenv("HTTP_PROXY", "http://host-proxy:3128")
    monkeypatch.setenv("NIGHTLY_CONFIG", "/etc/nightly.toml")
    # Proxy settings in the Docker CLI's config would be injected by the SDK if it were let.
    docker_config = box.root / "docker-config"
    docker_config.mkdir()
    (docker_config / "config.json").write_text(
        json.dumps({"proxies": {"default": {"httpProxy": "http://cfg-proxy:3128"}}})
    )
    monkeypatch.setenv("DOCKER_CONFIG", str(docker_config))
    box.recipe('env -0 > "$OUTPUT_DIR/env"; cat /proc/self/mountinfo > "$OUTPUT_DIR/mounts"\n')
    job_env = {
        "PACKAGE_TYPE": "manywheel",
        "DESIRED_PYTHON": "3.11",
        "DESIRED_CUDA": "cpu",
        "BUILD_VERSION": "1.0.0.dev20240501",
        "CHANNEL": "nightly",
    }
    job = box.job(env=job_env)
    result, sink = box.run(job)
    assert result.ok, sink.text

    raw = (job.output_dir / "env").read_bytes()
    env = dict(item.split("=", 1) for item in raw.decode().split("\0") if item)
    ours = {**job_env, "SOURCE_DIR": SOURCE_MOUNT, "OUTPUT_DIR": OUTPUT_MOUNT,
            "WORK_DIR": WORK_DIR, "HOME": HOME_DIR}  # fmt: skip
    ca = host_ca_bundle()
    if ca:  # the host's CA bundle, named by its container path (a public file, no secret)
        ours.update(dict.fromkeys(CA_ENV, CA_MOUNT))
    assert {k: env[k] for k in ours} == ours
    assert set(env) - set(ours) <= ENGINE_KEYS | SHELL_KEYS, sorted(set(env) - set(ours))
    assert env["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert secret.encode() not in raw
    for host_value in ("/root/host-home", "host-user", "host-proxy", "cfg-proxy", "/etc/nightly.toml"):
        assert host_value.encode() not in raw

    # Nothing of the host is mounted but the three folders, the host CA bundle (and the engine's own
    # hostname/hosts/resolv.conf/.containerenv files).
    host_dev = os.stat(job.output_dir).st_dev
    targets = set()
    for line in (job.output_dir / "mounts").read_text().splitlines():
        fields = line.split()
        major, minor = map(int, fields[2].split(":"))
        if os.makedev(major, minor) == host_dev:
            targets.add(fields[4])
    engine_files = {"/etc/hostname", "/etc/hosts", "/etc/resolv.conf", "/run/.containerenv"}
    expected = {SOURCE_MOUNT, RECIPES_MOUNT, OUTPUT_MOUNT} | ({CA_MOUNT} if ca else set())
    assert targets - engine_files == expected


def test_output_is_streamed_while_the_build_runs(box: Box) -> None:
    box.recipe('echo "first line"; sleep 4; echo "last line"\n')
    t0 = time.monotonic()
    result, sink = box.run(box.job())
    end = time.monotonic()
    assert result.ok, sink.text
    first = sink.first_time("first line")
    assert first is not None
    assert end - first > 3, "the first line arrived only at the end: output is not streamed"
    assert first - t0 < 5


def test_output_survives_a_stream_that_times_out_in_a_silence(box: Box) -> None:
    # A client whose reads time out after 2 s: the recipe's 6 s of silence breaks the
    # stream, which is followed again; every line arrives once, the last one while it runs.
    import docker

    box.recipe('echo "line 1"; sleep 6; echo "line 2"; sleep 3; echo "line 3"\n')
    ex = ContainerExecutor(
        ContainerSettings(base_url=box.engine.base_url, labels={TEST_LABEL: box.label}),
        client_factory=lambda: docker.DockerClient(base_url=box.engine.base_url, timeout=2),
    )
    result, sink = box.run(box.job(), ex)
    end = time.monotonic()
    assert result.ok, sink.text
    assert sink.text == "line 1\nline 2\nline 3\n"
    second = sink.first_time("line 2")
    assert second is not None
    assert end - second > 2, "line 2 was not streamed after the break"


def test_quick_builds_deliver_their_output_exactly_once(box: Box) -> None:
    # Podman's API sometimes never answers a log follow that races with the container's
    # exit; the executor must still deliver all output, once, and promptly.
    # A run that waited for a stream that never ends would end at the job's timeout instead,
    # failed and saying so: the result, not the clock, shows the output came promptly.
    box.recipe('echo "only line"\n')
    with box.executor() as ex:
        for _ in range(15):
            sink = Sink()
            result = ex.run(box.job(timeout_s=120), sink, threading.Event())
            assert result.ok, (result.reason, sink.text)
            assert sink.text == "only line\n"


# ---------------------------------------------------------------------------- kills


def test_timeout_kills_and_removes_the_container(box: Box) -> None:
    box.recipe('echo "begin"; sleep 600; echo "end of sleep"\n')
    result, sink = box.run(box.job(timeout_s=3))
    assert result.reason == "timeout after 3 s"
    assert "end of sleep" not in sink.text
    assert result.infra
    assert result.exit_status is None
    assert "begin" in sink.text
    assert "timeout after 3 s" in sink.text
    assert not box.containers()


def test_a_process_the_recipe_starts_in_its_own_session_ends_with_the_container(
    box: Box,
) -> None:
    """A recipe that leaves a `setsid` process behind and exits 0: the container is removed
    with the build, and the process with it (its PID namespace ends): none is left on the host."""
    token = f"{uuid.uuid4().int % 10**8 + 10**8}"
    box.recipe(f"setsid sleep {token} </dev/null >/dev/null 2>&1 &\necho started\n")
    result, sink = box.run(box.job(timeout_s=120))
    assert result.ok, (result.reason, sink.text)
    assert "started" in sink.text
    assert not box.containers()
    left = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == \
                    f"sleep\0{token}\0".encode():
                left.append(entry.name)
    assert left == [], f"the recipe's process outlived its container: {left}"


def test_memory_limit_hit_is_out_of_memory_with_the_log_kept(box: Box) -> None:
    box.recipe(
        """
echo "before the allocation"
python3 -c "b = bytearray(512 * 1024 * 1024); print('alloc' + 'ated')"
echo "never $((6 * 7))"
"""
    )
    result, sink = box.run(box.job(memory_limit="64m"))
    assert result.reason == "out of memory (limit 64m)", sink.text
    assert result.exit_status == 137
    assert result.infra
    assert "before the allocation" in sink.text
    assert "never 42" not in sink.text
    assert "allocated" not in sink.text
    assert not box.containers()


def test_cancel_interrupts_and_removes(box: Box) -> None:
    box.recipe('echo "working"; sleep 600\n')
    cancel = threading.Event()
    sink_holder: list[Sink] = []

    def run() -> None:
        sink_holder.append(Sink())
        with box.executor() as ex:
            results.append(ex.run(box.job(), sink_holder[0], cancel))

    results: list[ExecResult] = []
    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 60
    while not (sink_holder and "working" in sink_holder[0].text) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert box.containers(), "the build should be running"
    cancel.set()
    t.join(120)  # the recipe sleeps 600 s: only the cancel ends the run this soon
    assert not t.is_alive()
    (result,) = results
    assert result.interrupted
    assert result.exit_status is None
    assert not box.containers()


class InterruptingEvent(threading.Event):
    """Raises KeyboardInterrupt in the orchestrator's thread once the build has started."""

    def __init__(self, sink: Sink) -> None:
        super().__init__()
        self.sink = sink

    def is_set(self) -> bool:
        if "working" in self.sink.text:
            raise KeyboardInterrupt
        return False


def test_exception_in_the_orchestrator_removes_the_container(box: Box) -> None:
    box.recipe('echo "working"; sleep 600\n')
    sink = Sink()
    with pytest.raises(KeyboardInterrupt), box.executor() as ex:
        ex.run(box.job(), sink, InterruptingEvent(sink))
    assert not box.containers()


def test_keep_container_keeps_it_for_exec(box: Box) -> None:
    box.recipe('echo run >> "$OUTPUT_DIR/runs"; echo state > "$WORK_DIR/state.txt"; exit 4\n')
    job = box.job()
    result, _sink = box.run(job, box.executor(keep_container=True))
    assert result.exit_status == 4
    (kept,) = box.containers()
    try:
        (note,) = result.notes
        assert f"docker exec -it {kept.name} bash" in note
        kept.reload()
        assert kept.status == "running"
        # The note's command works (without -it: no terminal here), with the docker CLI.
        proc = subprocess.run(
            ["docker", "exec", kept.name, "cat", f"{WORK_DIR}/state.txt"],
            env=box.engine.env(), capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == "state\n"
        # Restarting to keep it did not run the recipe again.
        assert (job.output_dir / "runs").read_text() == "run\n"
    finally:
        kept.remove(force=True)


# ---------------------------------------------------------------------------- preflight


def test_reap_removes_what_a_killed_run_left(box: Box) -> None:
    """A run killed with SIGKILL leaves its container running; the rerun's reap removes
    it, and only it (not a container of another job with the same build id)."""
    ex = box.executor()
    job, other = box.job(), box.job()
    # The smoke test of `job`'s build (a job in a scratch folder of its build's folder).
    scratch = job.work_dir.parent / f"smoke-{job.build_id}-x1y2"
    smoke = dataclasses.replace(job, output_dir=scratch / "out", work_dir=scratch / "work")
    for d in (smoke.output_dir, smoke.work_dir):
        d.mkdir(parents=True)
    client = ex.client()
    left: list[Any] = []  # docker's Container
    for j in (job, other, smoke):
        kwargs = ex.create_kwargs(j)
        kwargs["name"] = f"{kwargs['name']}-{uuid.uuid4().hex[:6]}"
        kwargs["command"] = ["sleep", "600"]
        c = client.containers.create(**kwargs)
        c.start()
        left.append(c)
    try:
        lines = ex.reap(job)
        # The low-level listing inspects nothing: other sessions' containers on the shared
        # engine may go between a listing and an inspection.
        names = {n.lstrip("/") for c in client.api.containers(all=True) for n in c.get("Names") or []}
        assert left[0].name not in names
        assert left[1].name in names
        assert left[2].name not in names  # the smoke test a killed run left: gone too
        assert any(left[0].name in line for line in lines)
        assert any(left[2].name in line for line in lines)
    finally:
        for c in left:
            with contextlib.suppress(Exception):
                c.remove(force=True)


def test_preflight_lists_missing_images_once(box: Box) -> None:
    from nightly.errors import ExecutorError

    jobs = [
        box.job(build_id="manywheel_3.7m_cu100", image="localhost/nightly-missing:cuda100"),
        box.job(build_id="manywheel_3.6m_cu100", image="localhost/nightly-missing:cuda100"),
        box.job(build_id="manywheel_3.11_cpu"),
    ]
    with box.executor() as ex, pytest.raises(ExecutorError) as err:
        ex.preflight(jobs)
    text = str(err.value)
    assert "localhost/nightly-missing:cuda100" in text
    assert "manywheel_3.7m_cu100, manywheel_3.6m_cu100" in text
    assert "manywheel_3.11_cpu" not in text
    with box.executor() as ex:
        ex.preflight(jobs[2:])


def test_preflight_unreachable_engine(box: Box) -> None:
    from nightly.errors import ExecutorError

    sock = box.root / "no-engine.sock"
    ex = ContainerExecutor(ContainerSettings(base_url=f"unix://{sock}"))
    with pytest.raises(ExecutorError) as err:
        ex.preflight([box.job()])
    assert str(sock) in str(err.value)
    assert "scripts/container-engine.sh" in str(err.value)


# ---------------------------------------------------------------------------- CUDA


CUDA_SOURCE = r"""
#include <cstdio>
__global__ void add_one(int *a) { a[threadIdx.x] += 1; }
int main() {
  int *d = nullptr;
  cudaError_t e = cudaMalloc(&d, 4 * sizeof(int));
  std::printf("cudaMalloc: %s\n", cudaGetErrorString(e));
  if (e == cudaSuccess) { add_one<<<1, 4>>>(d); cudaFree(d); }
  return 0;
}
"""


def test_cuda_build_with_the_host_toolkit_mounted(box: Box) -> None:
    (box.root / "src").mkdir(exist_ok=True)
    (box.root / "src" / "kernel.cu").write_text(CUDA_SOURCE)
    box.recipe(
        """
/usr/local/cuda/bin/nvcc --version
cp "$SOURCE_DIR/kernel.cu" "$WORK_DIR/"
/usr/local/cuda/bin/nvcc -arch=sm_80 -o "$OUTPUT_DIR/kernel" "$WORK_DIR/kernel.cu"
echo compiled
"""
    )
    job = box.job(cuda="cu130", build_id="t_3.11_cu130")
    result, sink = box.run(job, box.executor(cuda_mounts={"cu130": HOST_CUDA}))
    assert result.ok, sink.text
    assert "release 13.0" in sink.text
    binary = job.output_dir / "kernel"
    assert owner(binary) == (os.getuid(), os.getgid())
    # The executable carries device code: an .nv_fatbin section, built for sm_80.
    sections = subprocess.run(
        ["readelf", "-S", "-W", str(binary)], capture_output=True, text=True, check=True
    ).stdout
    assert ".nv_fatbin" in sections
    assert b"sm_80" in binary.read_bytes()
    # No GPU here: the program runs and says so (the build machine needs none).
    ran = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60, check=False)
    assert ran.returncode == 0
    assert "cudaMalloc:" in ran.stdout


# ---------------------------------------------------------------------------- the demo


DEMO = REPO / "examples" / "demo"


def demo_env(package: str, *, python: str = "", variant: str = "") -> dict[str, str]:
    version = "0.1.0.dev20261121"
    return {
        "PACKAGE_TYPE": package,
        "DESIRED_PYTHON": python,
        "DESIRED_CUDA": "cpu",
        "CUDA_VERSION": "",
        "LIBTORCH_VARIANT": variant,
        "BUILD_VERSION": version,
        "BUILD_NUMBER": "1",
        "CHANNEL": "nightly",
        "NIGHTLY_DATE": "2026_11_21",
        "PYTORCH_BUILD_VERSION": version,
        "PYTORCH_BUILD_NUMBER": "1",
        "OVERRIDE_PACKAGE_VERSION": version,
    }


@pytest.fixture
def demo_box(box: Box) -> Iterator[Box]:
    """A box whose source is a read-only copy of examples/demo and whose recipes are the
    repository's."""
    from tests.integration import recipe_env as renv
    src = renv.readonly_copy_of_demo(box.root / "demo")
    box.demo_source = src
    yield box
    renv.make_writable(src)


def demo_job(box: Box, package: str, **kw: Any) -> Job:
    assert box.demo_source is not None
    return box.job(package, recipes_dir=REPO / "recipes", source_dir=box.demo_source, **kw)


@pytest.mark.slow
def test_demo_manywheel_builds_in_a_container_and_imports_on_the_host(demo_box: Box, tmp_path: Path) -> None:
    env = demo_env("manywheel", python="3.11")
    job = demo_job(demo_box, "manywheel", build_id="manywheel_3.11_cpu", env=env)
    result, sink = demo_box.run(job)
    assert result.ok, sink.text[-6000:]
    wheels = list(job.output_dir.glob("*.whl"))
    assert len(wheels) == 1, sink.text[-3000:]
    wheel = wheels[0]
    assert wheel.name.startswith("nightlydemo-0.1.0.dev20261121-cp311-cp311-"), wheel.name
    assert owner(wheel) == (os.getuid(), os.getgid())

    python = next(
        (Path(p) for p in ("/usr/bin/python3.11", "/usr/local/bin/python3.11") if Path(p).exists()),
        None,
    )
    assert python is not None, "the host needs a Python 3.11 to check the wheel"
    venv = tmp_path / "venv"
    subprocess.run([str(python), "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
         "--disable-pip-version-check", "--no-index", "--no-deps", str(wheel)],
        check=True, capture_output=True,
    )  # fmt: skip
    probe = (
        "import json, nightlydemo; print(json.dumps({'v': nightlydemo.__version__, "
        "'add': nightlydemo.add(2, 40), 'file': nightlydemo.__file__}))"
    )
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe], cwd="/", capture_output=True, text=True, check=True
    ).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got["v"] == "0.1.0.dev20261121"
    assert got["add"] == 42
    assert got["file"].startswith(str(venv))


@pytest.mark.slow
def test_demo_libtorch_shared_builds_in_a_container(demo_box: Box, tmp_path: Path) -> None:
    variant = "shared-with-deps"
    job = demo_job(
        demo_box, "libtorch", build_id=f"libtorch_{variant}_cpu", env=demo_env("libtorch", variant=variant)
    )
    result, sink = demo_box.run(job)
    assert result.ok, sink.text[-6000:]
    (zipped,) = job.output_dir.glob("*.zip")
    assert zipped.name == f"libtorch-{variant}-0.1.0.dev20261121.zip"
    assert owner(zipped) == (os.getuid(), os.getgid())
    with zipfile.ZipFile(zipped) as archive:
        names = set(archive.namelist())
    assert "libtorch/lib/libdemo.so" in names
    assert "libtorch/include/demo/demo.h" in names
    assert "libtorch/build-version" in names

    # As a user on the host: unpack, link a program against it, run it.
    unpacked = tmp_path / "unpacked"
    subprocess.run(["unzip", "-q", str(zipped), "-d", str(unpacked)], check=True)
    home = unpacked / "libtorch"
    (tmp_path / "main.cpp").write_text(
        "#include <demo/demo.h>\n#include <cstdio>\n"
        'int main() { std::printf("%s %d\\n", demo::version(), demo::add(40, 2)); return 0; }\n'
    )
    exe = tmp_path / "consumer"
    subprocess.run(
        ["g++", "-std=c++14", str(tmp_path / "main.cpp"), f"-I{home / 'include'}",
         f"-L{home / 'lib'}", "-ldemo", f"-Wl,-rpath,{home / 'lib'}", "-o", str(exe)],
        check=True,
    )  # fmt: skip
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0.1.0.dev20261121", "42"]


@pytest.mark.slow
def test_demo_config_container_build_meets_its_manylinux_policy(
    engine: Engine, tmp_path: Path, run_cli: Any
) -> None:
    """Issue 41 point 10: the README's demo configuration, its manywheel built with
    `--executor container` in the default image (nightly-builder:bookworm, which
    scripts/container-engine.sh and `nightly images engine` build): the demo declares
    manylinux 2_28, and the image repairs the wheel to it (it had no auditwheel)."""
    from packaging.utils import parse_wheel_filename

    from tests.support.day import find_day

    text = (REPO / "nightly.toml").read_text()
    text = text.replace('source = "examples/demo"', f'source = "{REPO / "examples" / "demo"}"')
    text = text.replace('root = "nightlies"', f'root = "nightlies"\nrecipes = "{REPO / "recipes"}"')
    assert 'manylinux = "2_28"' in text
    assert "[images]" not in text  # the default image
    config = tmp_path / "nightly.toml"
    config.write_text(text)
    code, out, err = run_cli(
        ["build", "manywheel", "3.11", "cpu", "--executor", "container", "--no-upload",
         "--config", str(config), "--date", "2026_11_21"],
        env={"DOCKER_HOST": engine.base_url}, timeout=600,
    )  # fmt: skip
    assert code == 0, (out + err)[-4000:]
    day = find_day(tmp_path / "nightlies", "2026_11_21")
    wheels = list((day.path / "packages" / "manywheel" / "cpu").glob("*.whl"))
    assert len(wheels) == 1, out
    _, _, _, tags = parse_wheel_filename(wheels[0].name)
    platforms = {t.platform for t in tags}
    assert "manylinux_2_28_x86_64" in platforms, wheels[0].name
    assert all(p.startswith("manylinux") for p in platforms), wheels[0].name
    entry = json.loads(day.state_path.read_text())["builds"]["manywheel_3.11_cpu"]
    assert entry["manylinux"]["policy"] == "2_28", entry
