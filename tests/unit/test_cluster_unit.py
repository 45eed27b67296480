"""Cluster mode, the pure parts (no scheduler, no worker): priorities, resources, bounds,
task keys, the staging layout and its protocol on a folder store, tokens, worker folders.
The real cluster is in tests/integration/test_cluster.py."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from pathlib import Path

import pytest

from nightly import config as cfg
from nightly.cluster.dispatch import (
    TEST,
    build_resources,
    capacity,
    cluster_bounds,
    gpu_test_resources,
    lpt_priorities,
    task_key,
    worker_slots,
)
from nightly.cluster.host import _Slots, new_token, platform_resource, worker_folder
from nightly.cluster.hostinputs import ensure_input
from nightly.cluster.staging import (
    RESULT_JSON,
    LogStreamer,
    StagingDay,
    attempt_prefix,
    inputs_key,
    make_tarball,
    read_json,
)
from nightly.cluster.worker import worker_config
from nightly.core.matrix import Build
from nightly.errors import PublishError
from nightly.stores import FileStore
from nightly.workspace import Day
from tests.support.staging import put_attempt


def test_inputs_tarballs_are_reproducible_and_fetched_once(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("print('a')\n")
    (src / "run.sh").write_text("echo hi\n")
    (src / "run.sh").chmod(0o755)
    (src / "link").symlink_to("pkg/a.py")
    sha1 = make_tarball(src, tmp_path / "one.tar.gz")
    sha2 = make_tarball(src, tmp_path / "two.tar.gz")
    assert sha1 == sha2
    store = FileStore(tmp_path / "staging")
    store.put("d/inputs/src.tar.gz", tmp_path / "one.tar.gz", sha1)
    got = ensure_input(store, "d/inputs/src.tar.gz", sha1, tmp_path / "host", "source")
    assert (got / "pkg" / "a.py").read_text() == "print('a')\n"
    assert os.access(got / "run.sh", os.X_OK)
    assert (got / "link").is_symlink()
    store.delete("d/inputs/src.tar.gz")  # a second build on this host does not fetch again
    assert ensure_input(store, "d/inputs/src.tar.gz", sha1, tmp_path / "host", "source") == got


def test_an_input_whose_sha256_differs_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_text("a")
    sha = make_tarball(src, tmp_path / "a.tar.gz")
    store = FileStore(tmp_path / "staging")
    store.put("k.tar.gz", tmp_path / "a.tar.gz", sha)
    with pytest.raises(Exception, match="is not the expected"):
        ensure_input(store, "k.tar.gz", "0" * 64, tmp_path / "host", "source")


def test_bounds_and_priorities() -> None:
    workers = {
        "tcp://a": {"resources": {"slots": 2, "platform-linux": 1}},
        "tcp://b": {"resources": {"slots": 1, "platform-linux": 1, "gpu": 1}},
        "tcp://m": {"resources": {"slots": 1, "platform-macos": 1}},
    }
    lin = {"slots": 1.0, "platform-linux": 0.0}
    assert capacity(workers, lin) == 3
    assert capacity(workers, {**lin, "gpu": 0.0}) == 1
    assert capacity(workers, {"slots": 1.0, "platform-macos": 0.0}) == 1
    est = {"l1": 70.0, "l2": 70.0, "l3": 15.0, "l4": 15.0, "m1": 30.0, "g1": 10.0}
    res = {"l1": lin, "l2": lin, "l3": lin, "l4": lin, "m1": {"slots": 1.0, "platform-macos": 0.0},
           "g1": {"slots": 1.0, "platform-windows": 0.0}}
    b = cluster_bounds(est, res, workers)
    assert b.lower_bound_s == 70.0  # the longest build; linux work 170 / 3 slots is less
    assert b.makespan_s == 70.0
    assert b.unplaceable == ("g1",)
    builds = [Build(package="manywheel", python="3.7m", cuda=c) for c in ("cpu", "cu100")]
    prio = lpt_priorities(builds, {"manywheel_3.7m_cpu": 900.0, "manywheel_3.7m_cu100": 4200.0})
    assert prio["manywheel_3.7m_cu100"] > prio["manywheel_3.7m_cpu"]


def test_bounds_when_work_not_the_longest_build_binds() -> None:
    workers = {"w": {"resources": {"slots": 2, "platform-linux": 1}}}
    lin = {"slots": 1.0, "platform-linux": 0.0}
    est = {f"b{i}": 10.0 for i in range(5)}
    b = cluster_bounds(est, dict.fromkeys(est, lin), workers)
    assert b.lower_bound_s == 25.0  # 50 s of work on 2 slots
    assert b.makespan_s == 30.0  # 3 rounds of a list schedule
    assert b.slots == {"platform-linux": 2.0}


def test_a_worker_lacking_a_capability_offers_no_slots() -> None:
    info = {"resources": {"slots": 4, "platform-linux": 1}}
    assert worker_slots(info, {"slots": 1.0, "platform-linux": 0.0}) == 4
    assert worker_slots(info, {"slots": 1.0, "platform-linux": 0.0, "gpu": 0.0}) == 0
    assert worker_slots({}, {"slots": 1.0}) == 0


def _config(tmp_path: Path, text: str) -> cfg.Config:
    path = tmp_path / "nightly.toml"
    path.write_text(text)
    return cfg.load(path)


def test_builds_need_a_slot_of_their_platform_and_gpu_tests_a_gpu(
    tmp_path: Path, minimal_config_text: str
) -> None:
    cpu = Build(package="manywheel", python="3.7m", cuda="cpu")
    cuda = Build(package="manywheel", python="3.7m", cuda="cu100")
    plain = _config(tmp_path, minimal_config_text)
    lin = {"slots": 1.0, platform_resource("linux"): 0.0}
    assert build_resources(plain, cpu) == lin
    # gpu_smoke (the test stage) no longer sends a CUDA build to a GPU worker: its GPU test,
    # a task of its own, takes one GPU of a worker of its platform.
    gpu = dataclasses.replace(plain, cluster=dataclasses.replace(plain.cluster, gpu_smoke=True),
                              smoke=dataclasses.replace(plain.smoke, enabled=True))
    assert build_resources(gpu, cuda) == build_resources(plain, cuda) == lin
    assert gpu_test_resources(cuda) == {"gpu": 1.0, "platform-linux": 0.0}
    workers = {
        "tcp://cpu": {"resources": {"slots": 4, "platform-linux": 1}},
        "tcp://gpu": {"resources": {"gpu": 2, "platform-linux": 1}},
        "tcp://both": {"resources": {"slots": 1, "gpu": 1, "platform-linux": 1}},
    }
    assert capacity(workers, lin) == 5  # the GPU-only worker takes no build
    assert capacity(workers, gpu_test_resources(cuda)) == 3  # its GPUs, not its slots
    assert worker_slots(workers["tcp://cpu"], gpu_test_resources(cuda)) == 0


def test_task_keys_are_unique_per_run_and_share_a_prefix_per_kind() -> None:
    b = Build(package="manywheel", python="3.7m", cuda="cu100")
    k1, k2 = task_key(b, "release/2.1.0", "r1"), task_key(b, "release/2.1.0", "r2")
    assert k1 != k2
    assert k1.startswith("nightly-manywheel-cuda-release_2.1.0-manywheel_3.7m_cu100-")
    assert task_key(Build(package="conda", python="3.7", cuda="cpu"), "d", "r").startswith(
        "nightly-conda-cpu-")
    test = task_key(b, "d", "r1", what=TEST)
    assert test.startswith("nightly-gputest-manywheel-d-manywheel_3.7m_cu100-")
    assert test != task_key(b, "d", "r1")


def test_tokens_are_unique_and_sort_by_time() -> None:
    tokens = [new_token("sub12345xyz") for _ in range(50)]
    assert len(set(tokens)) == 50
    assert all("-sub12345-" in t for t in tokens)
    assert sorted(tokens, key=lambda t: t.split("-")[0]) == tokens


def test_slots_are_the_lowest_free_ones() -> None:
    s = _Slots()
    assert [s.take("w"), s.take("w"), s.take("v")] == [0, 1, 0]
    s.give("w", 0)
    assert s.take("w") == 0
    assert s.take("w") == 2


def test_worker_folder_beside_the_dask_scratch_space(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NIGHTLY_WORKER_DIR", raising=False)
    local = tmp_path / "w1" / "dask-scratch-space" / "worker-abc"
    assert worker_folder(str(local)) == tmp_path / "w1" / "nightly-worker"
    monkeypatch.setenv("NIGHTLY_WORKER_DIR", str(tmp_path / "elsewhere"))
    assert worker_folder(str(local)) == tmp_path / "elsewhere"


def test_worker_config_uses_the_gpu_only_on_a_gpu_worker(
    tmp_path: Path, minimal_config_text: str
) -> None:
    c = _config(tmp_path, minimal_config_text)
    c = dataclasses.replace(c, container=dataclasses.replace(c.container, gpu=True))
    on_gpu = worker_config(c, tmp_path / "recipes", tmp_path / "w", gpu=True)
    on_cpu = worker_config(c, tmp_path / "recipes", tmp_path / "w", gpu=False)
    assert (on_gpu.container.gpu, on_gpu.smoke.gpu) == (True, True)
    assert (on_cpu.container.gpu, on_cpu.smoke.gpu) == (False, False)
    assert on_cpu.recipes == tmp_path / "recipes"
    assert on_cpu.root == tmp_path / "w"


def test_the_log_streams_as_it_grows_and_survives_a_failing_store(tmp_path: Path) -> None:
    class Flaky:
        def __init__(self) -> None:
            self.objects: dict[str, bytes] = {}
            self.fail = False

        def put_bytes(self, key: str, data: bytes, content_type: str) -> str:
            if self.fail:
                raise PublishError("staging down")
            self.objects[key] = data
            return ""

    store = Flaky()
    log = tmp_path / "running.log"
    final = tmp_path / "final.log"
    s = LogStreamer(store, "b/t/log/", lambda: log if log.exists() else final, 0.05)  # type: ignore[arg-type]
    s.flush()  # nothing yet
    with log.open("ab") as f:
        f.write(b"header\n")
        f.flush()
        s.flush()
        store.fail = True
        f.write(b"building\n")
        f.flush()
        s.flush()  # kept for the next flush
        store.fail = False
        os.replace(log, final)  # the runner files the log: the open file follows
        f.write(b"footer\n")
    s.start()
    s.stop()
    assert list(store.objects) == ["b/t/log/000001", "b/t/log/000002"]
    assert b"".join(store.objects.values()) == b"header\nbuilding\nfooter\n"


def _attempt(store: FileStore, day: str, bid: str, token: str, *, log: bytes | None = None,
             chunks: tuple[bytes, ...] = (), result: dict[str, object] | None = None) -> None:
    about = {"worker": f"tcp://{token}", "worker_name": f"w-{token}", "host": "h"}
    put_attempt(store, attempt_prefix(day, bid, token), about, log=log, chunks=chunks,
                result=result)


def test_staging_day_lists_attempts_and_assembles_the_log(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "staging")
    bid = "manywheel_3.7m_cpu"
    # t1: a worker died mid-build (only streamed chunks); t2: the accepted attempt.
    _attempt(store, "2024_05_01", bid, "t1", chunks=(b"start 1\n", b"half\n"))
    _attempt(store, "2024_05_01", bid, "t2", log=b"whole log 2\n",
             result={"status": "succeeded", "token": "t2"})
    _attempt(store, "2024_05_01", "other", "t9", log=b"x")
    staging = StagingDay(store, "2024_05_01")
    listing = staging.listing()
    assert set(listing) == {bid, "other"}
    assert set(listing[bid]) == {"t1", "t2"}
    assert RESULT_JSON in listing[bid]["t2"]
    assert RESULT_JSON not in listing[bid]["t1"]
    assert staging.read(bid, "t2", RESULT_JSON) == {"status": "succeeded", "token": "t2"}
    assert staging.attempt_log(bid, "t1", listing[bid]["t1"]) == b"start 1\nhalf\n"

    day = Day(tmp_path / "root", dt.date(2024, 5, 1))
    day.create()
    dest = staging.assemble_log(day, bid, "t2", True, {"worker": "tcp://t2"})
    assert dest == day.succeeded / f"{bid}.log"
    text = dest.read_text()
    assert text.index("start 1\nhalf\n") < text.index("whole log 2\n")
    assert "attempt t1 ended without a result: its worker was lost" in text
    # Idempotent: assembling again (a rerun of the step) adds nothing.
    assert staging.assemble_log(day, bid, "t2", True, {}).read_text() == text

    staging.drop(bid)
    assert set(staging.listing()) == {"other"}
    staging.drop()
    assert staging.listing() == {}


def test_read_json_of_a_missing_or_broken_object_is_none(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s")
    assert read_json(store, "nope.json") is None
    store.put_bytes("bad.json", b"{half", "application/json")
    assert read_json(store, "bad.json") is None
    store.put_bytes("list.json", b"[1]", "application/json")
    assert read_json(store, "list.json") is None
    assert inputs_key("2024_05_01", "source", "a" * 64) == (
        "2024_05_01/inputs/source-" + "a" * 16 + ".tar.gz")
