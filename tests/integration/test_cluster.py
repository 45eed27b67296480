"""`nightly run --cluster` on a real Dask cluster on loopback.

A `dask scheduler` and three `dask worker` processes (no nanny, so a worker's pid is the
process that runs the builds), each with its own --local-directory standing in for a build
host and its resources: two "linux" workers (slots=2,platform-linux=1) and one "macos"
(slots=1,platform-macos=1). The orchestrator is the real `nightly` command, as cron runs it.
Recipes are small bash scripts (conftest's, plus a marker of the worker process that ran
them: the recipe's parent), so a night takes seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _slots(resources: str) -> str:
    return dict(r.split("=") for r in resources.split(","))["slots"]


class DaskCluster:
    """A scheduler and named workers as subprocesses; `ensure()` restarts dead workers."""

    def __init__(self, base: Path, certs: Path | None = None) -> None:
        self.base = base
        # With `certs` (nightly cluster certs DIR --hosts scheduler,<workers>): mutual TLS.
        self.certs = certs
        self.address = f"{'tls' if certs else 'tcp'}://127.0.0.1:{_free_port()}"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[object] = []

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = (self.base / f"{name}.log").open("ab")
        self._logs.append(log)
        env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
        return subprocess.Popen([str(DASK), *args], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env)

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
        return Security(tls_ca_file=str(c / "ca.pem"), tls_client_cert=str(c / "orchestrator.pem"),
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
        for name, resources in WORKERS.items():
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
                ])
                started.append(name)
        if started:
            self.wait_for(set(WORKERS))

    def workers(self) -> dict[str, str]:
        """name -> address of the workers the scheduler knows."""
        from distributed import Client

        with Client(self.address, timeout=20, set_as_default=False, security=self.security()) as c:
            return {str(w["name"]): a for a, w in c.scheduler_info(n_workers=-1)["workers"].items()}

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


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaskCluster]:
    c = DaskCluster(tmp_path_factory.mktemp("cluster"))
    c.start()
    yield c
    c.close()


@pytest.fixture
def cluster(dask_cluster: DaskCluster) -> DaskCluster:
    dask_cluster.ensure()
    return dask_cluster


# ---------------------------------------------------------------------------- projects


def cluster_recipe(make_recipe, signals: Path, behaviours: dict[str, str], default: str) -> str:
    """conftest's recipe, plus: the pid of the process that started it (the worker) in
    <id>.ppid, and a file named like a wheel (so it is published) instead of a tarball."""
    text = make_recipe(signals, behaviours, default=default)
    text = text.replace('env > "$SIG/$ID.env"', 'env > "$SIG/$ID.env"\necho "$PPID" >> "$SIG/$ID.ppid"')
    return text.replace(
        'f="$OUTPUT_DIR/${ID}-${BUILD_VERSION}.tar.gz"',
        'f="$OUTPUT_DIR/demo-${BUILD_VERSION}+${ID//[^a-zA-Z0-9]/}-py3-none-any.whl"',
    )


def make_project(night_project, make_recipe, cluster: DaskCluster, *, name: str = "p",
                 behaviours: dict[str, str] | None = None, default: str = "sleep:0.3",
                 matrix: str = MATRIX, extra: str = "", worker_wait: str = "30s",
                 smoke: bool = False, package: str = "-py3-none-any.whl"):
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


def run_args(p, *extra: str) -> list[str]:
    return ["run", "--config", str(p.config), "--date", "2024_05_01", *extra]


def staged_files(p) -> list[Path]:
    root = p.path / "staging"
    if not root.exists():
        return []
    return [f for f in root.rglob("*") if f.is_file() and ".nightly-store" not in f.parts]


def mirror_files(p) -> list[Path]:
    root = p.path / "mirror"
    return sorted(f for f in root.rglob("*.whl") if ".nightly-store" not in f.parts)


def ppid(p, build_id: str) -> list[int]:
    f = p.signals / f"{build_id}.ppid"
    return [int(x) for x in f.read_text().split()] if f.exists() else []


def check_night(p, cluster: DaskCluster, builds: list[str],
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


# ---------------------------------------------------------------------------- tests


def test_a_night_across_workers_respects_resources(night_project, make_recipe, run_cli, cluster):
    p = make_project(night_project, make_recipe, cluster, default="sleep:0.6")
    code, out, err = run_cli(run_args(p, "--cluster", cluster.address), timeout=120)
    assert code == 0, (out, err)
    state = check_night(p, cluster, ALL_BUILDS)
    pids = {n: cluster.pid(n) for n in WORKERS}
    for bid in ALL_BUILDS:
        # Each recipe ran once, started by the very worker process state.json names.
        assert p.starts(bid) == 1, bid
        assert p.delivered(bid) == 1, bid
        assert ppid(p, bid) == [pids[state[bid]["worker_name"]]]
        assert state[bid]["attempts"] == 1
    assert {state[b]["worker_name"] for b in LINUX_BUILDS} == set(LINUX)  # both linux hosts
    # Priorities: longest estimated first (CUDA 70 min > libtorch variant 1 h > CPU 15 min).
    plan = json.loads((p.day / "logs" / "master" / "plan.json").read_text())
    order = sorted(plan["cluster"]["builds"], key=lambda b: -b["priority"])
    estimates = [b["estimate_s"] for b in order]
    assert estimates == sorted(estimates, reverse=True)
    assert order[0]["id"] in ("manywheel_3.6m_cu100", "manywheel_3.7m_cu100")
    assert order[0]["resources"] == {"slots": 1.0, "platform-linux": 0.0}
    assert {w["name"] for w in plan["cluster"]["workers"].values()} == set(WORKERS)
    # Published once, by the orchestrator; the summary as on one machine.
    summary = p.summary()
    assert summary["exit_code"] == 0
    assert summary["machine"] == "cluster"
    assert summary["counts"]["succeeded"] == len(ALL_BUILDS)
    assert len(mirror_files(p)) == len(ALL_BUILDS)
    for bid in ALL_BUILDS:
        assert len(state[bid]["published"]) == 1
    assert (p.day / "report.html").exists()
    # Nothing left in staging; the history has each build once.
    assert staged_files(p) == []
    with sqlite3.connect(p.path / "nightlies" / "history.sqlite") as db:
        rows = db.execute("SELECT build_id, attempt, outcome, machine FROM builds").fetchall()
    assert sorted(r[0] for r in rows) == sorted(ALL_BUILDS)
    assert all(r[2] == "succeeded" and r[3].startswith("tcp://127.0.0.1:") for r in rows)
    run_log = (p.day / "logs" / "master" / "run.log").read_text()
    assert f"on cluster {cluster.address}" in run_log

    # A second run skips everything.
    code, out, err = run_cli(run_args(p), timeout=60)
    assert code == 0, (out, err)
    assert all(p.starts(b) == 1 for b in ALL_BUILDS)
    assert len(mirror_files(p)) == len(ALL_BUILDS)


def test_a_worker_killed_mid_build_is_rerun_elsewhere(
    night_project, make_recipe, start_cli, wait_until, cluster, is_alive
):
    victim = "manywheel_3.7m_cu100"
    p = make_project(night_project, make_recipe, cluster, behaviours={victim: "go:60"})
    night = start_cli(run_args(p, "--cluster", cluster.address))
    wait_until(lambda: ppid(p, victim), timeout=60, what="the victim build to start")
    (worker_pid,) = ppid(p, victim)
    killed = next(n for n in LINUX if cluster.pid(n) == worker_pid)
    # Its log streams to staging while it runs: wait until the recipe's first line is
    # there, then kill the host.
    chunk = re.compile(rf"/builds/{re.escape(victim)}/[^/]+/log/\d{{6}}$")

    def streamed() -> bool:
        return any(chunk.search(str(f)) and f"building {victim}" in f.read_text()
                   for f in staged_files(p))

    wait_until(streamed, timeout=30, what="the victim's log in staging")
    # ...and until every other build is collected, so the kill lands while the victim is
    # the only build running: a build that finished on the host just before the kill (its
    # result not yet collected) would be rerun too, legitimately, and blur what is checked.
    others = [b for b in ALL_BUILDS if b != victim]

    def others_collected() -> bool:
        builds = p.state()["builds"]
        return all(builds.get(b, {}).get("status") == "succeeded" for b in others)

    wait_until(others_collected, timeout=60, what="every other build to succeed")
    names = cluster.workers()  # the killed host's included: builds ran there
    os.kill(worker_pid, signal.SIGKILL)
    wait_until(lambda: not is_alive(worker_pid), timeout=10)
    p.go(victim)
    code, out, err = night.wait(timeout=120)
    assert code == 0, (out, err)

    state = check_night(p, cluster, ALL_BUILDS, names)
    e = state[victim]
    assert e["worker_name"] != killed
    assert e["worker_name"] in LINUX
    assert e["attempts"] == 2
    assert p.starts(victim) == 2  # once on the dead host, once elsewhere
    assert ppid(p, victim) == [worker_pid, cluster.pid(e["worker_name"])]
    for bid in others:  # done before the kill: built once, never again
        assert state[bid]["attempts"] == 1, bid
        assert p.starts(bid) == 1, bid
    # The dead attempt's partial log is kept, marked, above the attempt that succeeded.
    text = (p.day / e["log"]).read_text()
    assert text.count("[nightly] cluster attempt ") == 2
    dead, ok = text.index("ended without a result"), text.index(SUCCEEDED_FOOTER)
    assert text.index(f"building {victim}") < dead < ok
    assert text.count(f"nightly build {victim}  (attempt 1)") == 1
    assert text.count(f"nightly build {victim}  (attempt 2)") == 1
    # Each build succeeded once (state), its package published once.
    assert all(state[b]["status"] == "succeeded" for b in ALL_BUILDS)
    assert len(mirror_files(p)) == len(ALL_BUILDS)
    assert staged_files(p) == []
    with sqlite3.connect(p.path / "nightlies" / "history.sqlite") as db:
        rows = db.execute("SELECT attempt, outcome FROM builds WHERE build_id = ? ORDER BY attempt",
                          (victim,)).fetchall()
    assert rows == [(1, "interrupted"), (2, "succeeded")]


def test_kill9_of_the_orchestrator_then_rerun_completes(
    night_project, make_recipe, start_cli, run_cli, wait_until, cluster, is_alive
):
    p = make_project(night_project, make_recipe, cluster, default="bgsleep:1.5",
                     behaviours={"manywheel_3.6m_cpu": "sleep:0.2", "wheel_3.8_cpu": "sleep:0.2"})
    night = start_cli(run_args(p, "--cluster", cluster.address))

    def succeeded_and_running() -> bool:
        st = [e.get("status") for e in p.state()["builds"].values()]
        return "succeeded" in st and "running" in st

    wait_until(succeeded_and_running, timeout=60, what="a build done and one running")
    # Frozen, then killed: builds running meanwhile finish in staging without being collected.
    os.kill(night.pid, signal.SIGSTOP)
    # state.json as the frozen run left it. A result of a build it calls succeeded may still
    # sit in staging (collected, not yet dropped): wait for one it has not collected.
    before = {b: e["status"] for b, e in p.state()["builds"].items()}

    def uncollected_result() -> bool:
        return any(f.name == "result.json" and before.get(f.parent.parent.name) != "succeeded"
                   for f in staged_files(p))

    wait_until(uncollected_result, timeout=30, what="an uncollected result in staging")
    os.kill(night.pid, signal.SIGKILL)
    night.wait(timeout=10)
    finished_uncollected = {f.parent.parent.name for f in staged_files(p) if f.name == "result.json"}

    code, out, err = run_cli(run_args(p, "--cluster", cluster.address), timeout=120)
    assert code == 0, (out, err)
    state = check_night(p, cluster, ALL_BUILDS)
    for bid, status in before.items():
        if status == "succeeded":
            assert p.starts(bid) == 1, bid  # not built again
    adopted = [b for b in finished_uncollected if before.get(b) != "succeeded"]
    assert adopted
    run_log = (p.day / "logs" / "master" / "run.log").read_text()
    for bid in adopted:
        assert f"adopt  {bid}" in run_log
        assert p.starts(bid) == 1
        assert state[bid]["status"] == "succeeded"
    assert len(mirror_files(p)) == len(ALL_BUILDS)
    # The killed run's attempts were stopped on their workers: no recipe is left running.
    wait_until(lambda: not any(is_alive(pid) for pid in p.pids()), timeout=20,
               what="every recipe process to end")
    assert staged_files(p) == []


def test_builds_no_worker_can_run_are_given_up(night_project, make_recipe, run_cli, cluster):
    """With gpu_smoke, CUDA builds need a worker with the gpu resource: there is none."""
    matrix = """
[matrix.linux.manywheel]
pythons = ["3.7m"]
cudas = ["cpu", "cu100"]
"""
    # (The smoke test must be on for a GPU to matter; a tarball is a package it skips.)
    p = make_project(night_project, make_recipe, cluster, matrix=matrix, default="sleep:0.1",
                     extra="gpu_smoke = true", worker_wait="2s", smoke=True, package=".tar.gz")
    code, out, err = run_cli(run_args(p), timeout=60)
    assert code == 1, (out, err)
    state = p.state()["builds"]
    assert state["manywheel_3.7m_cpu"]["status"] == "succeeded"
    e = state["manywheel_3.7m_cu100"]
    assert e["status"] == "pending"
    assert "no worker with platform-linux, gpu" in e["reason"]
    assert p.starts("manywheel_3.7m_cu100") == 0
    plan = json.loads((p.day / "logs" / "master" / "plan.json").read_text())
    res = {b["id"]: b["resources"] for b in plan["cluster"]["builds"]}
    assert res["manywheel_3.7m_cu100"] == {"slots": 1.0, "platform-linux": 0.0, "gpu": 0.0}


def test_cluster_usage_errors(night_project, make_recipe, run_cli, cluster):
    p = make_project(night_project, make_recipe, cluster)
    code, _, err = run_cli(run_args(p, "--cluster", cluster.address, "--machine", "m"))
    assert code == 2
    assert "--machine and a cluster" in err
    p.config.write_text(p.config.read_text().replace("log_flush = 0.2", "log_flsh = 0.2"))
    code, _, err = run_cli(run_args(p))
    assert code == 2
    assert "cluster.log_flsh" in err
    assert "log_flush" in err
    p.config.write_text(p.config.read_text().replace("log_flsh = 0.2\n", "")
                        .replace('staging = "staging"', 'staging = ""'))
    code, _, err = run_cli(run_args(p))
    assert code == 2
    assert "cluster.staging" in err
    # An unreachable scheduler is an error of the night (exit 1), with what to check.
    p.config.write_text(p.config.read_text().replace('staging = ""', 'staging = "staging"')
                        .replace('connect_timeout = "20s"', "connect_timeout = 1"))
    code, _, err = run_cli(run_args(p, "--cluster", f"tcp://127.0.0.1:{_free_port()}"))
    assert code == 1
    assert "cannot reach the Dask scheduler" in err
