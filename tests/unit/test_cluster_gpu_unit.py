"""The test stage in cluster mode ([cluster] gpu_smoke), the parts that need no cluster: the
build worker's smoke test leaving the GPU part to its own task, a GPU test's outcome merged
into the build's `tested`, dispatching tests beside builds, the GPU test's staging prefix and
its log, the GPU worker's check of the packages, and the orchestrator's bookkeeping of tests.
The real cluster is tests/integration/test_cluster_gpu.py."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nightly import config as cfg
from nightly.builds.test.smoke import FAILED, NOT_RUN, PASSED, SmokeTester, stage_part
from nightly.cluster.collector import with_gpu_test
from nightly.cluster.dispatch import (
    BUILD,
    TEST,
    TEST_PRIORITY,
    Dispatcher,
    TaskItem,
    build_resources,
    gpu_test_resources,
)
from nightly.cluster.gpustage import GpuStage
from nightly.cluster.gputest import NOT_TESTED, fetch_wheels
from nightly.cluster.messages import AttemptResult, GpuTestResult, GpuTestSpec, StagedPackage
from nightly.cluster.staging import (
    RESULT_JSON,
    StagingDay,
    StagingSpec,
    attempt_prefix,
    gpu_test_prefix,
)
from nightly.cluster.verify import seal
from nightly.core.matrix import Build
from nightly.errors import ObjectTooLarge, UnsafeEntry
from nightly.executors.base import Job
from nightly.stores import FileStore
from nightly.workspace import Day
from nightly.workspace.records import TestRecord
from tests.support.executors import RecordingExecutor
from tests.support.staging import put_attempt

CPU = Build(package="manywheel", python="3.11", cuda="cpu")
CUDA = Build(package="manywheel", python="3.11", cuda="cu126")
DAY = "2024_05_01"


@pytest.fixture
def config(tmp_path: Path, minimal_config_text: str) -> cfg.Config:
    path = tmp_path / "nightly.toml"
    path.write_text(minimal_config_text + '\n[smoke]\nenabled = true\nimport_name = "demo"\n'
                    'gpu_command = "nvidia-smi"\n\n[cluster]\ngpu_smoke = true\n')
    return cfg.load(path)


# ---------------------------------------------------------------------------- the build worker


def _job(tmp_path: Path) -> Job:
    (tmp_path / "work" / "scratch").mkdir(parents=True, exist_ok=True)
    return Job(build_id=CUDA.id, package="manywheel", python="3.11", cuda="cu126",
               env={"BUILD_VERSION": "1.0", "PACKAGE_VERSION": "1.0+cu126"},
               recipes_dir=tmp_path, source_dir=tmp_path, output_dir=tmp_path / "work" / "out",
               work_dir=tmp_path / "work" / "scratch", timeout_s=60)


def test_with_the_test_stage_the_build_worker_runs_the_cpu_part_only(
    tmp_path: Path, config: cfg.Config
) -> None:
    wheel = tmp_path / "demo-1.0+cu126-py3-none-any.whl"
    wheel.write_text("w")
    staged, inline = RecordingExecutor(), RecordingExecutor()
    out: list[bytes] = []
    r = SmokeTester(config, staged, tmp_path, where="cpu-1", gpu_host=True, gpu_stage=True)(
        CUDA, [wheel], _job(tmp_path), out.append, threading.Event())
    assert r.ok
    assert [j.package for j in staged.jobs] == ["wheel"]  # no gputest job here
    assert r.tested is not None
    assert set(r.tested.to_json()) == {"result", "seconds", "cpu"}
    assert b"the GPU part runs as a task of its own" in b"".join(out)
    # Without the stage, a GPU host runs both parts in the build.
    r = SmokeTester(config, inline, tmp_path, where="gpu-1", gpu_host=True)(
        CUDA, [wheel], _job(tmp_path), lambda _: None, threading.Event())
    assert [j.package for j in inline.jobs] == ["wheel", "gputest"]
    assert r.tested is not None
    assert r.tested.gpu is not None
    assert r.tested.gpu.result == PASSED


# ---------------------------------------------------------------------------- the verdict


def test_a_gpu_test_decides_the_build_and_is_recorded_in_tested() -> None:
    cpu = stage_part(PASSED, "tls://cpu-1", 1.0)
    built = TestRecord(result=PASSED, seconds=1.0, cpu=cpu)
    passed = GpuTestResult(build="b", token="t", result=PASSED,
                           part=dataclasses.replace(stage_part(PASSED, "tls://gpu-1", 2.0),
                                                    worker_name="gpu-1"))
    tested, why = with_gpu_test(built, passed, require_gpu=True)
    assert why is None
    assert tested.cpu == cpu
    assert tested.gpu is not None
    assert tested.gpu.where == "tls://gpu-1"
    assert tested.result == PASSED
    failed = GpuTestResult(build="b", token="t", result=FAILED, reason="GPU test: exit status 4",
                           part=stage_part(FAILED, "tls://gpu-1", 2.0))
    assert failed.part is not None
    assert with_gpu_test(built, failed, require_gpu=False) == (
        dataclasses.replace(tested, result=FAILED, gpu=failed.part,
                seconds=round(cpu.seconds + failed.part.seconds, 3)),
        "GPU test: exit status 4")
    lost = GpuTestResult(build="b", token="", result=NOT_RUN, reason="no worker with gpu",
                         part=stage_part(NOT_RUN, "", 3.0, reason="no worker with gpu"))
    tested, why = with_gpu_test(built, lost, require_gpu=False)
    assert (tested.result, why) == (NOT_RUN, None)  # published without it
    _, why = with_gpu_test(built, lost, require_gpu=True)
    assert why == "GPU test: not run: no worker with gpu; [smoke] require_gpu = true"


# ---------------------------------------------------------------------------- dispatching


class FakeFuture:
    def __init__(self, fn: Any, spec: Any) -> None:
        self.fn, self.spec, self.status = fn, spec, "pending"
        self._result: Any = None

    def add_done_callback(self, cb: Any) -> None:
        self._result, self.status = self.fn(self.spec), "finished"  # done at once
        cb(self)

    def result(self) -> Any:
        return self._result

    def release(self) -> None:
        pass


class FakeClient:
    def __init__(self, workers: dict[str, Any]) -> None:
        self.workers, self.maps = workers, []  # type: ignore[var-annotated]

    def subscribe_topic(self, topic: str, cb: Any) -> None:
        pass

    def unsubscribe_topic(self, topic: str) -> None:
        pass

    def scheduler_info(self, n_workers: int = -1) -> dict[str, Any]:
        return {"workers": self.workers}

    def map(self, fn: Any, specs: list[Any], *, key: list[str], resources: dict[str, float],
            priority: int, retries: int, pure: bool) -> list[FakeFuture]:
        self.maps.append((list(key), dict(resources), priority))
        return [FakeFuture(fn, s) for s in specs]


def test_gpu_tests_are_dispatched_beside_builds_as_their_results_come_in(
    config: cfg.Config
) -> None:
    client = FakeClient({"tcp://cpu": {"resources": {"slots": 1, "platform-linux": 1}},
                         "tcp://gpu": {"resources": {"gpu": 1, "platform-linux": 1}}})
    d = Dispatcher(client, topic="t", retries=0, lookahead=0)
    builds = [Build(package="manywheel", python=py, cuda=c)
              for py in ("3.11", "3.12") for c in ("cpu", "cu126")]
    got: list[tuple[str, str]] = []

    def on_result(item: TaskItem, result: object) -> None:
        got.append((item.id, str(result)))
        b = next(b for b in builds if b.id == item.build_id)
        if item.kind == BUILD and b.is_cuda:
            d.submit(lambda spec: f"tested {spec}", [TaskItem(
                build_id=b.id, key=f"test-{b.id}", spec=b.id, resources=gpu_test_resources(b),
                priority=TEST_PRIORITY, kind=TEST)])

    d.submit(lambda spec: f"built {spec}", [
        TaskItem(build_id=b.id, key=b.id, spec=b.id, resources=build_resources(config, b),
                 priority=10 - i) for i, b in enumerate(builds)])
    d.run(on_result=on_result, on_error=lambda item, e: pytest.fail(f"{item.id}: {e}"))
    assert sorted(got) == sorted([(b.id, f"built {b.id}") for b in builds]
                                 + [(f"test:{b.id}", f"tested {b.id}") for b in builds if b.is_cuda])
    assert d.remaining == set()
    tests = [m for m in client.maps if m[0][0].startswith("test-")]
    assert {k for m in tests for k in m[0]} == {"test-manywheel_3.11_cu126", "test-manywheel_3.12_cu126"}
    assert all(m[1] == {"gpu": 1.0, "platform-linux": 0.0} and m[2] == TEST_PRIORITY for m in tests)
    # One build at a time: 1 slot, lookahead 0.
    assert all(len(m[0]) == 1 for m in client.maps if not m[0][0].startswith("test-"))


# ---------------------------------------------------------------------------- staging


def _put(store: FileStore, prefix: str, **files: Any) -> None:
    put_attempt(store, prefix, {"worker": "tls://w", "worker_name": "w", "host": "h"}, **files)


def test_gpu_test_attempts_are_staged_apart_and_their_logs_follow_the_builds(
    tmp_path: Path
) -> None:
    store = FileStore(tmp_path / "staging")
    bid = CUDA.id
    _put(store, attempt_prefix(DAY, bid, "b1"), log=b"the build\n", result={"token": "b1"})
    # t1: its GPU worker was killed; t2: the test that counts.
    _put(store, gpu_test_prefix(DAY, bid, "t1"), chunks=(b"gpu test: fresh venv\n",))
    _put(store, gpu_test_prefix(DAY, bid, "t2"), log=b"gpu test: passed\n",
         result={"token": "t2"})
    staging = StagingDay(store, DAY)
    assert set(staging.listing(bid)[bid]) == {"b1"}  # a test attempt is no build attempt
    assert set(staging.listing(bid, tests=True)[bid]) == {"t1", "t2"}
    assert staging.read(bid, "t2", RESULT_JSON, tests=True) == {"token": "t2"}
    day = Day(tmp_path / "root", dt.date(2024, 5, 1))
    day.create()
    want = hashlib.sha256(b"gpu test: passed\n").hexdigest()
    dest = staging.assemble_log(day, bid, "b1", True, {}, test={"token": "t2", "log_sha256": want})
    text = dest.read_text()
    assert text.index("the build") < text.index("[nightly] cluster GPU test attempt t1 ")
    assert text.index("fresh venv") < text.index("GPU test attempt t1 ended without a result")
    assert text.index("ended without a result") < text.index("gpu test: passed")
    assert "is not the one the worker recorded" not in text
    assert staging.assemble_log(day, bid, "b1", True, {}, test={"token": "t2"}).read_text() == text
    # A test that never gave a result of its own (no GPU worker): nightly's verdict instead.
    other = Build(package="manywheel", python="3.12", cuda="cu126").id
    _put(store, attempt_prefix(DAY, other, "b9"), log=b"built\n")
    text = staging.assemble_log(day, other, "b9", True, {}, test={
        "token": "", "result": NOT_RUN, "reason": "no worker with gpu for 600 s"}).read_text()
    assert "[nightly] GPU test not run: no worker with gpu for 600 s" in text
    staging.drop(bid)
    assert staging.listing(bid, tests=True) == {}
    assert staging.listing(bid) == {}


def _spec(tmp_path: Path, config: cfg.Config, packages: tuple[StagedPackage, ...]) -> GpuTestSpec:
    return GpuTestSpec(
        config=config, build=CUDA, day=DAY, date=dt.date(2024, 5, 1), version="1.0",
        channel="nightly", commit="c", executor="local", keep_container=False,
        staging=StagingSpec(url=str(tmp_path / "staging")), source_key="s", source_sha256="0" * 64,
        source_size=0, build_token="b1", packages=packages, submission="sub", topic="t",
        log_flush_s=1.0, seal_key=b"k" * 32)


def test_the_gpu_worker_tests_only_the_packages_its_build_reported(
    tmp_path: Path, config: cfg.Config
) -> None:
    store = FileStore(tmp_path / "staging")
    prefix = attempt_prefix(DAY, CUDA.id, "b1")
    body = b"a wheel"
    name = "demo-1.0+cu126-py3-none-any.whl"
    store.put_bytes(f"{prefix}packages/{name}", body, "application/zip")
    rec = StagedPackage(name=name, size=len(body), sha256=hashlib.sha256(body).hexdigest(),
                        key=f"{prefix}packages/{name}")
    (got,) = fetch_wheels(store, _spec(tmp_path, config, (rec,)), tmp_path / "a")
    assert got.read_bytes() == body
    assert "seal_key" not in repr(_spec(tmp_path, config, (rec,)))  # (Dask logs a task's args)
    # Changed in staging (same size), grown past what was reported, or a symlink: refused.
    store.put_bytes(f"{prefix}packages/{name}", b"A wheel", "application/zip")
    with pytest.raises(ValueError, match="the build's worker reported"):
        fetch_wheels(store, _spec(tmp_path, config, (rec,)), tmp_path / "b")
    store.put_bytes(f"{prefix}packages/{name}", body + b"\n# more", "application/zip")
    with pytest.raises(ObjectTooLarge):
        fetch_wheels(store, _spec(tmp_path, config, (rec,)), tmp_path / "c")
    path = tmp_path / "staging" / f"{prefix}packages/{name}"
    path.unlink()
    path.symlink_to(tmp_path / "a" / name)
    with pytest.raises(UnsafeEntry):
        fetch_wheels(store, _spec(tmp_path, config, (rec,)), tmp_path / "d")
    # A record naming a key outside its build attempt's prefix.
    outside = dataclasses.replace(rec, key=f"{DAY}/inputs/{name}")
    with pytest.raises(ValueError, match="not under its attempt"):
        fetch_wheels(store, _spec(tmp_path, config, (outside,)), tmp_path / "e")
    assert NOT_TESTED.startswith("verifying staging")


# ---------------------------------------------------------------------------- the orchestrator


class FakeCollector:
    def __init__(self) -> None:
        self.filed: set[str] = set()
        self.by_id = {CUDA.id: CUDA, CPU.id: CPU}
        self.seal_key = b"k" * 32
        self.interrupting = False
        self.calls: list[tuple[str, AttemptResult, GpuTestResult | None]] = []
        self.lost: list[tuple[str, str, str, str]] = []

    def file(self, build: Build, result: AttemptResult, *, test: GpuTestResult | None = None
             ) -> None:
        self.filed.add(build.id)
        self.calls.append((build.id, result, test))

    def record_lost(self, build_id: str, cur: Any, ended: float, *, stage: str = "build") -> None:
        self.lost.append((build_id, cur.worker_name, cur.token, stage))


class FakeStaging:
    def __init__(self, results: dict[str, dict[str, Any]]) -> None:
        self.results = results

    def listing(self, build_id: str, *, tests: bool = False) -> dict[str, dict[str, set[str]]]:
        return {build_id: {tok: {RESULT_JSON} for tok in self.results}}

    def read(self, build_id: str, token: str, name: str, *, tests: bool = False
             ) -> dict[str, Any] | None:
        return self.results.get(token)


def _stage(config: cfg.Config, staging: Any = None) -> tuple[GpuStage, FakeCollector, list[Any]]:
    notes: list[str] = []
    collector, submitted = FakeCollector(), []
    dispatcher = SimpleNamespace(submit=lambda fn, items: submitted.extend(items))
    stage = GpuStage(config, collector, staging or FakeStaging({}), dispatcher,  # type: ignore[arg-type]
                     spec_for=lambda b, r, sub: SimpleNamespace(submission=sub),  # type: ignore[arg-type,return-value]
                     key_for=lambda b: f"nightly-gputest-{b.id}", note=notes.append,
                     commit="c", version="1.0")
    return stage, collector, submitted


def _built(build: Build, name: str = "demo-1.0+cu126-py3-none-any.whl") -> AttemptResult:
    return AttemptResult(build=build.id, token="b1", status="succeeded", packages=(
        {"name": name, "size": 1, "sha256": "0" * 64, "key": f"x/{name}"},))


def test_which_builds_wait_for_a_gpu_test(config: cfg.Config) -> None:
    stage, _, _ = _stage(config)
    assert stage.wants(CUDA, _built(CUDA))
    assert not stage.wants(CPU, _built(CPU))  # no GPU part for a CPU build
    assert not stage.wants(CUDA, _built(CUDA, "demo.tar.gz"))  # nor without a wheel
    assert not stage.wants(CUDA, dataclasses.replace(_built(CUDA), status="failed"))
    off = dataclasses.replace(config, cluster=dataclasses.replace(config.cluster, gpu_smoke=False))
    assert not _stage(off)[0].wants(CUDA, _built(CUDA))


def test_a_tests_result_must_be_its_own_task_s(config: cfg.Config) -> None:
    stage, collector, submitted = _stage(config)
    stage.start(CUDA, _built(CUDA))
    (item,) = submitted
    assert (item.kind, item.resources, item.priority) == (TEST, gpu_test_resources(CUDA),
                                                           TEST_PRIORITY)
    stray = GpuTestResult(build=CUDA.id, token="t", build_token="b1", submission="other",
                          result=PASSED)
    stage.on_result(item, stray.to_json())
    ((bid, _, test),) = collector.calls
    assert test is not None
    assert (bid, test.result) == (CUDA.id, FAILED)
    assert "not for this build's test: not used" in str(test.reason)
    # ... and one that is: filed with it.
    stage, collector, submitted = _stage(config)
    stage.start(CUDA, _built(CUDA))
    (item,) = submitted
    good = dataclasses.replace(stray, submission=item.spec.submission)
    stage.on_result(item, good)
    assert collector.calls[0][2] == good


def test_a_test_no_worker_can_run_is_recorded_not_run_with_the_lost_worker(
    config: cfg.Config
) -> None:
    from nightly.cluster.messages import WorkerEvent

    stage, collector, submitted = _stage(config)
    stage.start(CUDA, _built(CUDA))
    stage.on_event(WorkerEvent(kind="test-start", build=CUDA.id, token="20240501T1-a",
                               worker="tls://gpu-1", worker_name="gpu-1"))
    stage.give_up(submitted[0], 600.0)
    ((_, _, test),) = collector.calls
    assert test is not None
    assert test.result == NOT_RUN
    assert test.reason == ("no worker with gpu, platform-linux for 600 s after the one testing "
                           "it (gpu-1, tls://gpu-1) was lost")
    stage.on_error(submitted[0], None)  # the cancelled task's callback: already filed
    assert len(collector.calls) == 1
    # The lost attempt is kept for the report's timeline, as a GPU test's.
    assert collector.lost == [(CUDA.id, "gpu-1", "20240501T1-a", "gpu-test")]


def test_a_gpu_test_attempt_superseded_by_another_is_recorded_lost(config: cfg.Config) -> None:
    """The scheduler runs a test again when its worker dies: the first attempt is kept as lost
    (an interrupted bar on gpu-1's lane), a late event of it changes nothing."""
    from nightly.cluster.messages import WorkerEvent

    stage, collector, _ = _stage(config)
    stage.start(CUDA, _built(CUDA))
    first = WorkerEvent(kind="test-start", build=CUDA.id, token="20240501T1-a",
                        worker="tls://gpu-1", worker_name="gpu-1", started=100.0)
    second = WorkerEvent(kind="test-start", build=CUDA.id, token="20240501T2-b",
                         worker="tls://gpu-2", worker_name="gpu-2", started=160.0)
    stage.on_event(first)
    assert collector.lost == []
    stage.on_event(second)
    assert collector.lost == [(CUDA.id, "gpu-1", "20240501T1-a", "gpu-test")]
    stage.on_event(first)  # late: already superseded
    assert len(collector.lost) == 1


def test_a_rerun_adopts_only_a_sealed_test_of_the_same_build_attempt(config: cfg.Config) -> None:
    key = b"k" * 32
    base = GpuTestResult(build=CUDA.id, token="t1", build_token="b1", result=PASSED,
                         commit="c", version="1.0").to_json()
    forged = {**base, "seal": "0" * 64}
    other_build = {**base, "token": "t2", "build_token": "b0"}
    other_build["seal"] = seal(key, other_build)
    stopped = {**base, "token": "t3", "result": NOT_RUN}  # (a stopped test writes none)
    stopped["seal"] = seal(key, stopped)
    stage, collector, submitted = _stage(config, FakeStaging(
        {"t1": forged, "t2": other_build, "t3": stopped}))
    stage.adopt(CUDA, _built(CUDA))
    assert collector.calls == []
    assert len(submitted) == 1  # tested again
    sealed_one = {**base, "seal": seal(key, base)}
    stage, collector, submitted = _stage(config, FakeStaging({"t1": sealed_one}))
    stage.adopt(CUDA, _built(CUDA))
    assert submitted == []
    ((_, _, test),) = collector.calls
    assert test is not None
    assert (test.token, test.result) == ("t1", PASSED)


def test_a_gpu_worker_without_a_platform_is_named_once_with_the_fix(config: cfg.Config) -> None:
    notes: list[str] = []
    stage, _, _ = _stage(config)
    stage.note = notes.append
    state = SimpleNamespace(set_meta=lambda **kw: None)
    workers = {"tls://a": {"name": "gpu-a", "resources": {"gpu": 1}},
               "tls://b": {"name": "gpu-b", "resources": {"gpu": 1, "platform-linux": 1}},
               "tls://c": {"name": "lin-c", "resources": {"slots": 2, "platform-linux": 1}}}
    assert stage.see_workers(workers, state) == {"tls://a", "tls://b"}  # type: ignore[arg-type]
    (note,) = notes
    assert "gpu-a (tls://a) declares gpu but no platform" in note
    assert '--resources "gpu=1,platform-linux=1"' in note
    stage.see_workers(workers, state)  # type: ignore[arg-type]
    assert len(notes) == 1  # once per worker, not at every look


def test_a_source_changed_in_staging_fails_the_gpu_test_in_its_log(
    tmp_path: Path, config: cfg.Config
) -> None:
    """The source is read after the test's log is open: a tampered one fails the test with
    why, in the log, rather than raising out of the task (which the orchestrator records as
    merely not run, and publishes)."""
    from nightly.cluster.gputest import SOURCE_NOT_READ, _test
    from nightly.cluster.host import WorkerInfo

    store = FileStore(tmp_path / "staging")
    store.put_bytes("s", b"not the staged source", "application/gzip")
    info = WorkerInfo(address="tls://gpu-1", name="gpu-1", folder=tmp_path / "w", gpu=True)
    day = Day(tmp_path / "attempts", dt.date(2024, 5, 1), name="t1")
    day.create()
    log = day.path / "gpu-test.log"
    spec = dataclasses.replace(_spec(tmp_path, config, ()),
                               staging=StagingSpec(url=f"file://{tmp_path}/staging"))
    part = _test(spec, info, day, log, threading.Event())
    assert part.result == FAILED
    assert SOURCE_NOT_READ in str(part.reason)
    assert "is not the expected" in str(part.reason)
    assert SOURCE_NOT_READ in log.read_text()
