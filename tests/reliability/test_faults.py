"""Faults of the machine and of the engine, injected for real: a build that hangs, one that
eats memory under a limit (Podman), one that floods its log, a disk below the configured free
space, a container engine that is not there at the start, and one that dies in the middle of
the night (a second Podman API service on its own socket, stopped while builds run in it)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import alive
from tests.support.projects import DATE, run_args

MATRIX_3 = """
[matrix.linux.manywheel]
pythons = ["3.6m", "3.7m", "3.8"]
cudas = ["cpu"]
"""
MATRIX_2 = """
[matrix.linux.manywheel]
pythons = ["3.6m", "3.7m"]
cudas = ["cpu"]
"""


def one_line_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("nightly: error: "), err
    return lines[0]


# ---------------------------------------------------------------------------- hangs


def test_hung_builds_are_killed_at_their_timeout(night_project: Any, run_cli: Any) -> None:
    """Two builds that never end (one ignores SIGTERM, so only the SIGKILL after the grace
    period stops it); the third build is not held up; the night reports and goes on."""
    stubborn = 'trap "" TERM; sleep 1000 & echo "$!" >> "$SIG/pids"; echo "stubborn $!"; wait'
    p = night_project(
        matrix=MATRIX_3,
        behaviours={"manywheel_3.6m_cpu": "hang", "manywheel_3.7m_cpu": "sleep:424242"},
        extra="[timeouts]\ndefault = 2\n\n[retries]\ninfra = 0\n",
    )
    recipe = p.path / "recipes/manywheel/build.sh"
    recipe.write_text(recipe.read_text().replace("sleep 424242", stubborn))
    # The recipes would sleep for 1000 s: a night that ends within run_cli's limit, with
    # the timeout as each hung build's reason (below), was not held up by them.
    code, out, err = run_cli(run_args(p.config), timeout=120)
    assert code == 1, (out, err)
    state = p.state()["builds"]
    for bid in ("manywheel_3.6m_cpu", "manywheel_3.7m_cpu"):
        entry = state[bid]
        assert entry["status"] == "failed", entry
        assert entry["reason"] == "timeout after 2 s"
        assert entry["infra"] is True
        assert 2 <= entry["duration_s"] < 15, entry
        log = (p.day / "logs/failed" / f"{bid}.log").read_text()
        assert "reason:      timeout after 2 s" in log
        assert f"building {bid}" in log  # the output before the kill is kept
    assert "stubborn" in (p.day / "logs/failed/manywheel_3.7m_cpu.log").read_text()
    assert state["manywheel_3.8_cpu"]["status"] == "succeeded"
    assert p.summary()["builds"]["manywheel_3.6m_cpu"]["reason"] == "timeout after 2 s"
    assert len(p.pids()) == 5  # three recipes, the hung ones' two children
    for pid in p.pids():
        assert not alive(pid), f"process {pid} of a hung build survived its timeout"


# ---------------------------------------------------------------------------- memory

CONTAINER_RECIPE = r"""#!/usr/bin/env bash
set -euo pipefail
ID="${PACKAGE_TYPE}_${DESIRED_PYTHON}_${DESIRED_CUDA}"
echo "started $ID"
@BODY@
mkdir -p "$OUTPUT_DIR"
echo "package $ID" > "$OUTPUT_DIR/$ID-$BUILD_VERSION.tar.gz"
echo "finished $ID"
"""


def container_recipe(body: str) -> str:
    return CONTAINER_RECIPE.replace("@BODY@", body)


def engine_toml(base_url: str, *, memory: str = "", infra: int = 0) -> str:
    mem = f'memory_limit = "{memory}"\n' if memory else ""
    return (f'[executor.container]\nbase_url = "{base_url}"\n{mem}\n'
            f"[retries]\ninfra = {infra}\n\n[smoke]\nenabled = false\n")


def our_containers(engine: Any, day: Path) -> list[Any]:
    """This night's containers. Only ours are inspected: the engine is shared with other tests
    and sessions, and a container of theirs listed here may be gone by the time
    `containers.list` (which inspects every one it lists) asks about it."""
    listed = engine.client.api.containers(all=True, filters={"label": "nightly.managed=true"})
    ours = [c["Id"] for c in listed if (c.get("Labels") or {}).get("nightly.job", "").startswith(str(day))]
    return [engine.client.containers.get(i) for i in ours]


@pytest.mark.engine
def test_memory_eater_under_a_limit_is_out_of_memory(engine: Any, night_project: Any, run_cli: Any) -> None:
    p = night_project(
        matrix=MATRIX_2,
        recipes={"manywheel": container_recipe(
            'echo "before the allocation"\n'
            'python3 -c "b = bytearray(768 * 1024 * 1024); print(len(b))"\n'
            'echo "never $((6 * 7))"')},
        extra=engine_toml(engine.base_url, memory="64m"),
    )
    code, out, err = run_cli(
        ["build", "manywheel", "3.11", "cpu", "--executor", "container", "--config", str(p.config),
         "--date", DATE], timeout=180,
    )
    assert code == 1, (out, err)
    entry = p.state()["builds"]["manywheel_3.11_cpu"]
    assert entry["status"] == "failed"
    assert entry["reason"] == "out of memory (limit 64m)", entry
    assert entry["infra"] is True
    log = (p.day / "logs/failed/manywheel_3.11_cpu.log").read_text()
    assert "before the allocation" in log
    assert "reason:      out of memory (limit 64m)" in log
    assert "never 42" not in log
    assert "out of memory" in out
    assert not our_containers(engine, p.day)


# ---------------------------------------------------------------------------- log flood

FLOOD_RECIPE = r"""#!/usr/bin/env bash
set -euo pipefail
ID="${PACKAGE_TYPE}_${DESIRED_PYTHON}_${DESIRED_CUDA}"
case "$ID" in
  manywheel_3.6m_cpu)
    "$PYTHON" - <<'PY'
import sys, time
out, pad, n, t0 = sys.stdout.buffer, b"y" * 64, 0, time.monotonic()
# About 10 MB/s for 3 s: 80-byte numbered lines, 12,500 at a time, 8 times a second.
while time.monotonic() - t0 < 3.0:
    out.write(b"".join(b"flood %09d %s\n" % (n + i, pad) for i in range(12500)))
    n += 12500
    time.sleep(max(0.0, t0 + n / 100000 - time.monotonic()))
out.write(b"flood total %d\n" % n)
out.flush()
PY
    ;;
  *)
    for i in $(seq 1 20); do echo "tick $i"; sleep 0.05; done
    ;;
esac
mkdir -p "$OUTPUT_DIR"
echo "package $ID" > "$OUTPUT_DIR/$ID-$BUILD_VERSION.tar.gz"
"""


def test_a_log_flood_is_kept_whole_and_does_not_slow_the_others(night_project: Any, run_cli: Any) -> None:
    p = night_project(matrix=MATRIX_2, recipes={"manywheel": FLOOD_RECIPE},
                      extra="[smoke]\nenabled = false\n")
    steady = "manywheel_3.7m_cpu"
    code, out, err = run_cli(run_args(p.config, "--select", steady))
    assert code == 0, (out, err)
    solo = p.state()["builds"][steady]["duration_s"]

    code, out, err = run_cli(run_args(p.config, "--rebuild", "*"), timeout=180)
    assert code == 0, (out, err)
    state = p.state()["builds"]
    beside_flood = state[steady]["duration_s"]
    flood = state["manywheel_3.6m_cpu"]
    assert flood["duration_s"] >= 3.0
    # The flood ran the whole time the steady build did (they started together).
    assert abs(flood["started"] - state[steady]["started"]) < 1.0
    assert beside_flood < 3 * solo, (solo, beside_flood)

    log = (p.day / "logs/succeeded/manywheel_3.6m_cpu.log").read_bytes()
    total = int(re.search(rb"^flood total (\d+)$", log, re.M)[1])  # type: ignore[index]
    numbers = [int(x) for x in re.findall(rb"^flood (\d{9}) y{64}$", log, re.M)]
    assert total >= 100_000, total  # megabytes: 80 bytes a line
    assert numbers == list(range(total)), "lines lost, repeated or out of order"
    assert len(log) > 8_000_000
    assert log.rstrip().endswith(b"=" * 78)  # the footer made it after the flood


# ---------------------------------------------------------------------------- disk


def test_not_enough_free_space_refuses_before_building(
    tmp_path: Path, night_project: Any, run_cli: Any
) -> None:
    free_gb = shutil.disk_usage(tmp_path).free / 1e9
    p = night_project(matrix=MATRIX_2, extra=f"[run]\nmin_free_gb = {free_gb + 50:.1f}\n")
    for args in (run_args(p.config),
                 ["build", "manywheel", "3.6m", "cpu", "--config", str(p.config), "--date", DATE]):
        code, out, err = run_cli(args)
        assert code != 0, (out, err)
        assert code not in (3, 4)
        line = one_line_error(err)
        assert "min_free_gb" in line
        assert "GB free" in line
        assert str(p.path / "nightlies") in line  # says where
        assert not p.day.exists(), "the night started although the disk was too full"
        assert all(p.starts(b) == 0 for b in ("manywheel_3.6m_cpu", "manywheel_3.7m_cpu"))
    # Below the threshold of a disk that does have the space: the night runs.
    text = p.config.read_text().replace(f"{free_gb + 50:.1f}", f"{free_gb / 2:.1f}")
    p.config.write_text(text)
    code, out, err = run_cli(run_args(p.config))
    assert code == 0, (out, err)


# ---------------------------------------------------------------------------- the engine


def dead_socket(path: Path) -> str:
    """A unix socket file that nobody listens on (connect: refused)."""
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()
    return f"unix://{path}"


def container_project(night_project: Any, base_url: str, body: str, **kw: Any) -> Any:
    p = night_project(matrix=MATRIX_2, recipes={"manywheel": container_recipe(body)},
                      extra=engine_toml(base_url, **kw))
    p.config.write_text(p.config.read_text().replace('executor = "local"', 'executor = "container"'))
    return p


@pytest.mark.engine
def test_engine_unreachable_at_the_start(
    engine: Any, tmp_path: Path, night_project: Any, run_cli: Any
) -> None:
    p = container_project(night_project, dead_socket(tmp_path / "dead.sock"), "sleep 0.1")
    code, out, err = run_cli(run_args(p.config), timeout=120)
    assert code == 1, (out, err)
    line = one_line_error(err)
    assert f"container engine not reachable at unix://{tmp_path / 'dead.sock'}" in line
    assert not p.state()["builds"], "builds were started without an engine"
    assert not [f for f in (p.day / "logs").rglob("*.log") if f.parent.name != "master"]
    assert not [f for f in (p.day / "packages").rglob("*") if f.is_file()]

    # Nothing lost: with the engine back, the same day completes.
    p.config.write_text(p.config.read_text().replace(f"unix://{tmp_path / 'dead.sock'}", engine.base_url))
    code, out, err = run_cli(run_args(p.config), timeout=180)
    assert code == 0, (out, err)
    assert all(e["status"] == "succeeded" for e in p.state()["builds"].values())
    assert len(p.state()["builds"]) == 2


@pytest.fixture
def second_engine(engine: Any, tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Another Podman API service on its own socket, over the same storage as the test
    engine (same containers.conf as scripts/container-engine.sh): one the test may stop."""
    conf = Path(os.environ.get("NIGHTLY_ENGINE_DIR", "/tmp/nightly-engine")) / "containers.conf"
    assert conf.is_file(), conf
    sock = tmp_path / "second-engine.sock"
    log = (tmp_path / "second-engine.log").open("wb")
    proc = subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{sock}"],
        env={**os.environ, "CONTAINERS_CONF": str(conf)}, stdin=subprocess.DEVNULL,
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    import docker

    deadline = time.monotonic() + 30
    while True:
        try:
            docker.DockerClient(base_url=f"unix://{sock}").ping()
            break
        except Exception:
            log_text = (tmp_path / "second-engine.log").read_text()
            assert proc.poll() is None, log_text
            assert time.monotonic() < deadline, log_text
            time.sleep(0.1)
    yield f"unix://{sock}", proc
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log.close()


@pytest.mark.engine
def test_engine_dying_mid_night_marks_infrastructure_failures_and_a_rerun_completes(
    engine: Any, second_engine: tuple[str, subprocess.Popen[bytes]], night_project: Any,
    run_cli: Any, start_cli: Any, wait_until: Any,
) -> None:
    url, service = second_engine
    p = container_project(night_project, url, "sleep 6", infra=1)
    ids = ["manywheel_3.6m_cpu", "manywheel_3.7m_cpu"]
    try:
        run = start_cli(run_args(p.config))

        def both_running() -> bool:
            logs = [p.day / "logs" / f"{b}.log" for b in ids]
            return all(f.exists() and f"started {b}" in f.read_text() for f, b in zip(logs, ids, strict=True))

        wait_until(both_running, timeout=90, what="both builds running in the second engine")
        service.send_signal(signal.SIGTERM)  # the engine goes away with builds in it
        code, out, err = run.wait(timeout=180)
        assert code == 1, (out, err)
        assert "Traceback" not in err
        state = p.state()["builds"]
        summary = p.summary()
        for bid in ids:
            entry = state[bid]
            assert entry["status"] == "failed", entry
            assert entry["infra"] is True, entry
            assert entry["reason"].startswith("executor error: "), entry
            assert entry["attempts"] == 2, entry  # retried once ([retries] infra = 1)
            assert summary["builds"][bid]["reason"] == entry["reason"]
            log = (p.day / "logs/failed" / f"{bid}.log").read_text()
            assert f"started {bid}" in log  # the output from before the engine died is kept
            assert log.count(f"nightly build {bid}  (attempt ") == 2
        assert summary["exit_code"] == 1

        # The engine is back (the test engine, over the same storage): the rerun builds
        # them, after removing the containers the dead engine left running.
        p.config.write_text(p.config.read_text().replace(url, engine.base_url))
        code, out, err = run_cli(run_args(p.config), timeout=240)
        assert code == 0, (out, err)
        state = p.state()["builds"]
        for bid in ids:
            assert state[bid]["status"] == "succeeded", state[bid]
            assert state[bid]["attempts"] == 3
            log = (p.day / "logs/succeeded" / f"{bid}.log").read_text()
            assert log.count("result:      SUCCEEDED") == 1
            assert f"finished {bid}" in log
        assert not our_containers(engine, p.day)
    finally:
        for c in our_containers(engine, p.day):
            c.remove(force=True)
