"""Cluster mode with mutual TLS, on a real Dask cluster on loopback (docs/cluster.md).

The scheduler and three workers run with certificates made by `nightly cluster certs`
(`--protocol tls`, `--tls-ca-file/--tls-cert/--tls-key`, as the docs say); the orchestrator is
the real `nightly` command with [cluster] tls_ca_file, tls_cert and tls_key. Strangers (no
certificate, or one of another CA) are turned away at the TLS handshake; a plain address off
loopback is refused before anything is done; no key material shows up in any log or output.
The cluster helpers (DaskCluster, make_project, check_night) are test_cluster's.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.cli import Started
from tests.support.cluster import (
    ALL_BUILDS,
    DASK,
    SUCCEEDED_FOOTER,
    DaskCluster,
    check_night,
    make_project,
    mirror_files,
    run_args,
    staged_files,
)
from tests.support.fixture_types import MakeProject, MakeRecipe, RunCli, StartCli, WaitUntil
from tests.support.projects import Project

HOSTS = "scheduler,lin-a,lin-b,mac"


def _certs(folder: Path, hosts: str = HOSTS) -> Path:
    from nightly.cluster.tls import make_certs, parse_hosts

    make_certs(folder, parse_hosts(hosts))
    return folder


def _tls_toml(certs: Path, name: str = "orchestrator") -> str:
    return (f'tls_ca_file = "{certs / "ca.pem"}"\ntls_cert = "{certs / f"{name}.pem"}"\n'
            f'tls_key = "{certs / f"{name}-key.pem"}"\n')


def _key_bodies(*folders: Path) -> list[str]:
    """Every private key's base64 lines (the PEM body): none may appear anywhere else."""
    lines = []
    for folder in folders:
        for key in folder.glob("*-key.pem"):
            lines += [ln for ln in key.read_text().splitlines() if ln and not ln.startswith("-----")]
    assert lines
    return lines


def _assert_no_key_material(bodies: list[str], *roots: Path, texts: tuple[str, ...] = ()) -> int:
    """Scan every file under `roots` (logs, state, reports, staging) and `texts`."""
    scanned = 0
    for root in roots:
        for f in root.rglob("*"):
            if not f.is_file() or f.name.endswith("-key.pem"):
                continue
            data = f.read_bytes().decode("utf-8", "replace")
            scanned += 1
            for b in bodies:
                assert b not in data, f"key material in {f}"
            assert "PRIVATE KEY-----" not in data, f"a private key in {f}"
    for t in texts:
        for b in bodies:
            assert b not in t
    return scanned


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaskCluster]:
    base = tmp_path_factory.mktemp("tls-cluster")
    c = DaskCluster(base, certs=_certs(base / "certs"))
    c.start()
    yield c
    c.close()


@pytest.fixture
def cluster(tls_cluster: DaskCluster) -> DaskCluster:
    tls_cluster.ensure()
    return tls_cluster


def test_a_night_on_a_tls_cluster(
    night_project: MakeProject, make_recipe: MakeRecipe, run_cli: RunCli, cluster: DaskCluster
) -> None:
    assert cluster.certs is not None
    assert cluster.address.startswith("tls://127.0.0.1:")
    p = make_project(night_project, make_recipe, cluster, extra=_tls_toml(cluster.certs)
                     + "require_encryption = true\n")
    code, out, err = run_cli(run_args(p), timeout=120)
    assert code == 0, (out, err)
    state = check_night(p, cluster, ALL_BUILDS)
    assert all(state[b]["machine"].startswith("tls://127.0.0.1:") for b in ALL_BUILDS)
    assert len(mirror_files(p)) == len(ALL_BUILDS)
    assert staged_files(p) == []
    run_log = (p.day / "logs" / "master" / "run.log").read_text()
    assert f"on cluster {cluster.address}" in run_log
    # Every worker connected over TLS: the scheduler only listens there.
    workers = cluster.workers()
    assert sorted(workers) == ["lin-a", "lin-b", "mac"]
    assert all(a.startswith("tls://") for a in workers.values())
    scanned = _assert_no_key_material(_key_bodies(cluster.certs), p.path, cluster.base,
                                      texts=(out, err))
    assert scanned > 20


def test_strangers_cannot_connect_or_submit(tmp_path: Path, cluster: DaskCluster) -> None:
    from distributed import Client
    from distributed.security import Security

    assert cluster.certs is not None
    host, port = "127.0.0.1", int(cluster.address.rsplit(":", 1)[1])
    sched_log = cluster.base / "scheduler.log"
    seen = sched_log.stat().st_size
    ran = tmp_path / "ran"

    def touch() -> None:  # what a stranger would like to run on the workers
        ran.write_text("x")

    def connect_and_submit(address: str, security: Security | None) -> None:
        c = Client(address, timeout=5, set_as_default=False, security=security)  # type: ignore[no-untyped-call]
        try:
            c.submit(touch).result(timeout=10)
        finally:
            c.close()  # type: ignore[no-untyped-call]

    def attempt(address: str, security: Security | None) -> BaseException:
        with pytest.raises((OSError, TimeoutError)) as e:
            connect_and_submit(address, security)
        return e.value

    def handshake_without_certificate() -> None:
        assert cluster.certs is not None
        ctx = ssl.create_default_context(cafile=str(cluster.certs / "ca.pem"))
        ctx.check_hostname = False
        with socket.create_connection((host, port), timeout=10) as raw, \
                ctx.wrap_socket(raw) as s:
            s.sendall(b"\0" * 16)
            s.recv(16)  # TLS 1.3: the server's refusal of the handshake arrives here

    # 1. A Dask client speaking plain tcp to the TLS port.
    attempt(f"tcp://{host}:{port}", None)
    # 2. A TLS client without a certificate: the scheduler demands one.
    # (The alert usually arrives; the scheduler may close first: then a reset or an EOF.)
    with pytest.raises((ssl.SSLError, ConnectionResetError)):
        handshake_without_certificate()
    # 3. A Dask client with a certificate of another CA (and that CA), 4. or with our CA
    # file but a foreign certificate.
    other = _certs(tmp_path / "other", "intruder")
    foreign = Security(  # type: ignore[no-untyped-call]
        tls_ca_file=str(other / "ca.pem"), tls_client_cert=str(other / "intruder.pem"),
        tls_client_key=str(other / "intruder-key.pem"), require_encryption=True)
    err = attempt(cluster.address, foreign)
    assert "TLS certificate does not match" in str(err) or "CERTIFICATE_VERIFY_FAILED" in str(err)
    mixed = Security(  # type: ignore[no-untyped-call]
        tls_ca_file=str(cluster.certs / "ca.pem"),
        tls_client_cert=str(other / "intruder.pem"),
        tls_client_key=str(other / "intruder-key.pem"), require_encryption=True)
    attempt(cluster.address, mixed)  # (the client sees an alert or an EOF: the log says why)
    # 5. A worker with a foreign certificate cannot join (it would be given builds).
    log = tmp_path / "intruder-worker.log"
    with log.open("wb") as f:
        proc = subprocess.run(
            [str(DASK), "worker", cluster.address, "--name", "intruder", "--nthreads", "1",
             "--resources", "slots=4,platform-linux=1", "--no-nanny", "--host", "127.0.0.1",
             "--no-dashboard", "--death-timeout", "5", "--local-directory", str(tmp_path / "w"),
             "--tls-ca-file", str(other / "ca.pem"), "--tls-cert", str(other / "intruder.pem"),
             "--tls-key", str(other / "intruder-key.pem")],
            stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=60,
            env={k: v for k, v in os.environ.items() if not k.startswith("DASK_")}, check=False)
    assert proc.returncode != 0, log.read_text()
    assert "intruder" not in cluster.workers()
    assert not ran.exists()
    # The scheduler refused each at the handshake, and logged why.
    with sched_log.open("rb") as logged:
        logged.seek(seen)
        refusals = logged.read().decode()
    assert "WRONG_VERSION_NUMBER" in refusals  # 1.
    assert "PEER_DID_NOT_RETURN_A_CERTIFICATE" in refusals  # 2.
    assert refusals.count("CERTIFICATE_VERIFY_FAILED") + refusals.count("UNKNOWN_CA") >= 3  # 3-5.
    _assert_no_key_material(_key_bodies(cluster.certs, other), cluster.base, tmp_path)


def test_nightly_with_a_foreign_certificate_cannot_reach_the_scheduler(
    night_project: MakeProject, make_recipe: MakeRecipe, run_cli: RunCli, cluster: DaskCluster, tmp_path: Path
) -> None:
    other = _certs(tmp_path / "other", "x")
    p = make_project(night_project, make_recipe, cluster,
                     extra=_tls_toml(other, "x").replace('connect_timeout = "20s"', ""))
    started = time.monotonic()
    code, out, err = run_cli(run_args(p), timeout=120)
    assert code == 1, (out, err)
    assert "cannot reach the Dask scheduler" in err
    assert "tls_ca_file" in err
    assert time.monotonic() - started < 60
    assert all(p.starts(b) == 0 for b in ALL_BUILDS)
    _assert_no_key_material(_key_bodies(other), p.path, texts=(out, err))


def test_addresses_the_night_refuses(
    night_project: MakeProject, make_recipe: MakeRecipe, run_cli: RunCli, cluster: DaskCluster,
    tmp_path: Path
) -> None:
    assert cluster.certs is not None
    p = make_project(night_project, make_recipe, cluster)
    text = p.config.read_text().replace('connect_timeout = "20s"', "connect_timeout = 1")
    p.config.write_text(text)
    # Plain tcp off loopback: refused before anything is done (no day folder), exit 2.
    off = "tcp://192.0.2.10:8786"  # TEST-NET-1: not this machine, not loopback
    code, out, err = run_cli(run_args(p, "--cluster", off), timeout=60)
    assert code == 2, (out, err)
    assert "refusing the unencrypted cluster address tcp://192.0.2.10:8786" in err
    for name in ("tls_ca_file", "tls_cert", "tls_key", "insecure = true"):
        assert name in err
    assert not p.day.exists()
    # The TLS scheduler's own port at tcp:// (loopback, require_encryption = false): the
    # handshake fails like an unreachable scheduler; the message says to use tls://, not
    # that certificates are wrong, and the day's first run leaves no day folder behind.
    plain = cluster.address.replace("tls://", "tcp://", 1)
    code, out, err = run_cli(run_args(p, "--cluster", plain), timeout=60)
    assert code == 1, (out, err)
    assert f"cannot reach the Dask scheduler at {plain}" in err
    assert f"use {cluster.address}" in err
    assert "Traceback" not in out + err
    assert not p.day.exists()
    # ... unless the config accepts the risk: then it really tries (and nothing listens).
    p.config.write_text(text.replace("[cluster]\n", "[cluster]\ninsecure = true\n"))
    code, out, err = run_cli(run_args(p, "--cluster", off), timeout=60)
    assert code == 1, (out, err)
    assert "cannot reach the Dask scheduler at tcp://192.0.2.10:8786" in err
    # A tls:// address without certificates names the settings; exit 2.
    p.config.write_text(text)
    code, out, err = run_cli(run_args(p, "--cluster", cluster.address), timeout=60)
    assert code == 2, (out, err)
    assert "cluster.tls_ca_file" in err
    assert "nightly cluster certs" in err
    # require_encryption refuses plain tcp even on loopback.
    p.config.write_text(text.replace("[cluster]\n", "[cluster]\nrequire_encryption = true\n"))
    code, out, err = run_cli(run_args(p, "--cluster", "tcp://127.0.0.1:8786"), timeout=60)
    assert code == 2, (out, err)
    assert "require_encryption" in err


def test_a_worker_through_nightly_names_a_tls_mix_up_then_joins(
    tmp_path: Path, run_cli: RunCli, cluster: DaskCluster
) -> None:
    """`nightly cluster worker` (docs/cluster.md): `dask worker`'s arguments, the TLS ones
    checked first. Without them at tls:// (where `dask worker` prints some 80 lines of
    traceback), or with them at tcp://: one line naming the fix, exit 2; with them, it
    becomes `dask worker` and joins the TLS cluster."""
    from tests.support.cli import child_env, nightly_cmd

    assert cluster.certs is not None
    base = [cluster.address, "--name", "via-nightly", "--nthreads", "1",
            "--resources", "spare=1", "--no-nanny", "--host", "127.0.0.1", "--no-dashboard",
            "--dashboard-address", "127.0.0.1:0", "--death-timeout", "30",
            "--local-directory", str(tmp_path / "w")]
    code, out, err = run_cli(["cluster", "worker", *base], timeout=60)
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    (line,) = err.strip().splitlines()
    assert "--tls-ca-file, --tls-cert, --tls-key are not given" in line
    assert "nightly cluster certs" in line
    plain = cluster.address.replace("tls://", "tcp://", 1)
    code, out, err = run_cli(["cluster", "worker", plain, *cluster.tls_args("lin-a")], timeout=60)
    assert code == 2, (out, err)
    assert f"use {cluster.address}" in err
    assert "via-nightly" not in cluster.workers()
    log = tmp_path / "via-nightly.log"
    env = {k: v for k, v in child_env().items() if not k.startswith("DASK_")}
    with log.open("wb") as f:
        proc = subprocess.Popen([*nightly_cmd(), "cluster", "worker", *base,
                                 *cluster.tls_args("lin-a")],
                                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env)
    try:
        cluster.wait_for({"via-nightly"}, timeout=60)
        assert cluster.workers()["via-nightly"].startswith("tls://127.0.0.1:")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# ---------------------------------------------------------------------------- verified staging

VICTIM = "manywheel_3.7m_cu100"


def _finished_in_staging(
    p: Project, start_cli: StartCli, wait_until: WaitUntil, cluster: DaskCluster
) -> tuple[Started, Path]:
    """Start the night, freeze the orchestrator while VICTIM runs, let VICTIM finish on its
    worker (packages and result.json in staging, not yet collected): (the night, its attempt)."""
    night = start_cli(run_args(p))
    wait_until(lambda: p.starts(VICTIM) == 1, timeout=60, what="the victim build to start")
    os.kill(night.pid, signal.SIGSTOP)
    p.go(VICTIM)
    results: Callable[[], list[Path]] = lambda: [f for f in staged_files(p)  # noqa: E731
                       if f.name == "result.json" and f"/builds/{VICTIM}/" in str(f)]
    wait_until(results, timeout=60, what="the victim's result in staging")
    return night, results()[0].parent


def _tamper_package(p: Project, attempt: Path) -> tuple[str, bytes]:
    """What a host of the build network with write access to staging can do: replace the
    package through the store, metadata and all."""
    import hashlib

    from nightly.stores.folder import FileStore

    root = p.path / "staging"
    (pkg,) = (attempt / "packages").iterdir()
    evil = pkg.read_bytes() + b"\n# a backdoor\n"
    tmp = p.path / "evil.whl"
    tmp.write_bytes(evil)
    key = str(pkg.relative_to(root))
    FileStore(root).put(key, tmp, hashlib.sha256(evil).hexdigest())
    assert pkg.read_bytes() == evil
    return pkg.name, evil


def test_a_package_changed_in_staging_is_caught_and_not_published(
    night_project: MakeProject, make_recipe: MakeRecipe, start_cli: StartCli, wait_until: WaitUntil,
    cluster: DaskCluster
) -> None:
    assert cluster.certs is not None
    p = make_project(night_project, make_recipe, cluster, extra=_tls_toml(cluster.certs),
                     behaviours={VICTIM: "go:60"}, default="sleep:0.2")
    night, attempt = _finished_in_staging(p, start_cli, wait_until, cluster)
    name, evil = _tamper_package(p, attempt)
    log_txt = attempt / "log.txt"  # and its log, to hide what happened
    log_txt.write_text("all fine\n")
    os.kill(night.pid, signal.SIGCONT)
    code, out, err = night.wait(timeout=120)
    assert code == 1, (out, err)
    state = p.state()["builds"]
    e = state[VICTIM]
    assert e["status"] == "failed"
    assert e["reason"].startswith("verifying staging: a package is not the one its worker built")
    assert f"{name}: staging holds {len(evil)} bytes" in e["reason"]
    assert "the worker reported" in e["reason"]
    assert "nothing of it is published" in e["reason"]
    assert e["packages"] == []
    assert not e.get("published")
    # Nothing of it anywhere: not in packages/, not on the mirror; the others all went out.
    assert not any(f.name == name for f in (p.day / "packages").rglob("*"))
    published = mirror_files(p)
    assert len(published) == len(ALL_BUILDS) - 1
    assert all(evil not in f.read_bytes() for f in published)
    assert name not in [f.name for f in published]
    others = [b for b in ALL_BUILDS if b != VICTIM]
    assert all(state[b]["status"] == "succeeded" for b in others)
    log = (p.day / "logs" / "failed" / f"{VICTIM}.log").read_text()
    assert e["reason"] in log
    assert "all fine" in log
    assert "warning: this log as found in staging" in log
    assert "is not the one the worker recorded" in log
    # The night's sealing key went to the workers inside their tasks only: in no log.
    key = (p.day / "work" / "cluster" / "seal.key").read_bytes()
    for f in [*cluster.base.rglob("*.log"), *p.path.rglob("*.log"), p.day / "state.json"]:
        text = f.read_bytes()
        assert key not in text, f
        assert key.hex().encode() not in text, f
    _assert_no_key_material(_key_bodies(cluster.certs), p.path, cluster.base, texts=(out, err))


def test_a_forged_result_in_staging_is_not_adopted(
    night_project: MakeProject, make_recipe: MakeRecipe, start_cli: StartCli, run_cli: RunCli,
    wait_until: WaitUntil, cluster: DaskCluster
) -> None:
    """The orchestrator was killed; meanwhile someone rewrote a finished attempt in staging,
    package and result.json alike. The rerun does not adopt it: it builds that one again."""
    assert cluster.certs is not None
    p = make_project(night_project, make_recipe, cluster, extra=_tls_toml(cluster.certs),
                     behaviours={VICTIM: "go:60"}, default="sleep:0.2")
    night, attempt = _finished_in_staging(p, start_cli, wait_until, cluster)
    os.kill(night.pid, signal.SIGKILL)
    night.wait(timeout=10)
    _, evil = _tamper_package(p, attempt)
    import hashlib

    result = json.loads((attempt / "result.json").read_text())
    assert result["seal"]  # the worker sealed it
    for rec in result["packages"]:
        rec["sha256"], rec["size"] = hashlib.sha256(evil).hexdigest(), len(evil)
    (attempt / "result.json").write_text(json.dumps(result))
    p.go(VICTIM)  # (its rebuild need not wait)

    code, out, err = run_cli(run_args(p), timeout=120)
    assert code == 0, (out, err)
    run_log = (p.day / "logs" / "master" / "run.log").read_text()
    assert f"not adopted {VICTIM}" in run_log
    assert "does not carry this night's seal" in run_log
    assert f"adopt  {VICTIM}" not in run_log
    assert p.starts(VICTIM) == 2  # built again
    state = check_night(p, cluster, [b for b in ALL_BUILDS if b != VICTIM])
    assert state[VICTIM]["status"] == "succeeded"
    # Its log keeps the forged attempt's, marked as not used, above the one that counts.
    text = (p.day / state[VICTIM]["log"]).read_text()
    assert text.index("but its result was not used") < text.rindex(SUCCEEDED_FOOTER)
    (pkg,) = state[VICTIM]["packages"]
    got = (p.day / pkg["path"]).read_bytes()
    assert got != evil
    assert b"a backdoor" not in got
    published = mirror_files(p)
    assert len(published) == len(ALL_BUILDS)
    assert all(b"a backdoor" not in f.read_bytes() for f in published)


# ---------------------------------------------------------------------------- the demo

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_demo_night_on_a_tls_cluster(tmp_path: Path, run_cli: RunCli, cluster: DaskCluster) -> None:
    """The shipped demo configuration (nightly.toml: the demo project, its real recipes and
    smoke test), one real build, run by the TLS cluster's workers and published."""
    import hashlib

    assert cluster.certs is not None
    demo = (REPO / "nightly.toml").read_text()
    demo = demo.replace('source = "examples/demo"', f'source = "{REPO / "examples" / "demo"}"')
    text = f'recipes = "{REPO / "recipes"}"\n' + demo + f"""
[cluster]
address = "{cluster.address}"
staging = "staging"
log_flush = 0.5
connect_timeout = "20s"
require_encryption = true
{_tls_toml(cluster.certs)}"""
    config = tmp_path / "nightly.toml"
    config.write_text(text)
    bid = "manywheel_3.11_cpu"
    code, out, err = run_cli(["run", "--config", str(config), "--date", "2024_05_01",
                              "--select", bid], timeout=900)
    assert code == 0, (out, err)
    day = tmp_path / "nightlies" / "2024_05_01"
    state = json.loads((day / "state.json").read_text())["builds"]
    e = state[bid]
    assert e["status"] == "succeeded", e
    assert e["machine"].startswith("tls://127.0.0.1:")
    assert e["worker_name"] in ("lin-a", "lin-b")
    (pkg,) = e["packages"]
    wheel = day / pkg["path"]
    assert wheel.name.endswith(".whl")
    assert "0.1.0.dev20240501" in wheel.name
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == pkg["sha256"]
    published = [f for f in (tmp_path / "mirror").rglob("*.whl") if ".nightly-store" not in f.parts]
    assert [f.name for f in published] == [wheel.name]
    assert published[0].read_bytes() == wheel.read_bytes()
    log = (day / "logs" / "succeeded" / f"{bid}.log").read_text()
    assert log.count(SUCCEEDED_FOOTER) == 1
    _assert_no_key_material(_key_bodies(cluster.certs), tmp_path, cluster.base, texts=(out, err))


def test_a_rogue_scheduler_gets_nothing(
    night_project: MakeProject, make_recipe: MakeRecipe, run_cli: RunCli, cluster: DaskCluster,
    tmp_path: Path
) -> None:
    """Someone on the network poses as the scheduler (with a CA of their own): the night's
    orchestrator refuses it before sending anything (the tasks would carry the config and the
    night's seal key)."""
    assert cluster.certs is not None
    rogue_certs = _certs(tmp_path / "rogue", "scheduler")
    rogue = DaskCluster(tmp_path, certs=rogue_certs)
    port = rogue.address.rsplit(":", 1)[1]
    proc = rogue._spawn("scheduler", [
        "scheduler", "--protocol", "tls", "--host", "127.0.0.1", "--port", port,
        "--no-dashboard", *rogue.tls_args("scheduler")])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # listening?
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", int(port))) == 0:
                    break
            time.sleep(0.2)
        p = make_project(night_project, make_recipe, cluster, extra=_tls_toml(cluster.certs))
        code, out, err = run_cli(run_args(p, "--cluster", rogue.address), timeout=120)
        assert code == 1, (out, err)
        assert f"cannot reach the Dask scheduler at {rogue.address}" in err
        assert all(p.starts(b) == 0 for b in ALL_BUILDS)
        log = (tmp_path / "scheduler.log").read_text()
        assert "TLS handshake failed" in log
        assert "Receive client connection" not in log  # (what it logs for a client)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        rogue.close()
