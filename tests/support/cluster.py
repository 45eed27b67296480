"""A real Dask cluster on loopback for `nightly run --cluster`, and the projects its
tests run: a `dask scheduler` and three `dask worker` processes (no nanny, so a worker's pid
is the process that runs the builds), each with its own --local-directory standing in for a
build host and its resources: two "linux" workers (slots=2,platform-linux=1) and one "macos"
(slots=1,platform-macos=1). Used by tests/integration/test_cluster.py and test_cluster_tls.py.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.support.fixture_types import MakeProject, MakeRecipe
from tests.support.net import free_port
from tests.support.projects import Project

REPO = Path(__file__).resolve().parents[2]
DASK = REPO / ".venv" / "bin" / "dask"
SUCCEEDED_FOOTER = "result:      SUCCEEDED"

WORKERS = {
    "lin-a": "slots=2,platform-linux=1",
    "lin-b": "slots=2,platform-linux=1",
    "mac": "slots=1,platform-macos=1",
}
LINUX = ("lin-a", "lin-b")

MATRIX = """
[matrix.linux.manywheel]
pythons = ["3.6m", "3.7m"]
cudas = ["cpu", "cu100"]

[matrix.linux.conda]
pythons = ["3.7"]
cudas = ["cpu"]

[matrix.linux.libtorch]
variants = ["shared-with-deps"]
python = "3.7"
cudas = ["cpu"]

[matrix.macos.wheel]
pythons = ["3.7", "3.8"]
cudas = ["cpu"]
"""
LINUX_BUILDS = ["manywheel_3.6m_cpu", "manywheel_3.6m_cu100", "manywheel_3.7m_cpu",
                "manywheel_3.7m_cu100", "conda_3.7_cpu", "libtorch_shared-with-deps_cpu"]
MAC_BUILDS = ["wheel_3.7_cpu", "wheel_3.8_cpu"]
ALL_BUILDS = LINUX_BUILDS + MAC_BUILDS


# ---------------------------------------------------------------------------- the cluster


def _slots(resources: str) -> str:
    """A worker's threads: its build slots, else its GPUs (a GPU worker that only tests)."""
    declared = dict(r.split("=") for r in resources.split(","))
    return declared.get("slots") or declared.get("gpu") or "1"


class DaskCluster:
    """A scheduler and named workers as subprocesses; `ensure()` restarts dead workers.
    `workers`: name -> resources (default WORKERS). `worker_command`: what starts a worker
    before `worker ADDRESS ...` (default this venv's `dask`; e.g. `python -m nightly
    cluster`), with `worker_env` as its whole environment (default this one's, minus DASK_*),
    in the folder `worker_cwd` (default this process's)."""

    def __init__(self, base: Path, certs: Path | None = None,
                 workers: dict[str, str] | None = None, *,
                 worker_command: Sequence[str] = (),
                 worker_env: Mapping[str, str] | None = None,
                 worker_cwd: Path | None = None) -> None:
        self.worker_command = list(worker_command)
        self.worker_env = worker_env
        self.worker_cwd = worker_cwd
        self.base = base
        # With `certs` (nightly cluster certs DIR --hosts scheduler,<workers>): mutual TLS.
        self.certs = certs
        self.worker_resources = dict(workers or WORKERS)
        self.address = f"{'tls' if certs else 'tcp'}://127.0.0.1:{free_port()}"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[object] = []

    def _spawn(self, name: str, args: list[str], command: Sequence[str] = (),
               env: Mapping[str, str] | None = None,
               cwd: Path | None = None) -> subprocess.Popen[bytes]:
        log = (self.base / f"{name}.log").open("ab")
        self._logs.append(log)
        if env is None:
            env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
        return subprocess.Popen([*(command or [str(DASK)]), *args], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=cwd)

    def tls_args(self, name: str) -> list[str]:
        if self.certs is None:
            return []
        c = self.certs
        return ["--tls-ca-file", str(c / "ca.pem"), "--tls-cert", str(c / f"{name}.pem"),
                "--tls-key", str(c / f"{name}-key.pem")]

    def security(self) -> object:
        if self.certs is None:
            return None
        from distributed.security import Security

        c = self.certs
        return Security(  # type: ignore[no-untyped-call]
            tls_ca_file=str(c / "ca.pem"), tls_client_cert=str(c / "orchestrator.pem"),
            tls_client_key=str(c / "orchestrator-key.pem"), require_encryption=True)

    def start(self) -> None:
        port = self.address.rsplit(":", 1)[1]
        protocol = self.address.split("://")[0]
        self.procs["scheduler"] = self._spawn("scheduler", [
            "scheduler", "--protocol", protocol, "--host", "127.0.0.1", "--port", port,
            "--no-dashboard", "--dashboard-address", "127.0.0.1:0",  # its HTTP server stays
            *self.tls_args("scheduler")])                             # even without a dashboard
        self.ensure()

    def ensure(self) -> None:
        started = []
        for name, resources in self.worker_resources.items():
            p = self.procs.get(name)
            if p is None or p.poll() is not None:
                folder = self.base / name
                folder.mkdir(exist_ok=True)
                self.procs[name] = self._spawn(name, [
                    "worker", self.address, "--name", name, "--nthreads", _slots(resources),
                    "--resources", resources, "--local-directory", str(folder), "--no-nanny",
                    "--host", "127.0.0.1", "--no-dashboard", "--dashboard-address", "127.0.0.1:0",
                    "--death-timeout", "60",
                    *self.tls_args(name),
                ], self.worker_command, self.worker_env, self.worker_cwd)
                started.append(name)
        if started:
            self.wait_for(set(self.worker_resources))

    def workers(self) -> dict[str, str]:
        """name -> address of the workers the scheduler knows."""
        from distributed import Client

        with Client(  # type: ignore[no-untyped-call]
            self.address, timeout=20, set_as_default=False, security=self.security()
        ) as c:
            return {str(w["name"]): a for a, w in c.scheduler_info(n_workers=-1)["workers"].items()}

    def task_keys(self) -> list[str]:
        """The keys of every task the scheduler still holds (wanted by a client, or running)."""
        from distributed import Client

        def keys(dask_scheduler: Any) -> list[str]:
            return [str(k) for k in dask_scheduler.tasks]

        with Client(  # type: ignore[no-untyped-call]
            self.address, timeout=20, set_as_default=False, security=self.security()
        ) as c:
            return list(c.run_on_scheduler(keys))

    def wait_for(self, names: set[str], timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if names <= set(self.workers()):
                    return
            except OSError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"workers {names} did not join {self.address}")

    def pid(self, name: str) -> int:
        return self.procs[name].pid

    def close(self) -> None:
        for p in reversed(list(self.procs.values())):
            if p.poll() is None:
                p.terminate()
        end = time.monotonic() + 3
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in self._logs:
            f.close()  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------- projects


def cluster_recipe(make_recipe: MakeRecipe, signals: Path, behaviours: dict[str, str], default: str) -> str:
    """projects.recipe_text's recipe, plus: the pid of the process that started it (the worker) in
    <id>.ppid, and a file named like a wheel (so it is published) instead of a tarball."""
    text = make_recipe(signals, behaviours, default=default)
    text = text.replace('env > "$SIG/$ID.env"', 'env > "$SIG/$ID.env"\necho "$PPID" >> "$SIG/$ID.ppid"')
    # A wheel whose METADATA names the project (nightly files only the project's packages).
    text = text.replace(
        """printf 'package %s\\n' "$ID" > "$f"\nhead -c 3000 /dev/urandom | od -An -x >> "$f"\n""",
        """"$NIGHTLY_PYTHON" -c 'import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w") as z:
    z.writestr("demo-0.dist-info/METADATA", "Metadata-Version: 2.1\\nName: demo\\nVersion: 0\\n")
    z.writestr("demo/payload", sys.argv[2].encode() + os.urandom(3000))' "$f" "package $ID"
""")
    assert "demo-0.dist-info" in text
    return text.replace(
        'f="$OUTPUT_DIR/${ID}-${BUILD_VERSION}.tar.gz"',
        'f="$OUTPUT_DIR/demo-${BUILD_VERSION}+${ID//[^a-zA-Z0-9]/}-py3-none-any.whl"',
    )


def make_project(night_project: MakeProject, make_recipe: MakeRecipe, cluster: DaskCluster, *,
                 name: str = "p",
                 behaviours: dict[str, str] | None = None, default: str = "sleep:0.3",
                 matrix: str = MATRIX, extra: str = "", worker_wait: str = "30s",
                 smoke: bool = False, package: str = "-py3-none-any.whl") -> Project:
    p = night_project(name=name, matrix=matrix, recipes={}, extra=f"""
[[machines]]
name = "mac"
platform = "macos"
queues = 1
executor = "local"

[smoke]
enabled = {str(smoke).lower()}

[publish]
url = "mirror"

# No compiler cache: its wrapper would start the recipe, and these tests check that the
# worker process itself did (the recipe's parent).
[cache]
enabled = false

[cluster]
address = "{cluster.address}"
staging = "staging"
log_flush = 0.2
worker_wait = "{worker_wait}"
connect_timeout = "20s"
{extra}
""")
    recipe = cluster_recipe(make_recipe, p.signals, behaviours or {}, default)
    recipe = recipe.replace("-py3-none-any.whl", package)
    for package in ("manywheel", "conda", "libtorch", "wheel"):
        r = p.path / "recipes" / package / "build.sh"
        r.parent.mkdir(parents=True, exist_ok=True)
        r.write_text(recipe)
        r.chmod(0o755)
    return p


def run_args(p: Project, *extra: str) -> list[str]:
    return ["run", "--config", str(p.config), "--date", "2024_05_01", *extra]


def staged_files(p: Project) -> list[Path]:
    root = p.path / "staging"
    if not root.exists():
        return []
    return [f for f in root.rglob("*") if f.is_file() and ".nightly-store" not in f.parts]


def mirror_files(p: Project) -> list[Path]:
    root = p.path / "mirror"
    return sorted(f for f in root.rglob("*.whl") if ".nightly-store" not in f.parts)


def ppid(p: Project, build_id: str) -> list[int]:
    f = p.signals / f"{build_id}.ppid"
    return [int(x) for x in f.read_text().split()] if f.exists() else []


def check_night(p: Project, cluster: DaskCluster, builds: list[str],
                names: dict[str, str] | None = None) -> dict:  # type: ignore[type-arg]
    """Every build succeeded once, on a worker of its platform, its packages and log filed.
    `names`: the workers' addresses by name (default: the workers the scheduler knows now)."""
    state = p.state()["builds"]
    names = names or cluster.workers()
    for bid in builds:
        e = state[bid]
        assert e["status"] == "succeeded", (bid, e)
        assert e["machine"] == names[e["worker_name"]], e
        assert e["worker_name"] in (("mac",) if bid in MAC_BUILDS else LINUX), e
        assert isinstance(e["queue"], int)
        assert e["executor"] == "local"
        assert p.delivered(bid) >= 1
        (pkg,) = e["packages"]
        f = p.day / pkg["path"]
        assert f.parent == p.day / "packages" / e["package"] / e["cuda"]
        assert hashlib.sha256(f.read_bytes()).hexdigest() == pkg["sha256"] == e["packages"][0]["sha256"]
        log = p.day / e["log"]
        assert log == p.day / "logs" / "succeeded" / f"{bid}.log"
        text = log.read_text()
        assert text.count(SUCCEEDED_FOOTER) == 1, text
        assert f"nightly build {bid}  (attempt {e['attempts']})" in text
        assert "[nightly] cluster attempt " in text
        assert not (p.day / "logs" / "failed" / f"{bid}.log").exists()
        assert not (p.day / "logs" / f"{bid}.log").exists()
    return state  # type: ignore[no-any-return]
