"""`nightly run --cluster` on a real Dask cluster on loopback.

A `dask scheduler` and three `dask worker` processes (no nanny, so a worker's pid is the
process that runs the builds), each with its own --local-directory standing in for a build
host and its resources: two "linux" workers (slots=2,platform-linux=1) and one "macos"
(slots=1,platform-macos=1). The orchestrator is the real `nightly` command, as cron runs it.
Recipes are small bash scripts (tests/support/projects.py's, plus a marker of the worker process that ran
them: the recipe's parent), so a night takes seconds.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import (
    ALL_BUILDS,
    LINUX,
    LINUX_BUILDS,
    SUCCEEDED_FOOTER,
    WORKERS,
    DaskCluster,
    check_night,
    make_project,
    mirror_files,
    ppid,
    run_args,
    staged_files,
)
from tests.support.fixture_types import IsAlive, MakeProject, MakeRecipe, RunCli, StartCli, WaitUntil
from tests.support.net import free_port
from tests.support.tables import unfold_tables


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


# ---------------------------------------------------------------------------- tests


def test_a_night_across_workers_respects_resources(
    night_project: MakeProject, make_recipe: MakeRecipe, run_cli: RunCli, cluster: DaskCluster
) -> None:
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
    assert {b["built_on"] for b in summary["builds"].values()} == set(WORKERS)  # by --name
    assert summary["counts"]["succeeded"] == len(ALL_BUILDS)
    assert len(mirror_files(p)) == len(ALL_BUILDS)
    for bid in ALL_BUILDS:
        assert len(state[bid]["published"]) == 1
    assert (p.day / "report.html").exists()
    # Nothing left in staging, not even empty folders; the history has each build once.
    assert staged_files(p) == []
    assert not (p.path / "staging" / "2024_05_01").exists()
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
    night_project: MakeProject, make_recipe: MakeRecipe, start_cli: StartCli, run_cli: RunCli,
    wait_until: WaitUntil, cluster: DaskCluster, is_alive: IsAlive
) -> None:
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
    # A collected build's task is released; until the scheduler has heard so, a dead worker
    # holding its result would have it computed again (a second start that proves nothing).
    wait_until(lambda: not any(f"-{b}-" in k for k in cluster.task_keys() for b in others),
               timeout=30, what="the scheduler to forget the collected builds' tasks")
    names = cluster.workers()  # the killed host's included: builds ran there
    os.kill(worker_pid, signal.SIGKILL)
    wait_until(lambda: not is_alive(worker_pid), timeout=10)
    p.go(victim)
    code, night_out, err = night.wait(timeout=120)
    assert code == 0, (night_out, err)

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
    # The lost attempt is seen, by the worker's --name (issue 41.12): state.json's `lost`,
    # an interrupted bar on the killed worker's lane in the report's timeline, the status.
    (lost,) = e["lost"]
    assert (lost["attempt"], lost["worker_name"], lost["worker"]) == (1, killed, names[killed])
    assert lost["started"] < lost["ended"] <= e["started"] + 1
    page = (p.day / "report.html").read_text()
    lanes = set(re.findall(r'<div class="machine" data-machine="([^"]*)"', page))
    assert lanes == set(WORKERS), lanes  # by name, never an address
    bars = re.findall(r'<div class="bar interrupted lost" data-build="([^"]+)" data-status="lost" '
                      r'data-worker="([^"]+)"[^>]*>([^<]*)</div>', page)
    assert bars == [(victim, killed, f"{victim} lost ({killed})")]
    start = page.index(f'data-machine="{killed}"')
    end = page.find('<div class="machine"', start)
    assert 'data-status="lost"' in page[start:end if end >= 0 else len(page)]  # its lane
    assert f"attempt 1 lost with worker {killed}" in unfold_tables(night_out)  # its table
    built = p.summary()["builds"][victim]
    assert built["built_on"] == e["worker_name"]
    assert [(x["attempt"], x["worker"]) for x in built["lost"]] == [(1, killed)]
    code, out, err = run_cli(["status", "--config", str(p.config), "--date", "2024_05_01"],
                             timeout=60)
    assert code == 0, (out, err)
    assert f"attempt 1 lost with worker {killed}" in out
    assert "127.0.0.1" not in out  # workers by name in the table
    # Staging left clean: no file, no empty attempt folder.
    assert not (p.path / "staging" / "2024_05_01").exists()


def test_kill9_of_the_orchestrator_then_rerun_completes(
    night_project: MakeProject, make_recipe: MakeRecipe, start_cli: StartCli, run_cli: RunCli,
    wait_until: WaitUntil, cluster: DaskCluster, is_alive: IsAlive
) -> None:
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


def test_builds_no_worker_can_run_are_given_up(
    night_project: MakeProject, make_recipe: MakeRecipe, run_cli: RunCli, cluster: DaskCluster,
    wait_until: WaitUntil
) -> None:
    """The macOS host is down: its builds wait worker_wait for a worker of their platform,
    then are reported not run; the Linux builds go on. (The next test's `ensure` restarts it.)"""
    matrix = """
[matrix.linux.manywheel]
pythons = ["3.7m"]
cudas = ["cpu", "cu100"]

[matrix.macos.wheel]
pythons = ["3.8"]
cudas = ["cpu"]
"""
    mac = cluster.procs["mac"]
    mac.terminate()
    mac.wait(timeout=30)
    wait_until(lambda: "mac" not in cluster.workers(), timeout=30, what="the scheduler to drop mac")
    p = make_project(night_project, make_recipe, cluster, matrix=matrix, default="sleep:0.1",
                     worker_wait="2s")
    code, out, err = run_cli(run_args(p), timeout=60)
    assert code == 1, (out, err)
    state = p.state()["builds"]
    assert state["manywheel_3.7m_cpu"]["status"] == "succeeded"
    assert state["manywheel_3.7m_cu100"]["status"] == "succeeded"
    e = state["wheel_3.8_cpu"]
    assert e["status"] == "pending"
    assert "no worker with platform-macos" in e["reason"]
    assert p.starts("wheel_3.8_cpu") == 0
    plan = json.loads((p.day / "logs" / "master" / "plan.json").read_text())
    res = {b["id"]: b["resources"] for b in plan["cluster"]["builds"]}
    assert res["wheel_3.8_cpu"] == {"slots": 1.0, "platform-macos": 0.0}
    assert res["manywheel_3.7m_cu100"] == {"slots": 1.0, "platform-linux": 0.0}


def test_cluster_usage_errors(
    night_project: MakeProject, make_recipe: MakeRecipe, run_cli: RunCli, cluster: DaskCluster
) -> None:
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
    code, _, err = run_cli(run_args(p, "--cluster", f"tcp://127.0.0.1:{free_port()}"))
    assert code == 1
    assert "cannot reach the Dask scheduler" in err


def test_provenance_is_signed_by_the_orchestrator_and_no_worker_holds_the_key(
    night_project: MakeProject, make_recipe: MakeRecipe, run_cli: RunCli, cluster: DaskCluster,
    tmp_path: Path
) -> None:
    """Workers build; the orchestrator signs, after staging verification. The tasks carry a
    config without the key's path, and nothing a worker wrote or saw holds the key."""
    import pickle

    from nightly import provenance
    from nightly.cluster.orchestrator import config_for_workers
    from nightly.config import load

    key, pub = provenance.keygen(tmp_path / "keys")
    p = make_project(night_project, make_recipe, cluster, name="prov",
                     extra=f'\n[provenance]\nkey = "{key}"\n')
    code, out, err = run_cli(run_args(p, "--cluster", cluster.address), timeout=120)
    assert code == 0, (out, err)
    state = check_night(p, cluster, ALL_BUILDS)
    public = provenance.load_public_key(pub)
    for bid in ALL_BUILDS:
        (pkg,) = state[bid]["packages"]
        f = p.day / pkg["path"]
        bundle = (f.parent / (f.name + provenance.SUFFIX)).read_bytes()
        verdict = provenance.verify(f.name, pkg["sha256"], bundle, public)
        assert verdict.ok, (bid, verdict.reason)
        stmt = provenance.payload_of(bundle)
        assert stmt["predicate"]["runDetails"]["builder"]["version"]["machine"] == state[bid]["worker_name"]
        (published,) = [x for x in (p.path / "mirror").rglob(f.name) if ".nightly-store" not in x.parts]
        assert (published.parent / (published.name + provenance.SUFFIX)).read_bytes() == bundle
    run_log = (p.day / "logs" / "master" / "run.log").read_text()
    assert f"provenance: {len(ALL_BUILDS)} package(s) signed" in run_log

    # What a task carries: the config without the key's path.
    config = load(p.config)
    assert config.provenance.key == key
    carried = pickle.dumps(config_for_workers(config))
    assert str(key).encode() not in carried
    assert config_for_workers(config).provenance.key is None
    # Nothing on the workers' side: their folders, staging, the recipes' environments.
    secret = key.read_bytes()
    worker_side = [*cluster.base.rglob("*"), *(p.path / "staging").rglob("*"), *p.signals.glob("*.env")]
    for f in worker_side:
        if f.is_file():
            data = f.read_bytes()
            assert secret not in data, f
            assert str(key).encode() not in data, f
            assert str(key.parent).encode() not in data, f


def test_live_json_names_a_running_build_and_its_phase(
    night_project: Any, make_recipe: Any, start_cli: Any, run_cli: Any, wait_until: Any,
    cluster: DaskCluster
) -> None:
    """A cluster night writes logs/master/live.json like a local one (issue 50): while a
    build is held on its worker, the file names it, the phase its worker's Runner said, and
    the night's count; `nightly status` from another shell shows the same."""
    held = "manywheel_3.7m_cu100"
    p = make_project(night_project, make_recipe, cluster, behaviours={held: "go:60"})
    night = start_cli(run_args(p, "--cluster", cluster.address))
    path = p.day / "logs" / "master" / "live.json"

    def held_building() -> dict[str, Any] | None:
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        running = {b["build"]: b for b in state["builds"]}
        return state if isinstance(state, dict) and running.get(held, {}).get(
            "phase") == "building" else None

    wait_until(lambda: ppid(p, held) and held_building(), timeout=60,
               what="live.json to show the held build building")
    state = held_building()
    assert state is not None
    assert state["total"] == len(ALL_BUILDS)
    assert state["pid"] == night.pid
    (entry,) = [b for b in state["builds"] if b["build"] == held]
    assert entry["estimate_s"] > 0
    assert entry["started"] <= state["updated"]
    code, out, err = run_cli(["status", "--config", str(p.config), "--date", "2024_05_01"])
    p.go(held)
    assert "running now" in out, (out, err)
    assert re.search(rf"queue \d+: {held} building", out), out
    assert "\x1b" not in out
    code, out, err = night.wait(timeout=120)
    assert code == 0, (out, err)
    assert f"phase  {held}: building" in (p.day / "logs" / "master" / "run.log").read_text()
    assert "\x1b" not in out  # a pipe: plain lines
    check_night(p, cluster, ALL_BUILDS)
