"""The runner (a build's lifecycle, retries, resume, work-conserving queues) and the local
executor's environment, run in-process with tiny bash recipes."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import stat
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nightly import config as cfg
from nightly.builds.run.dispatch import Dispatcher as _Dispatcher
from nightly.builds.run.jobs import RunContext, make_job, recipe_env
from nightly.builds.run.runner import Runner
from nightly.core.matrix import Build
from nightly.executors.groups import record_group as _record_group
from nightly.executors.local import LocalExecutor, NotFound
from nightly.redact import mask_env
from nightly.workspace import FAILED, INTERRUPTED, RUNNING, SUCCEEDED, Day, State

DATE = dt.date(2019, 1, 31)
VERSION = "1.0.0.dev20190131"
HOST_PYTHON = sys.executable

# A recipe whose behaviour the test picks per DESIRED_PYTHON; it counts its runs.
RECIPE = r"""#!/usr/bin/env bash
set -euo pipefail
echo "run" >> "@COUNT@/${PACKAGE_TYPE}_${DESIRED_PYTHON}_${DESIRED_CUDA}"
echo "building $PACKAGE_TYPE $DESIRED_PYTHON $DESIRED_CUDA"
case "$DESIRED_PYTHON" in
  3.6m) sleep 1 ;;
  3.8) echo "broken" >&2; exit 2 ;;
  3.9) sleep 1000 & echo $! > "@COUNT@/child"; wait ;;
esac
# The project's (demo's) wheel: nightly files only the project's packages.
"$NIGHTLY_PYTHON" -c 'import sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w") as z:
    z.writestr("demo-0.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo\nVersion: 0\n")
    z.writestr("payload", "pkg %s\n" % sys.argv[2])' \
  "$OUTPUT_DIR/demo-0+${PACKAGE_TYPE}.${DESIRED_PYTHON//./_}.${DESIRED_CUDA}-py3-none-any.whl" \
  "$DESIRED_PYTHON"
"""


def payload(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as z:
        return z.read("payload").decode()


def config_text(extra: str = "") -> str:
    pythons = "\n".join(f'"{p}" = "{HOST_PYTHON}"' for p in ("3.6m", "3.7m", "3.8", "3.9"))
    return f"""
root = "root"
[project]
name = "demo"
source = "src"
base_version = "1.0.0"
build_number = 3

[matrix.linux.manywheel]
pythons = ["3.5m", "3.6m", "3.7m", "3.8", "3.9"]
cudas = ["cpu", "cu100"]

[matrix.linux.libtorch]
variants = ["shared-with-deps", "static-without-deps"]
python = "3.7m"
cudas = ["cpu"]

[[machines]]
name = "m"
platform = "linux"
queues = 2

[executor.local.pythons]
{pythons}

[executor.local.cuda]
"cu100" = "@CUDA@"

{extra}
"""


class Env:
    """A config, a day and a runner in tmp_path."""

    def __init__(self, tmp_path: Path, extra: str = "") -> None:
        self.tmp = tmp_path
        self.count = tmp_path / "count"
        self.count.mkdir()
        cuda = tmp_path / "cuda"
        (cuda / "bin").mkdir(parents=True)
        (cuda / "bin" / "nvcc").write_text("#!/bin/sh\n")
        (cuda / "bin" / "nvcc").chmod(0o755)
        (tmp_path / "src").mkdir()
        for pkg in ("manywheel", "libtorch"):
            r = tmp_path / "recipes" / pkg / "build.sh"
            r.parent.mkdir(parents=True)
            r.write_text(RECIPE.replace("@COUNT@", str(self.count)))
        path = tmp_path / "nightly.toml"
        path.write_text(config_text(extra).replace("@CUDA@", str(cuda)))
        self.config = cfg.load(path)
        self.day = Day(self.config.root, DATE)
        self.day.create()
        self.state = State(self.day.state_path)
        self.ctx = RunContext(config=self.config, day=self.day, state=self.state,
                              source_dir=tmp_path / "src", version=VERSION, machine="m")
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.executor = LocalExecutor(pythons=self.config.local.pythons,
                                      cuda=self.config.local.cuda,
                                      base_env={"LANG": "C.UTF-8", "GITHUB_TOKEN": "t0ken"})

    def runner(self, cancel: threading.Event | None = None) -> Runner:
        return Runner(self.ctx, self.executor, cancel=cancel,
                      on_event=lambda kind, info: self.events.append((kind, dict(info))))

    def build(self, bid: str) -> Build:
        (b,) = [b for b in self.config.builds if b.id == bid]
        return b

    def runs(self, bid: str) -> int:
        f = self.count / bid
        return len(f.read_text().splitlines()) if f.exists() else 0


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


@pytest.fixture
def make_env(tmp_path: Path) -> Callable[[str], Env]:
    return lambda extra: Env(tmp_path, extra)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# ---------------------------------------------------------------------------- environment


def test_mask_env() -> None:
    env = {
        "AWS_SECRET_ACCESS_KEY": "a", "GITHUB_TOKEN": "b", "TWINE_PASSWORD": "c",
        "anaconda_api_key": "d", "MY_CREDENTIALS": "e", "SMTP_PASSWD": "f",
        "PATH": "/bin", "BUILD_VERSION": "1.0", "DESIRED_CUDA": "cu100",
    }
    masked = mask_env(env)
    assert masked == {
        **dict.fromkeys(("AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "TWINE_PASSWORD",
                         "anaconda_api_key", "MY_CREDENTIALS", "SMTP_PASSWD"), "****"),
        "PATH": "/bin", "BUILD_VERSION": "1.0", "DESIRED_CUDA": "cu100",
    }
    assert env["GITHUB_TOKEN"] == "b"  # the input is not changed


def test_recipe_env_has_every_contract_variable(env: Env) -> None:
    e = recipe_env(env.config, env.build("manywheel_3.7m_cu100"), version=VERSION, date=DATE,
                   channel="nightly")
    assert {k: e[k] for k in (
        "PACKAGE_TYPE", "DESIRED_PYTHON", "DESIRED_CUDA", "CUDA_VERSION", "LIBTORCH_VARIANT",
        "BUILD_VERSION", "BUILD_NUMBER", "CHANNEL", "NIGHTLY_DATE",
        "PYTORCH_BUILD_VERSION", "PYTORCH_BUILD_NUMBER", "OVERRIDE_PACKAGE_VERSION",
    )} == {
        "PACKAGE_TYPE": "manywheel", "DESIRED_PYTHON": "3.7m", "DESIRED_CUDA": "cu100",
        "CUDA_VERSION": "10.0", "LIBTORCH_VARIANT": "", "BUILD_VERSION": VERSION,
        "BUILD_NUMBER": "3", "CHANNEL": "nightly", "NIGHTLY_DATE": "2019_01_31",
        "PYTORCH_BUILD_VERSION": VERSION, "PYTORCH_BUILD_NUMBER": "3",
        "OVERRIDE_PACKAGE_VERSION": VERSION,
    }
    lt = recipe_env(env.config, env.build("libtorch_static-without-deps_cpu"), version="2.1.0",
                    date=DATE, channel="test")
    assert lt["LIBTORCH_VARIANT"] == "static-without-deps"
    assert lt["CUDA_VERSION"] == ""
    assert lt["DESIRED_CUDA"] == "cpu"
    assert lt["DESIRED_PYTHON"] == "3.7m"
    assert lt["CHANNEL"] == "test"
    assert lt["BUILD_VERSION"] == lt["OVERRIDE_PACKAGE_VERSION"] == "2.1.0"


def test_local_environment_paths_and_no_secrets(env: Env) -> None:
    job = make_job(env.ctx, env.build("manywheel_3.7m_cu100"), executor="local")
    e = env.executor.environment(job)
    assert e["SOURCE_DIR"] == str(env.tmp / "src")
    assert e["OUTPUT_DIR"] == str(env.day.work / "manywheel_3.7m_cu100" / "out")
    assert e["PYTHON"] == HOST_PYTHON
    assert e["PATH"].split(":")[0] == str(env.tmp / "cuda" / "bin")
    assert str(Path(HOST_PYTHON).parent) in e["PATH"].split(":")
    assert e["CUDA_HOME"] == str(env.tmp / "cuda")
    assert e["LANG"] == "C.UTF-8"  # passed through
    assert "GITHUB_TOKEN" not in e
    assert "t0ken" not in json.dumps(e)
    assert e["HOME"].startswith(str(env.day.work))  # not the caller's home (its dotfiles)


def test_missing_interpreter_says_what_was_looked_for(env: Env) -> None:
    job = make_job(env.ctx, env.build("manywheel_3.5m_cpu"), executor="local")
    with pytest.raises(NotFound, match=r"python 3.5m not found: looked for python3\.5 on PATH"):
        env.executor.environment(job)
    desc = env.executor.describe(job)  # a dry run still shows the environment
    assert "python 3.5m not found" in str(desc["problem"])
    assert isinstance(desc["env"], dict)
    assert desc["env"]["DESIRED_PYTHON"] == "3.5m"
    out = env.runner().run_build(env.build("manywheel_3.5m_cpu"))
    assert out.status == FAILED
    assert "python 3.5m not found" in (out.reason or "")
    assert not out.infra
    assert out.attempts == 1
    assert "Available:" in (env.day.failed / "manywheel_3.5m_cpu.log").read_text()


# ---------------------------------------------------------------------------- one build


def test_a_build_files_its_packages_and_log(env: Env) -> None:
    out = env.runner().run_build(env.build("manywheel_3.7m_cu100"), queue=1)
    assert out.ok
    assert out.attempts == 1
    assert out.queue == 1
    (pkg,) = out.packages
    f = env.day.path / pkg.path
    assert f == env.day.packages / "manywheel" / "cu100" / "demo-0+manywheel.3_7m.cu100-py3-none-any.whl"
    assert payload(f) == "pkg 3.7m\n"
    assert pkg.sha256 == hashlib.sha256(f.read_bytes()).hexdigest()
    assert pkg.size == f.stat().st_size
    assert oct(f.stat().st_mode & 0o777) == oct(0o644)
    log = (env.day.succeeded / "manywheel_3.7m_cu100.log").read_text()
    assert "nightly build manywheel_3.7m_cu100  (attempt 1)" in log
    assert "building manywheel 3.7m cu100" in log  # the recipe's output
    assert f"  {f.name}  {pkg.size} bytes  sha256 {pkg.sha256}" in log
    assert not (env.day.work / "manywheel_3.7m_cu100").exists()  # scratch cleaned up
    st = env.state.get("manywheel_3.7m_cu100")
    assert st.status == SUCCEEDED
    assert st.packages == (pkg,)
    assert st.log == "logs/succeeded/manywheel_3.7m_cu100.log"
    # Between start and end, the phase it is in (no smoke test here: building only), with
    # the log the progress display follows.
    assert [k for k, _ in env.events] == ["start", "phase", "end"]
    phase = env.events[1][1]
    assert phase["phase"] == "building"
    assert phase["log"].endswith("manywheel_3.7m_cu100.log")


def test_a_build_writes_state_json_twice_and_its_records_with_its_end(
    env: Env, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its start (not waited on to reach the disk: a crash rebuilds it anyway) and its end;
    what it records on the way (its compiler cache figures) is written with its end."""
    from nightly.workspace import day as day_module
    from nightly.workspace import state as state_module

    writes: list[tuple[str, bool]] = []
    real = day_module.write_temporary

    def counted(path: Path, data: bytes, *, sync: bool = True) -> Path:
        if path == env.day.state_path:
            writes.append((json.loads(data)["builds"]["manywheel_3.7m_cpu"]["status"], sync))
        return real(path, data, sync=sync)

    monkeypatch.setattr(state_module, "write_temporary", counted)
    out = env.runner().run_build(env.build("manywheel_3.7m_cpu"), queue=0)
    assert out.ok
    assert writes == [(RUNNING, False), (SUCCEEDED, True)]
    on_disk = json.loads(env.day.state_path.read_text())["builds"]["manywheel_3.7m_cpu"]
    # The cache on local disk: no compile, so no server started, and zero compiles recorded.
    assert on_disk["cache"]["requests"] == 0, on_disk
    assert on_disk["cache"].get("off") is None, on_disk


def test_recipe_failure_is_not_retried_by_default(env: Env) -> None:
    out = env.runner().run_build(env.build("manywheel_3.8_cpu"))
    assert out.status == FAILED
    # No ERROR: line: the recipe's last line is its reason.
    assert out.reason == "recipe failed with exit status 2: broken"
    assert out.attempts == 1
    assert env.runs("manywheel_3.8_cpu") == 1
    assert not out.infra
    assert "broken" in (env.day.failed / "manywheel_3.8_cpu.log").read_text()


def test_recipe_failure_retried_when_configured(make_env: Callable[[str], Env]) -> None:
    env = make_env("[retries]\nrecipe = 2\n")
    out = env.runner().run_build(env.build("manywheel_3.8_cpu"))
    assert out.attempts == 3
    assert env.runs("manywheel_3.8_cpu") == 3
    assert [k for k, _ in env.events].count("retry") == 2


def test_timeout_is_retried_and_attempts_share_one_log(make_env: Callable[[str], Env]) -> None:
    env = make_env("[timeouts]\ndefault = 0.5\n\n[retries]\ninfra = 1\n")
    out = env.runner().run_build(env.build("manywheel_3.9_cpu"))
    assert out.status == FAILED
    assert out.infra
    assert out.reason == "timeout after 0.5 s"
    assert out.attempts == 2 == env.runs("manywheel_3.9_cpu")
    assert env.state.get("manywheel_3.9_cpu").attempts == 2
    log = (env.day.failed / "manywheel_3.9_cpu.log").read_text()
    assert log.index("(attempt 1)") < log.index("(attempt 2)")
    assert log.count("reason:      timeout after 0.5 s") == 2
    child = int((env.count / "child").read_text())  # the recipe's background child
    assert not alive(child)
    assert not list(env.day.logs.glob("*.log"))


def test_no_package_fails(env: Env) -> None:
    r = env.config.recipes / "manywheel" / "build.sh"
    r.write_text("#!/bin/bash\necho nothing\n")
    out = env.runner().run_build(env.build("manywheel_3.7m_cpu"))
    assert out.status == FAILED
    assert "exited 0 but produced no package" in (out.reason or "")
    assert not list(env.day.packages.rglob("*.whl"))


# ---------------------------------------------------------------------------- resume


@pytest.mark.parametrize("where", ["running", "succeeded"])
def test_an_attempt_finished_before_a_kill_is_adopted(env: Env, where: str) -> None:
    """kill -9 after the footer (and maybe the log move) but before state.json said
    'succeeded': the rerun adopts that attempt instead of building again."""
    bid = "manywheel_3.7m_cpu"
    first = env.runner().run_build(env.build(bid))
    assert first.ok
    env.state.update(bid, status=RUNNING)  # as if state.json was never updated
    if where == "running":
        os.replace(env.day.succeeded / f"{bid}.log", env.day.running_log(bid))
    assert env.state.mark_stale_running() == [bid]
    again = env.runner().run_build(env.build(bid))
    assert again.ok
    assert env.runs(bid) == 1
    assert again.attempts == 1
    assert again.packages == first.packages
    st = env.state.get(bid)
    assert st.status == SUCCEEDED
    assert list(st.packages) == first.packages
    log = env.day.succeeded / f"{bid}.log"
    assert log.read_text().count("result:      SUCCEEDED") == 1
    assert not env.day.running_log(bid).exists()


def test_an_attempt_whose_package_is_damaged_is_rebuilt(env: Env) -> None:
    bid = "manywheel_3.7m_cpu"
    first = env.runner().run_build(env.build(bid))
    (env.day.path / first.packages[0].path).write_text("truncated")
    env.state.update(bid, status=INTERRUPTED)
    again = env.runner().run_build(env.build(bid))
    assert again.ok
    assert again.attempts == 2
    assert env.runs(bid) == 2
    assert payload(env.day.path / again.packages[0].path) == "pkg 3.7m\n"


def test_an_interrupted_attempt_without_footer_is_rebuilt(env: Env) -> None:
    bid = "manywheel_3.7m_cpu"
    env.state.update(bid, status=RUNNING, attempts=1)
    env.day.running_log(bid).write_text(f"nightly build {bid}  (attempt 1)\nhalf\n")
    env.state.mark_stale_running()
    out = env.runner().run_build(env.build(bid))
    assert out.ok
    assert out.attempts == 2
    assert env.runs(bid) == 1
    log = (env.day.succeeded / f"{bid}.log").read_text()
    assert log.startswith(f"nightly build {bid}  (attempt 1)\nhalf\n")


def test_reap_ignores_a_record_nightly_did_not_write(env: Env) -> None:
    """The record sits outside the build's own folder (a build user owns that one while its
    recipe runs), and a record that is a link or that others could write is never acted on:
    a planted record must not make the next run kill a group of someone's choosing."""
    job = make_job(env.ctx, env.build("manywheel_3.7m_cpu"), executor="local")
    job.work_dir.mkdir(parents=True)
    victim = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    try:
        record = _record_group(job, victim.pid)
        assert job.work_dir.parent not in record.parents
        assert stat.S_IMODE(record.stat().st_mode) == 0o644
        record.chmod(0o664)
        assert env.executor.reap(job) == []
        assert victim.poll() is None
        real = record.with_name("elsewhere.json")
        record.chmod(0o644)
        record.rename(real)
        record.symlink_to(real)
        assert env.executor.reap(job) == []
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_reap_kills_a_dead_runs_process_group_only(env: Env) -> None:
    job = make_job(env.ctx, env.build("manywheel_3.7m_cpu"), executor="local")
    job.work_dir.mkdir(parents=True)
    orphan = subprocess.Popen(["bash", "-c", "sleep 1000 & wait"], start_new_session=True)
    other = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    try:
        _record_group(job, orphan.pid)
        assert env.executor.reap(job)
        assert orphan.wait(timeout=5) == -9
        assert env.executor.reap(job) == []  # the record is gone
        # A record whose process group started later than the live process: a reused
        # number, not ours; nothing is killed.
        record = _record_group(job, other.pid)
        info = json.loads(record.read_text())
        record.write_text(json.dumps({**info, "start": info["start"] + 10**6}))
        assert env.executor.reap(job) == []
        assert other.poll() is None
        # The live process started later than the record says: the recorded group ended and
        # its number was given to an unrelated process, which is never killed (exact start).
        record = _record_group(job, other.pid)
        record.write_text(json.dumps({**info, "start": info["start"] - 100}))
        assert env.executor.reap(job) == []
        assert other.poll() is None
    finally:
        for p in (orphan, other):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_a_recipe_starts_only_once_its_process_group_is_recorded(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A run killed (kill -9) after starting a recipe but before recording its process group
    # would leave a group no rerun can find: the recipe waits for the record.
    from nightly.executors import local

    job = make_job(env.ctx, env.build("manywheel_3.7m_cpu"), executor="local")
    started_before_record: list[bool] = []

    def slow_record(job: object, pid: int, user: object = None) -> Path:
        time.sleep(0.5)  # the orchestrator descheduled right after the spawn
        started_before_record.append(env.runs("manywheel_3.7m_cpu") > 0)
        return _record_group(job, pid, user)  # type: ignore[arg-type]

    monkeypatch.setattr(local, "_record_group", slow_record)
    result = env.executor.run(job, lambda chunk: None, threading.Event())
    assert result.exit_status == 0, result
    assert started_before_record == [False]
    assert env.runs("manywheel_3.7m_cpu") == 1


# ---------------------------------------------------------------------------- queues


def test_dispatcher_own_queue_first_then_steals_in_plan_order() -> None:
    b = {n: Build(package="manywheel", python=n, cuda="cpu") for n in
         ("3.5m", "3.6m", "3.7m", "3.8", "3.9", "3.10")}
    q0 = [b["3.5m"], b["3.7m"], b["3.9"]]
    q1 = [b["3.6m"]]
    q2 = [b["3.8"], b["3.10"]]
    order = [b["3.5m"], b["3.6m"], b["3.8"], b["3.7m"], b["3.10"], b["3.9"]]
    d = _Dispatcher([q0, q1, q2], order)
    assert d.next(1) == b["3.6m"]  # its own
    assert d.next(1) == b["3.5m"]  # dry: the earliest unstarted in plan order (q0's head)
    assert d.next(1) == b["3.8"]
    assert d.next(0) == b["3.7m"]
    assert d.next(2) == b["3.10"]
    assert d.next(2) == b["3.9"]
    assert d.next(0) is None
    assert d.next(1) is None
    assert d.next(2) is None


def test_dispatcher_hands_out_each_build_once_under_contention() -> None:
    builds = [Build(package="conda", python=f"3.{i}", cuda="cpu") for i in range(60)]
    queues = [builds[i::3] for i in range(3)]
    d = _Dispatcher(queues, None)
    got: list[Build] = []
    lock = threading.Lock()

    def take(q: int) -> None:
        while (x := d.next(q)) is not None:
            with lock:
                got.append(x)

    threads = [threading.Thread(target=take, args=(q,)) for q in (0, 1, 2, 0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(x.id for x in got) == sorted(x.id for x in builds)


def test_run_queues_is_work_conserving(env: Env) -> None:
    slow, a, b, c = (env.build(x) for x in (
        "manywheel_3.6m_cpu", "manywheel_3.7m_cpu", "manywheel_3.7m_cu100",
        "libtorch_shared-with-deps_cpu"))
    outcomes = env.runner().run_queues([[slow, a, b], [c]], order=[slow, c, a, b])
    by_id = {o.build_id: o for o in outcomes}
    assert all(o.ok for o in outcomes)
    assert len(outcomes) == 4
    # Queue 1 ran dry after c and took a and b from queue 0 while the slow build ran.
    assert by_id[slow.id].queue == 0
    assert by_id[a.id].queue == by_id[b.id].queue == by_id[c.id].queue == 1
    starts = [i["build"] for k, i in env.events if k == "start"]
    assert starts.index(a.id) < starts.index(b.id)


@pytest.mark.timeout(120)  # a hang is the failure this test looks for
def test_cancel_interrupts_running_builds_and_starts_no_more(env: Env) -> None:
    cancel = threading.Event()
    runner = env.runner(cancel)
    names = ("manywheel_3.9_cpu", "manywheel_3.9_cu100", "manywheel_3.7m_cpu")
    hang1, hang2, later = (env.build(x) for x in names)
    threading.Timer(0.5, cancel.set).start()
    outcomes = runner.run_queues([[hang1, later], [hang2]])
    assert sorted(o.build_id for o in outcomes) == sorted([hang1.id, hang2.id])
    for o in outcomes:
        assert o.status == INTERRUPTED
        assert o.reason == "interrupted"
        log = (env.day.failed / f"{o.build_id}.log").read_text()
        assert "result:      INTERRUPTED" in log
        assert "building manywheel 3.9" in log
        assert env.state.get(o.build_id).status == INTERRUPTED
    assert env.runs(later.id) == 0
    assert env.state.status(later.id) == "pending"


def test_a_build_that_raises_fails_as_infrastructure_and_its_queue_goes_on(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nightly's own failure in one build (here: its folder cannot be removed) never ends
    the queue's thread: that build fails as an infrastructure failure, with the reason, and
    the builds after it in the same queue run."""
    broken, a, b = (env.build(x) for x in ("manywheel_3.6m_cpu", "manywheel_3.7m_cpu",
                                           "manywheel_3.7m_cu100"))
    start = Runner._start

    def failing_start(self: Runner, build: Build, queue: int) -> Any:
        if build.id == broken.id:
            raise OSError(39, "Directory not empty", "work/deep")
        return start(self, build, queue)

    monkeypatch.setattr(Runner, "_start", failing_start)
    outcomes = env.runner().run_queues([[broken, a, b]])
    by_id = {o.build_id: o for o in outcomes}
    assert sorted(by_id) == sorted([broken.id, a.id, b.id])
    assert by_id[a.id].ok
    assert by_id[b.id].ok
    failed = by_id[broken.id]
    assert (failed.status, failed.infra) == (FAILED, True)
    assert failed.reason == ("infrastructure failure: OSError: [Errno 39] Directory not empty: "
                             "'work/deep'")
    entry = env.state.get(broken.id)
    assert (entry.status, entry.infra, entry.reason) == (FAILED, True, failed.reason)
    assert ("end", {"build": broken.id, "status": FAILED, "reason": failed.reason,
                    "duration_s": 0.0, "queue": 0}) in env.events
