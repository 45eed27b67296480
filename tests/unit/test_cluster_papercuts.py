"""Issue 41, point 12: a cluster operator's papercuts (staging left clean, the one-machine
example, worker names, lost workers, failure groups of GPU tests)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from pathlib import Path

import pytest

from nightly.cluster.staging import StagingDay
from nightly.stores import FileStore
from nightly.workspace import Day
from tests.support.staging import put_attempt

REPO = Path(__file__).resolve().parents[2]
DAY = "2024_05_01"


def _folders(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir()
            and not p.is_symlink()}


def test_dropping_staging_leaves_no_empty_attempt_folders(tmp_path: Path) -> None:
    root = tmp_path / "staging"
    store = FileStore(root)
    for bid, tok in (("a", "t1"), ("a", "t2"), ("b", "t3")):
        put_attempt(store, f"{DAY}/builds/{bid}/{tok}/", {"worker": "w"}, log=b"x",
                    chunks=(b"1",), result={"status": "succeeded"})
    store.put_bytes(f"{DAY}/tests/a/t4/log.txt", b"gpu", "text/plain")
    store.put_bytes(f"{DAY}/inputs/source-x.tar.gz", b"src", "application/gzip")
    staging = StagingDay(store, DAY)

    staging.drop("a")  # a build collected: its attempts' and GPU tests' folders go
    left = _folders(root)
    assert not any(f.startswith((f"{DAY}/builds/a", f"{DAY}/tests/a")) for f in left), left
    assert not any(f"/{DAY}/builds/a" in f or f"/{DAY}/tests/a" in f for f in left), left
    assert f"{DAY}/builds/b/t3/log" in left  # another build's attempt is untouched

    staging.drop()  # the end of the night: nothing of the day is left, folders included
    assert not (root / DAY).exists()
    assert not any(DAY in f for f in _folders(root)), _folders(root)


def test_pruning_keeps_files_and_never_follows_a_symlink(tmp_path: Path) -> None:
    root, outside = tmp_path / "staging", tmp_path / "outside"
    (outside / "empty").mkdir(parents=True)
    store = FileStore(root)
    store.put_bytes(f"{DAY}/builds/a/t1/log.txt", b"x", "text/plain")
    (root / DAY / "builds" / "a" / "link").symlink_to(outside)
    StagingDay(store, DAY).drop("a")
    assert (outside / "empty").is_dir()  # never pruned through the link...
    assert not os.path.lexists(root / DAY / "builds" / "a")  # ...deleted as itself, then its folder
    # A file staging still holds keeps its folder.
    store.put_bytes(f"{DAY}/builds/b/t2/log.txt", b"x", "text/plain")
    (root / DAY / "builds" / "b" / "t3").mkdir()
    from nightly.cluster.stagingclean import prune_empty

    prune_empty(store, f"{DAY}/builds/b/")
    assert (root / DAY / "builds" / "b" / "t2" / "log.txt").is_file()
    assert not (root / DAY / "builds" / "b" / "t3").exists()


def test_the_one_machine_example_starts_only_linux_workers() -> None:
    text = (REPO / "docs" / "cluster.md").read_text()
    block = text[text.index("## Trying it on one machine"):]
    block = block[:block.index("On loopback plain")]
    workers = re.findall(r"cluster worker .*?--resources \"([^\"]+)\"", block, re.S)
    assert len(workers) == 2
    assert all("platform-linux=1" in w and "macos" not in w for w in workers), workers


# ---------------------------------------------------------------------------- names, lost workers

T0 = 1_714_525_200.0  # 2024-05-01 01:00 UTC
RULE = "=" * 78


def _cluster_day(root: Path) -> Day:
    """A cluster night's day folder: builds on workers lin-a and lin-b (state.json's
    `machine` their addresses, `worker_name` their --name); one build's first attempt lost
    with lin-a (kill -9), run again on lin-b."""
    day = Day(root, dt.date(2024, 5, 1))
    day.create()

    def entry(start: float, worker: str, addr: str, slot: int, **more: object) -> dict[str, object]:
        return {"status": "succeeded", "attempts": 1, "started": T0 + start,
                "ended": T0 + start + 100, "duration_s": 100.0, "machine": addr, "queue": slot,
                "executor": "local", "worker_name": worker, "host": "h", **more}

    builds = {
        "manywheel_3.12_cpu": entry(0, "lin-a", "tcp://127.0.0.1:40001", 0),
        "manywheel_3.12_cu126": entry(60, "lin-b", "tcp://127.0.0.1:40002", 1, attempts=2, lost=[
            {"attempt": 1, "worker": "tcp://127.0.0.1:40001", "worker_name": "lin-a",
             "slot": 1, "started": T0 + 10, "ended": T0 + 55}]),
        "conda_3.12_cpu": entry(0, "", "tcp://127.0.0.1:40003", 0),  # a worker without --name
    }
    state = {"builds": builds, "meta": {"commit": "0" * 40, "version": "1.0.dev20240501",
                                        "channel": "nightly", "date": day.name}}
    day.state_path.write_text(json.dumps(state))
    return day


def test_the_report_names_workers_and_draws_a_lost_attempt(tmp_path: Path) -> None:
    from nightly.report import html as report

    page = report.render_html(_cluster_day(tmp_path), None)
    # Lanes and the run table by the worker's name; the address only without one.
    assert 'data-machine="lin-a"' in page
    assert 'data-machine="lin-b"' in page
    assert 'data-machine="tcp:&#47;&#47;127.0.0.1:40003"' in page
    assert "40001" not in page
    assert "40002" not in page
    assert "lin-b / 1" in page
    # The lost attempt: an interrupted bar on lin-a's lane, with the word "lost".
    lost = re.findall(r'<div class="bar interrupted lost"[^>]*>([^<]*)</div>', page)
    assert lost == ["manywheel_3.12_cu126 lost (lin-a)"]
    lane_a = page[page.index('data-machine="lin-a"'):page.index('data-machine="lin-b"')]
    assert 'data-status="lost" data-worker="lin-a"' in lane_a
    assert 'data-lost="1"' in page
    assert "attempt 1 lost with worker lin-a" in page
    assert "lost with its worker</span>" in page  # the legend


def test_a_lost_gpu_test_attempt_is_drawn_and_named_as_a_gpu_test(tmp_path: Path) -> None:
    from nightly.report import html as report

    day = _cluster_day(tmp_path)
    state = json.loads(day.state_path.read_text())
    state["builds"]["manywheel_3.12_cu126"]["lost"] = [
        {"attempt": 1, "worker": "tcp://127.0.0.1:40009", "worker_name": "gpu-1", "slot": 0,
         "started": T0 + 70, "ended": T0 + 90, "stage": "gpu-test"}]
    day.state_path.write_text(json.dumps(state))
    page = report.render_html(day, None)
    lost = re.findall(r'<div class="bar interrupted lost"[^>]*data-stage="gpu-test"[^>]*>([^<]*)</div>',
                      page)
    assert lost == ["manywheel_3.12_cu126 GPU test lost (gpu-1)"]
    assert 'data-machine="gpu-1"' in page  # its own lane: the GPU worker built nothing
    assert "GPU test attempt 1 lost with worker gpu-1" in page


def test_status_names_workers_and_the_lost_attempt(tmp_path: Path) -> None:
    from rich.console import Console

    from nightly.report import status as status_view

    console = Console(record=True, width=220, color_system=None)
    assert status_view.show(_cluster_day(tmp_path), console=console) == 0
    out = console.export_text()
    assert "lin-a/0" in out
    assert "lin-b/1" in out
    assert "40001" not in out
    assert "40002" not in out
    assert "attempt 1 lost with worker lin-a" in out


def test_a_lost_record_that_is_not_one_is_skipped(tmp_path: Path) -> None:
    from nightly.report.view import load_night

    day = _cluster_day(tmp_path)
    state = json.loads(day.state_path.read_text())
    state["builds"]["manywheel_3.12_cu126"]["lost"] = [{"attempt": "x"}, 3, {"started": "no"}]
    day.state_path.write_text(json.dumps(state))
    assert all(not b.lost for b in load_night(day).builds)


# ---------------------------------------------------------------------------- GPU test failures


def _gpu_failure_log(build_id: str, error: str) -> str:
    """A cluster night's log of a build that failed its GPU test: the build's attempt (its
    footer: succeeded), then the test stage's attempt with its `GPU test` section."""
    build = (f"{RULE}\nnightly build {build_id}  (attempt 1)\nwhere:    tcp://127.0.0.1:1\n{RULE}\n"
             "compiling\nbuilt the wheel\n"
             f"\n{RULE}\nresult:      SUCCEEDED\nexit status: 0\n{RULE}\n")
    test = (f"\n[nightly] cluster GPU test attempt 20240501-abc on worker tcp://127.0.0.1:2 "
            f"(gpu, host h)\nnightly GPU test of {build_id} on worker tcp://127.0.0.1:2 (gpu): "
            "the packages of build attempt t\n"
            + "-" * 30 + " GPU test " + "-" * 38 + "\n"
            "gpu test: attempt 1 of 1 on tcp://127.0.0.1:2\n"
            f"gpu test: project command: python -c \"raise {error.replace(': ', '(', 1)})\"\n"
            "Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\n"
            f"{error}\ngpu test: FAILED\n")
    return build + test


def test_a_gpu_test_failure_is_grouped_by_the_tests_own_error_line(tmp_path: Path) -> None:
    from nightly.history.triage import facts_for_day, groups, signature

    err = "RuntimeError: CUDA error: no kernel image is available for execution on the device"
    text = _gpu_failure_log("manywheel_3.12_cu126", err)
    assert signature(text, "manywheel_3.12_cu126", "GPU test: failed") == err
    # In a day folder: both CUDA builds in one group named by that line.
    day = Day(tmp_path, dt.date(2024, 5, 1))
    day.create()
    builds = {}
    for bid in ("manywheel_3.12_cu126", "manywheel_3.11_cu126"):
        (day.failed / f"{bid}.log").write_text(_gpu_failure_log(bid, err))
        builds[bid] = {"status": "failed", "reason": "GPU test: failed (exit status 1)",
                       "log": f"logs/failed/{bid}.log"}
    day.state_path.write_text(json.dumps({"builds": builds, "meta": {"commit": "c"}}))
    ((sig, members),) = groups(facts_for_day(day, None).values())
    assert sig == err
    assert len(members) == 2
    assert "no error line" not in sig


# ---------------------------------------------------------------------------- TLS mix-ups


@pytest.mark.parametrize(("args", "says"), [
    (["tls://sched:8786", "--name", "w"],
     "--tls-ca-file, --tls-cert, --tls-key are not given: pass --tls-ca-file FILE"),
    (["tls://sched:8786", "--tls-ca-file", "CA", "--tls-cert=CERT"], "--tls-key is not given"),
    (["tcp://sched:8786", "--tls-ca-file", "CA"], "use tls://sched:8786"),
    (["tls://sched:8786", "--tls-ca-file", "CA", "--tls-cert", "CERT", "--tls-key", "nope"],
     "--tls-key nope: no such readable file"),
])
def test_a_worker_tls_mix_up_is_one_line_naming_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], says: str
) -> None:
    from nightly.cluster.workerstart import check_worker_args
    from nightly.errors import UsageError

    monkeypatch.chdir(tmp_path)
    for name in ("CA", "CERT"):
        (tmp_path / name).write_text("pem")
    with pytest.raises(UsageError) as info:
        check_worker_args(args)
    assert says in str(info.value)
    assert "\n" not in str(info.value)
    assert info.value.exit_code == 2


def test_a_worker_with_its_tls_options_or_a_plain_address_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nightly.cluster.workerstart import check_worker_args

    monkeypatch.chdir(tmp_path)
    for name in ("CA", "CERT", "KEY"):
        (tmp_path / name).write_text("pem")
    check_worker_args(["tls://sched:8786", "--tls-ca-file", "CA", "--tls-cert", "CERT",
                       "--tls-key=KEY", "--name", "w", "--resources", "slots=1"])
    check_worker_args(["tcp://127.0.0.1:8786", "--nthreads", "2"])
    check_worker_args(["--help"])


def test_a_tcp_address_that_fails_says_use_tls_before_certificates() -> None:
    import socket

    from distributed.security import Security

    from nightly.cluster.dispatch import connect
    from nightly.errors import NightlyError

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(NightlyError) as info:
        connect(f"tcp://127.0.0.1:{port}", 2.0, security=Security())  # type: ignore[no-untyped-call]
    text = str(info.value)
    assert f"use tls://127.0.0.1:{port}" in text
    assert "tls_cert and tls_key from the CA" not in text  # certificates play no part on tcp
