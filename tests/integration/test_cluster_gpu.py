"""The test stage on a real Dask cluster ([cluster] gpu_smoke), with mutual TLS on loopback.

Workers: lin-a and lin-b (build slots, platform-linux) and gpu (gpu=1, platform-linux, no
build slots): CUDA builds are built on the CPU workers and only their GPU part runs on the
GPU worker, as a task of its own. This host has no GPU, so the demo's `gpu_check` is replaced
by a `gpu_command` that records where it ran (its working folder lies under the worker's
--local-directory) and that the wheel it was given is the CUDA build.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import DaskCluster, make_project, mirror_files, run_args, staged_files
from tests.support.fixture_types import MakeProject, MakeRecipe, RunCli, StartCli, WaitUntil
from tests.support.projects import Project
from tests.support.wheels import hand_wheel_recipe

REPO = Path(__file__).resolve().parents[2]
HOSTS = "scheduler,lin-a,lin-b,gpu"
WORKERS = {
    "lin-a": "slots=2,platform-linux=1",
    "lin-b": "slots=2,platform-linux=1",
    "gpu": "gpu=1,platform-linux=1",
}
LINUX = ("lin-a", "lin-b")
FOOTER = "result:      SUCCEEDED"


@pytest.fixture(scope="module")
def gpu_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaskCluster]:
    from nightly.cluster.tls import make_certs, parse_hosts

    base = tmp_path_factory.mktemp("gpu-cluster")
    make_certs(base / "certs", parse_hosts(HOSTS))
    c = DaskCluster(base, certs=base / "certs", workers=WORKERS)
    c.start()
    yield c
    c.close()


@pytest.fixture
def cluster(gpu_cluster: DaskCluster) -> DaskCluster:
    gpu_cluster.ensure()
    return gpu_cluster


def _test_stage_toml(cluster: DaskCluster) -> str:
    """[cluster] keys: the test stage, and mutual TLS (the orchestrator's certificate)."""
    c = cluster.certs
    assert c is not None
    return (f'gpu_smoke = true\nrequire_encryption = true\ntls_ca_file = "{c / "ca.pem"}"\n'
            f'tls_cert = "{c / "orchestrator.pem"}"\ntls_key = "{c / "orchestrator-key.pem"}"\n')


def _gpu_lines(signals: Path) -> list[tuple[str, Path]]:
    """(python, working folder) of every GPU part that started."""
    f = signals / "gpu-ran"
    if not f.exists():
        return []
    return [(py, Path(where)) for py, where in (ln.split(" ", 1) for ln in f.read_text().splitlines())]


def _under(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


@pytest.mark.slow
def test_cuda_builds_build_on_cpu_workers_and_only_their_gpu_part_runs_on_the_gpu_worker(
    tmp_path: Path, start_cli: StartCli, wait_until: WaitUntil, cluster: DaskCluster
) -> None:
    """The demo's CUDA 13.0 manywheels (real builds, the host's nvcc) for 3.11 and 3.12: built
    on lin-a/lin-b, GPU part on gpu. 3.12's GPU tests fail: not published, failed with their
    output in its log. 3.11's GPU part is held until the GPU worker is killed (-9) under it;
    a new GPU worker joins and the scheduler runs the test again there; the night completes."""
    from nightly.config.reader import read_defaults  # (a TOML file as a table)

    demo: dict[str, Any] = read_defaults(REPO / "nightly.toml")
    sig = tmp_path / "signals"
    sig.mkdir()
    gpu_command = (
        f'echo "$DESIRED_PYTHON $PWD" >> {sig}/gpu-ran\n'
        '"$PYTHON" -c "import nightlydemo, sys; sys.exit(0 if nightlydemo.built_with_cuda() '
        'else \'not the CUDA build\')"\n'
        f'if [ "$DESIRED_PYTHON" = 3.11 ]; then touch {sig}/held; '
        f'while [ ! -e {sig}/go ]; do sleep 0.2; done; fi\n'
        '[ "$DESIRED_PYTHON" != 3.12 ] || '
        '{ echo "CUDA error: an illegal memory access (on purpose)"; exit 4; }\n'
    )
    config = tmp_path / "nightly.toml"
    config.write_text(f"""root = "nightlies"
recipes = "{REPO / "recipes"}"

[project]
name = "nightlydemo"
source = "{REPO / "examples" / "demo"}"
base_version = "0.1.0"

[matrix.linux.manywheel]
pythons = ["3.11", "3.12"]
cudas = ["13.0"]
manylinux = "2_28"

[timeouts]
default = "20m"

[publish]
url = "mirror"

[smoke]
import_name = "nightlydemo"
cuda_check = {json.dumps(demo["smoke"]["cuda_check"])}
gpu_command = '''{gpu_command}'''

[[machines]]
name = "local"
platform = "linux"
queues = 2
executor = "local"

[cluster]
address = "{cluster.address}"
staging = "staging"
log_flush = 0.5
worker_wait = "5m"
connect_timeout = "20s"
""" + _test_stage_toml(cluster))
    day = tmp_path / "nightlies" / "2024_05_01"
    night = start_cli(["run", "--config", str(config), "--date", "2024_05_01"])
    wait_until(lambda: (sig / "held").exists(), timeout=1500,
               what="3.11's GPU part to start on the GPU worker")
    gpu_dir, killed = cluster.base / "gpu", cluster.workers()["gpu"]
    victim = cluster.procs["gpu"]
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=10)
    (sig / "go").touch()  # (the killed worker's test process, left behind, ends too)
    cluster.ensure()  # a new GPU worker joins: the test runs again there
    code, out, err = night.wait(timeout=600)
    assert code == 1, (out, err)  # 3.12 failed

    state = json.loads((day / "state.json").read_text())
    builds = state["builds"]
    good, bad = builds["manywheel_3.11_cu130"], builds["manywheel_3.12_cu130"]
    # Built on the CPU workers, once each; nothing built on the GPU worker.
    for e in (good, bad):
        assert e["worker_name"] in LINUX, e
        assert e["attempts"] == 1
        assert e["tested"]["cpu"]["result"] == "passed"
        assert e["tested"]["cpu"]["where"] == e["machine"]
    assert not list((gpu_dir / "nightly-worker").rglob("*.log")) or all(
        "nightly build" not in f.read_text(errors="replace")
        for f in (gpu_dir / "nightly-worker").rglob("*.log"))
    # Every GPU part ran on the GPU worker: 3.11 twice (killed, then on the new worker).
    ran = _gpu_lines(sig)
    assert sorted(py for py, _ in ran) == ["3.11", "3.11", "3.12"]
    assert all(_under(where, gpu_dir) for _, where in ran), ran
    new_gpu = cluster.workers()["gpu"]
    assert new_gpu != killed
    gpu = good["tested"]["gpu"]
    assert (gpu["result"], gpu["where"], gpu["worker_name"]) == ("passed", new_gpu, "gpu")
    assert good["status"] == "succeeded"
    assert good["tested"]["result"] == "passed"
    # 3.12: its GPU test failed, so the build did, with the test's output in its log.
    assert bad["status"] == "failed"
    assert bad["reason"].startswith("GPU test: "), bad["reason"]
    assert bad["tested"]["gpu"]["result"] == "failed"
    assert bad["tested"]["gpu"]["worker_name"] == "gpu"
    assert bad["packages"] == []
    bad_log = (day / "logs" / "failed" / "manywheel_3.12_cu130.log").read_text()
    assert bad_log.index(FOOTER) < bad_log.index("[nightly] cluster GPU test attempt ")
    assert "an illegal memory access (on purpose)" in bad_log
    # Published: 3.11 only, after its GPU test.
    published = [f.name for f in mirror_files_of(tmp_path)]
    assert len(published) == 1, published
    assert "cp311" in published[0], published
    assert good["published"]
    # 3.11's log: the build, then both GPU test attempts, the killed one marked.
    log = (day / "logs" / "succeeded" / "manywheel_3.11_cu130.log").read_text()
    assert log.count(FOOTER) == 1
    assert log.count("[nightly] cluster GPU test attempt ") == 2
    assert log.index(FOOTER) < log.index("ended without a result: its worker was lost")
    assert log.rindex("gpu test: passed") > log.index("ended without a result")
    run_log = (day / "logs" / "master" / "run.log").read_text()
    assert "gpu_smoke: the test stage" in run_log
    assert "lost   GPU test of manywheel_3.11_cu130" in run_log
    # The night's cost: GPU hosts only tested.
    summary = json.loads((day / "summary.json").read_text())
    assert summary["gpu_host_s"]["building"] == 0.0
    assert summary["gpu_host_s"]["testing"] > 0
    assert set(state["meta"]["gpu_workers"]) >= {killed, new_gpu}
    assert not [f for f in (tmp_path / "staging").rglob("*") if f.is_file()
                and ".nightly-store" not in f.parts]


def mirror_files_of(root: Path) -> list[Path]:
    return sorted(f for f in (root / "mirror").rglob("*.whl") if ".nightly-store" not in f.parts)


# ---------------------------------------------------------------------------- fast projects

MATRIX = """
[matrix.linux.manywheel]
pythons = ["3.11", "3.12"]
cudas = ["cpu", "cu126"]
"""
# A real (pure) wheel per build, written by hand: no compiler, so these nights take seconds.
WHEEL_RECIPE = hand_wheel_recipe(
    before='echo "$DESIRED_PYTHON-$DESIRED_CUDA" >> @SIG@/built\n',  # each build's start
    version='os.environ["BUILD_VERSION"] + ("+" + os.environ["DESIRED_CUDA"] '
            'if os.environ["DESIRED_CUDA"] != "cpu" else "")',
    body='f"__version__ = {v!r}\\n"',
)


def _wheel_project(
    night_project: MakeProject, make_recipe: MakeRecipe, cluster: DaskCluster, name: str,
    gpu_command: str, *, worker_wait: str = "30s", smoke: str = ""
) -> Project:
    p = make_project(night_project, make_recipe, cluster, name=name, matrix=MATRIX, smoke=True,
                     extra=_test_stage_toml(cluster), worker_wait=worker_wait)
    text = p.config.read_text().replace(
        "[smoke]\nenabled = true\n",
        f"[smoke]\nenabled = true\nimport_name = \"demo\"\ngpu_command = \'\'\'{gpu_command}\'\'\'\n{smoke}")
    p.config.write_text(text.replace("@SIG@", str(p.signals)))
    (p.path / "recipes" / "manywheel" / "build.sh").write_text(
        WHEEL_RECIPE.replace("@SIG@", str(p.signals)))
    return p


def test_a_gpu_worker_killed_mid_test_with_no_other_records_not_run(
    night_project: MakeProject, make_recipe: MakeRecipe, start_cli: StartCli, wait_until: WaitUntil,
    cluster: DaskCluster
) -> None:
    """The GPU worker dies (-9) under a GPU test and no other joins: after worker_wait the
    test is recorded not run (why: the worker was lost), a failure under require_gpu, so
    nothing of that build is published; the CPU build is, and the night completes."""
    hold = ('echo "$DESIRED_PYTHON $PWD" >> @SIG@/gpu-ran\n'
            'if [ "$DESIRED_PYTHON" = 3.12 ]; then touch @SIG@/held; '
            'while [ ! -e @SIG@/go ]; do sleep 0.2; done; fi\n')
    p = _wheel_project(night_project, make_recipe, cluster, "killed", hold, worker_wait="4s",
                       smoke="require_gpu = true\n")
    night = start_cli(run_args(p, "--select", "manywheel_3.12_*"))
    wait_until(lambda: (p.signals / "held").exists(), timeout=120,
               what="3.12's GPU part to start")
    victim = cluster.procs["gpu"]
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=10)
    (p.signals / "go").touch()
    code, out, err = night.wait(timeout=120)
    assert code == 1, (out, err)
    builds = p.state()["builds"]
    e = builds["manywheel_3.12_cu126"]
    assert e["status"] == "failed"
    assert e["reason"].startswith("GPU test: not run: no worker with gpu, platform-linux for 4 s "
                                  "after the one testing it (gpu, "), e["reason"]
    assert e["reason"].endswith("[smoke] require_gpu = true")
    assert e["tested"]["gpu"]["result"] == "not run"
    assert e["tested"]["result"] == "not run"
    log = (p.day / e["log"]).read_text()
    assert "ended without a result: its worker was lost" in log
    assert e["worker_name"] in LINUX
    cpu = builds["manywheel_3.12_cpu"]
    assert cpu["status"] == "succeeded"
    assert "gpu" not in cpu["tested"]  # a CPU build has no GPU part
    assert [f.name for f in mirror_files(p)] == [Path(cpu["packages"][0]["path"]).name]
    assert staged_files(p) == []


def test_a_failing_gpu_test_is_grouped_by_its_own_error_line(
    night_project: MakeProject, make_recipe: MakeRecipe, run_cli: RunCli, cluster: DaskCluster
) -> None:
    """A GPU test that fails with a Python exception (issue 41.12): the night's failure group
    (summary.json, the report) is named by the exception line of the test's own section of
    the build's log, never "no error line in the log"; the report names the workers."""
    error = "RuntimeError: CUDA error: no kernel image is available (on purpose)"
    fail = f'"$PYTHON" -c "raise RuntimeError(\'{error.split(": ", 1)[1]}\')"\n'
    p = _wheel_project(night_project, make_recipe, cluster, "gpufail", fail)
    bid = "manywheel_3.12_cu126"
    code, out, err = run_cli(run_args(p, "--select", bid), timeout=180)
    assert code == 1, (out, err)
    e = p.state()["builds"][bid]
    assert e["status"] == "failed"
    assert e["reason"].startswith("GPU test"), e["reason"]
    log = (p.day / e["log"]).read_text()
    assert log.index("result:      SUCCEEDED") < log.index(" GPU test ---") < log.index(error)
    failures = p.summary()["failures"]
    assert failures["groups"] == [{"signature": error, "builds": [bid]}]
    page = (p.day / "report.html").read_text()
    assert "no error line" not in page
    assert f"on {e['worker_name']}, gpu" in page  # its test, where each part ran, by name
    assert f'data-machine="{e["worker_name"]}"' in page


def test_a_gpu_test_refuses_a_package_changed_in_staging(
    night_project: MakeProject, make_recipe: MakeRecipe, wait_until: WaitUntil, start_cli: StartCli,
    cluster: DaskCluster
) -> None:
    """No GPU worker is up when the build ends; meanwhile someone with write access to staging
    replaces the wheel. The GPU worker that then joins checks it against the sha256 the
    build's worker reported, refuses to test it, and the build fails: nothing published."""
    import hashlib

    from nightly.stores.folder import FileStore

    gpu = cluster.procs["gpu"]
    gpu.terminate()
    gpu.wait(timeout=30)
    wait_until(lambda: "gpu" not in cluster.workers(), timeout=30, what="gpu to leave")
    p = _wheel_project(night_project, make_recipe, cluster, "tamper",
                       'echo "$DESIRED_PYTHON $PWD" >> @SIG@/gpu-ran\n', worker_wait="5m")
    night = start_cli(run_args(p, "--select", "manywheel_3.12_cu126"))
    root = p.path / "staging"

    def staged_wheel() -> list[Path]:
        return [f for f in root.rglob("*.whl") if "/builds/manywheel_3.12_cu126/" in str(f)]

    wait_until(lambda: staged_wheel() and (p.day / "logs" / "master" / "run.log").exists()
               and "its GPU test waits" in (p.day / "logs/master/run.log").read_text(),
               timeout=120, what="the build to end and its GPU test to wait")
    (wheel,) = staged_wheel()
    evil = wheel.read_bytes() + b"\n# a backdoor\n"
    tmp = p.path / "evil.whl"
    tmp.write_bytes(evil)
    FileStore(root).put(str(wheel.relative_to(root)), tmp, hashlib.sha256(evil).hexdigest())
    cluster.ensure()  # the GPU worker joins
    code, out, err = night.wait(timeout=120)
    assert code == 1, (out, err)
    e = p.state()["builds"]["manywheel_3.12_cu126"]
    assert e["status"] == "failed"
    assert "verifying staging: a package is not the one its build's worker built" in e["reason"]
    assert "not tested" in e["reason"]
    assert e["tested"]["gpu"]["result"] == "failed"
    assert not (p.signals / "gpu-ran").exists()  # never installed, never run
    assert mirror_files(p) == []
    assert all(b"a backdoor" not in f.read_bytes() for f in (p.day / "packages").rglob("*")
               if f.is_file())


def test_the_orchestrator_killed_while_a_build_is_tested_then_rerun_tests_it_again(
    night_project: MakeProject, make_recipe: MakeRecipe, start_cli: StartCli, run_cli: RunCli,
    wait_until: WaitUntil, cluster: DaskCluster
) -> None:
    """kill -9 of `nightly run` while a CUDA build's GPU test runs: the test is stopped on its
    worker (its task was released); the rerun adopts the build from staging (not built
    again), tests it again, and publishes it."""
    hold = ('echo "$DESIRED_PYTHON $PWD" >> @SIG@/gpu-ran\n'
            'touch @SIG@/held; while [ ! -e @SIG@/go ]; do sleep 0.2; done\n')
    p = _wheel_project(night_project, make_recipe, cluster, "resume", hold)
    bid = "manywheel_3.11_cu126"
    night = start_cli(run_args(p, "--select", bid))
    wait_until(lambda: (p.signals / "held").exists(), timeout=120, what="its GPU part to start")
    os.kill(night.pid, signal.SIGKILL)
    night.wait(timeout=10)
    assert p.state()["builds"][bid]["status"] == "running"  # built, not yet filed
    tests = p.path / "staging" / "2024_05_01" / "tests" / bid
    # Its task released, the GPU worker stops the test: its log is in staging, no result.
    wait_until(lambda: list(tests.glob("*/log.txt")), timeout=60, what="the test to stop")
    assert not list(tests.glob("*/result.json"))
    (p.signals / "go").touch()
    code, out, err = run_cli(run_args(p, "--select", bid), timeout=120)
    assert code == 0, (out, err)
    e = p.state()["builds"][bid]
    assert e["status"] == "succeeded"
    assert (p.signals / "built").read_text().split() == ["3.11-cu126"]  # adopted, not rebuilt
    assert e["tested"]["gpu"]["result"] == "passed"
    assert e["tested"]["gpu"]["worker_name"] == "gpu"
    assert [py for py, _ in _gpu_lines(p.signals)] == ["3.11", "3.11"]  # tested twice
    run_log = (p.day / "logs" / "master" / "run.log").read_text()
    assert f"adopt  {bid}" in run_log
    log = (p.day / e["log"]).read_text()
    assert log.count("[nightly] cluster GPU test attempt ") == 2
    assert "ended without a result" in log  # the stopped one, kept and marked
    assert [f.name for f in mirror_files(p)] == [Path(e["packages"][0]["path"]).name]
    assert staged_files(p) == []
