"""The build history: recording state entries, several writers at once, estimates, trends."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

from nightly import config as cfg
from nightly.history.db import History, history_path
from nightly.history.feeds import estimator, recorder
from nightly.plan.schedule import make_plan
from nightly.workspace import State

T0 = 1_714_500_000.0  # a night's start, epoch seconds


def entry(
    *,
    status: str = "succeeded",
    duration: float = 100.0,
    attempts: int = 1,
    started: float = T0,
    files: dict[str, int] | None = None,
    queue: int = 0,
    reason: str | None = None,
) -> dict[str, Any]:
    """A state.json entry as runner.py writes it."""
    return {
        "status": status,
        "reason": reason,
        "exit_status": 0 if status == "succeeded" else 3,
        "started": started,
        "ended": started + duration,
        "duration_s": duration,
        "attempts": attempts,
        "machine": "m",
        "queue": queue,
        "executor": "local",
        "package": "manywheel",
        "python": "3.7m",
        "cuda": "cpu",
        "variant": "",
        "packages": [
            {"name": n, "path": f"packages/manywheel/cpu/{n}", "size": s, "sha256": "ab" * 32}
            for n, s in (files or {}).items()
        ],
        "published": {},
        "log": "logs/succeeded/x.log",
    }


def day(i: int) -> str:
    return f"2024_04_{i:02d}"


def night_start(i: int) -> float:
    return T0 + i * 86400


def test_record_and_read_back(tmp_path: Path) -> None:
    with History(history_path(tmp_path)) as h:
        h.record(day(1), "manywheel_3.7m_cpu",
                 entry(files={"a.whl": 1000, "b.whl": 24}), commit="c0ffee", channel="nightly")
        recs = h.night(day(1))
    assert len(recs) == 1
    r = recs[0]
    assert (r.day, r.build_id, r.attempt, r.commit, r.channel) == (
        day(1), "manywheel_3.7m_cpu", 1, "c0ffee", "nightly"
    )
    assert (r.machine, r.queue, r.executor, r.outcome, r.exit_status) == ("m", 0, "local", "succeeded", 0)
    assert r.started == T0
    assert r.ended == T0 + 100
    assert r.duration_s == 100
    assert {(f.name, f.size, f.sha256) for f in r.files} == {
        ("a.whl", 1000, "ab" * 32),
        ("b.whl", 24, "ab" * 32),
    }
    assert r.size == 1024
    assert (tmp_path / "history.sqlite").exists()
    conn = sqlite3.connect(tmp_path / "history.sqlite")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_upsert_by_day_build_attempt(tmp_path: Path) -> None:
    h = History(tmp_path / "h.sqlite")
    bid = "conda_3.7_cpu"
    h.record(day(1), bid, entry(status="running", duration=0, files={}), commit="c")
    h.record(day(1), bid, entry(status="succeeded", files={"old.tar.bz2": 5}), commit="c")
    h.record(day(1), bid, entry(status="succeeded", files={"new.tar.bz2": 7}), commit="c")
    recs = h.night(day(1), all_attempts=True)
    assert len(recs) == 1  # the same attempt, replaced, files too
    assert [f.name for f in recs[0].files] == ["new.tar.bz2"]
    # A retry is a new attempt; night() shows the last, all_attempts every one.
    h.record(day(1), bid, entry(status="failed", attempts=2, reason="smoke test"), commit="c")
    assert [r.attempt for r in h.night(day(1), all_attempts=True)] == [1, 2]
    last = h.night(day(1))
    assert [(r.attempt, r.outcome, r.reason) for r in last] == [(2, "failed", "smoke test")]


def test_concurrent_threads_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite"
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def writer(q: int) -> None:
        try:
            h = History(path)  # each queue may open its own History on the same file
            start.wait()
            for i in range(40):
                h.record(day(1), f"b{q}_{i}", entry(queue=q, files={f"f{q}_{i}.whl": i + 1}),
                         commit="c")
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(q,)) for q in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    recs = History(path).night(day(1))
    assert len(recs) == 8 * 40
    assert sum(len(r.files) for r in recs) == 8 * 40


WRITER = textwrap.dedent(
    """
    import sys, threading
    from nightly.history.db import History
    path, proc = sys.argv[1], int(sys.argv[2])
    h = History(path)
    def work(t):
        for i in range(25):
            h.record("2024_04_01", f"p{proc}_t{t}_{i}", {
                "status": "succeeded", "attempts": 1, "started": 1.0 + i, "ended": 2.0 + i,
                "duration_s": 1.0, "queue": t,
                "packages": [{"name": f"p{proc}_t{t}_{i}.whl", "size": 10, "sha256": "x"}],
            }, commit="c")
    ts = [threading.Thread(target=work, args=(t,)) for t in range(3)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    print("ok")
    """
)


def test_concurrent_processes_and_threads_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite"  # not created yet: the processes race to create it
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(p)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for p in range(5)
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert out.strip() == "ok"
    recs = History(path).night(day(1))
    assert len(recs) == 5 * 3 * 25
    assert len({r.build_id for r in recs}) == 5 * 3 * 25
    assert all(len(r.files) == 1 for r in recs)


def test_estimates_are_the_median_of_the_last_successes(tmp_path: Path) -> None:
    h = History(tmp_path / "h.sqlite")
    durations = [500, 100, 110, 90, 130, 120]  # night 1 (oldest) .. night 6
    for i, d in enumerate(durations, start=1):
        h.record(day(i), "a", entry(duration=d, started=night_start(i)), commit="c")
    # Failures (and interruptions) say nothing about a build's length: ignored.
    h.record(day(7), "a", entry(status="failed", duration=5, started=night_start(7)), commit="c")
    h.record(day(8), "a", entry(status="interrupted", duration=9000, started=night_start(8)),
             commit="c")
    # Only failures: no estimate at all.
    h.record(day(1), "b", entry(status="failed", duration=7, started=night_start(1)), commit="c")
    est = h.estimates(["a", "b", "never-built"])
    assert est == {"a": 110.0}  # median of the last five: 100, 110, 90, 130, 120
    assert h.estimates(["a"], last=2) == {"a": 125.0}
    assert h.estimates(["a"], last=1) == {"a": 120.0}
    assert h.estimates([]) == {}


def test_trends_per_night_oldest_first(tmp_path: Path) -> None:
    h = History(tmp_path / "h.sqlite")
    for i in range(1, 36):
        h.record(day(i % 30 + 1) if i <= 30 else f"2024_05_{i - 30:02d}", "a",
                 entry(duration=float(i), started=night_start(i), files={"a.whl": 1000 + i}),
                 commit="c")
    # A failed retry after the success on the last night does not hide the success.
    h.record("2024_05_05", "a", entry(status="failed", attempts=2, duration=1.0,
                                      started=night_start(35) + 100), commit="c")
    d = h.durations("a")
    assert len(d) == 30
    assert d[-1] == ("2024_05_05", 35.0)
    assert d[0][1] == 6.0
    s = h.sizes("a", nights=3)
    assert [v for _, v in s] == [1033, 1034, 1035]
    # before= leaves that night (and later ones) out: the report's "previous nights".
    prev = h.durations("a", nights=3, before="2024_05_05")
    assert [v for _, v in prev] == [32.0, 33.0, 34.0]
    # until= leaves out what started from then on (a night not recorded yet).
    assert [v for _, v in h.durations("a", nights=3, until=night_start(33))] == [30.0, 31.0, 32.0]


def test_sizes_json_shape(tmp_path: Path) -> None:
    h = History(tmp_path / "h.sqlite")
    h.record(day(1), "manywheel_3.7m_cpu", entry(files={"t-1.whl": 123}), commit="c")
    h.record(day(1), "conda_3.7_cpu", entry(files={"t-1.tar.bz2": 7, "t-1.json": 3}), commit="c")
    h.record(day(1), "conda_3.7_cu100", entry(status="failed", files={}), commit="c")
    data = h.sizes_json(day(1))
    assert data == {
        "date": day(1),
        "builds": {
            "conda_3.7_cpu": {"files": {"t-1.json": 3, "t-1.tar.bz2": 7}, "total": 10},
            "manywheel_3.7m_cpu": {"files": {"t-1.whl": 123}, "total": 123},
        },
    }
    json.dumps(data)  # serialisable as it is
    assert h.sizes_json("2099_01_01") == {"date": "2099_01_01", "builds": {}}


def test_record_state_records_finished_builds(tmp_path: Path) -> None:
    state = State(tmp_path / "state.json")
    state.set_meta(commit="deadbeef", channel="test")
    state.update("a", **entry())
    state.update("b", **entry(status="failed", reason="recipe failed with exit status 3"))
    state.update("c", **entry(status="running"))
    h = History(tmp_path / "h.sqlite")
    assert h.record_state(day(1), state) == 2
    recs = {r.build_id: r for r in h.night(day(1))}
    assert set(recs) == {"a", "b"}
    assert recs["a"].commit == "deadbeef"
    assert recs["a"].channel == "test"
    assert recs["b"].reason == "recipe failed with exit status 3"


def test_estimator_feeds_the_plan(tmp_path: Path, minimal_config: Path, minimal_ids: list[str]) -> None:
    config = cfg.load(minimal_config)
    h = History(tmp_path / "h.sqlite")
    fallback = estimator(config, h)
    by_id = {b.id: b for b in config.builds}
    for bid in minimal_ids:
        assert fallback(by_id[bid]) == config.estimate_for(by_id[bid])
    # History says manywheel_3.6m_cpu takes 3 hours: it becomes the longest build, which LPT
    # places first (it was among the last, a 15-minute CPU build, without history).
    for i in range(1, 4):
        h.record(day(i), "manywheel_3.6m_cpu", entry(duration=3 * 3600 + i, started=night_start(i)),
                 commit="c")
    est = estimator(config, h)
    assert est(by_id["manywheel_3.6m_cpu"]) == 3 * 3600 + 2
    assert est(by_id["conda_3.7_cpu"]) == config.estimate_for(by_id["conda_3.7_cpu"])
    before = {pb.build.id: pb for pb in make_plan(config).builds}
    after = {pb.build.id: pb for pb in make_plan(config, estimate=est).builds}
    assert before["manywheel_3.6m_cpu"].start_s > 0
    assert after["manywheel_3.6m_cpu"].start_s == 0
    assert after["manywheel_3.6m_cpu"].estimate_s == 3 * 3600 + 2
    assert estimator(config, None)(by_id["conda_3.7_cpu"]) == config.estimate_for(by_id["conda_3.7_cpu"])


def test_recorder_records_attempts_as_they_end_and_never_raises(tmp_path: Path) -> None:
    state = State(tmp_path / "state.json")
    h = History(tmp_path / "h.sqlite")
    sink = recorder(h, day(1), state, commit="c", channel="nightly")
    state.update("a", **entry(status="failed", attempts=1, reason="flaky"))
    sink("end", {"build": "a", "status": "failed"})
    state.update("a", **entry(status="succeeded", attempts=2))
    sink("start", {"build": "a"})  # ignored
    sink("end", {"build": "a", "status": "succeeded"})
    assert [(r.attempt, r.outcome) for r in h.night(day(1), all_attempts=True)] == [
        (1, "failed"), (2, "succeeded")
    ]
    # A broken database is reported through log, not raised into the runner.
    logged: list[str] = []
    broken = History(tmp_path / "broken.sqlite")
    (tmp_path / "broken.sqlite").write_bytes(b"this is not a database" * 100)
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"broken.sqlite{suffix}").unlink(missing_ok=True)
    recorder(broken, day(1), state, commit="c", log=logged.append)("end", {"build": "a"})
    assert len(logged) == 1
    assert "could not record a" in logged[0]


# ---------------------------------------------------------------------------- a year of nights


def _nights(h: History, build_id: str, outcomes: str, *, first: int = 1) -> None:
    """One night per letter of `outcomes` (s: succeeded, f: failed, i: interrupted), days
    2024_01_01 onwards, each started a day after the last."""
    import datetime as dt

    for i, o in enumerate(outcomes):
        d = dt.date(2024, 1, 1) + dt.timedelta(days=first - 1 + i)
        status = {"s": "succeeded", "f": "failed", "i": "interrupted"}[o]
        e = entry(status=status, started=T0 + 86400 * (first + i), duration=100.0 + i)
        h.record(d.strftime("%Y_%m_%d"), build_id, e, commit=f"c{first + i}")


def test_outcomes_are_the_nights_since_the_last_success(tmp_path: Path) -> None:
    h = History(tmp_path / "history.sqlite")
    _nights(h, "a", "ssssfsffif")
    days = [d for d, _, _ in h.outcomes("a")]
    assert days == ["2024_01_06", "2024_01_07", "2024_01_08", "2024_01_09", "2024_01_10"]
    # Before the sixth night: from the fourth night's success on.
    assert [d for d, _, _ in h.outcomes("a", before="2024_01_06")] == ["2024_01_04", "2024_01_05"]
    _nights(h, "never", "ff")
    assert [o for _, o, _ in h.outcomes("never")] == ["failed", "failed"]
    assert h.outcomes("unknown") == []


def test_a_release_folder_never_hides_the_nights(tmp_path: Path) -> None:
    h = History(tmp_path / "history.sqlite")
    _nights(h, "a", "sf")
    h.record("release_2.1.0", "a", entry(), commit="r")  # sorts after every calendar day
    assert [d for d, _, _ in h.outcomes("a")] == ["2024_01_01", "2024_01_02"]


def test_estimates_stay_the_last_successes_over_a_year(tmp_path: Path) -> None:
    h = History(tmp_path / "history.sqlite")
    _nights(h, "a", "s" * 360 + "ff")
    # The last five successes are nights 356-360: durations 100 + 355..359.
    assert h.estimates(["a"]) == {"a": 457.0}


def test_retention_keeps_the_window_and_the_facts_of_an_old_failure(tmp_path: Path) -> None:
    import datetime as dt

    from nightly.history.retention import prune_history
    from nightly.history.triage import NightOutcome, facts

    h = History(tmp_path / "history.sqlite")
    _nights(h, "ok", "s" * 200)
    _nights(h, "broken", "s" * 20 + "f" * 180)  # last good 2024_01_20, failing since 01_21
    h.record_bisect("2024_01_21", "broken", {"first_bad": "c21"})
    today = dt.date(2024, 7, 18)  # night 200 is 2024_07_18
    before = facts("broken", NightOutcome(day="2024_07_19", outcome="failed", commit="x"),
                   [NightOutcome(day=d, outcome=o, commit=c) for d, o, c in h.outcomes("broken")])
    gone = prune_history(h, today, 90)
    assert gone > 0
    cut = (today - dt.timedelta(days=90)).strftime("%Y_%m_%d")
    assert all(d >= cut for d in h.days()[2:])  # two old nights kept for "broken" only
    assert [r.day for r in h.night("2024_01_20")] == ["2024_01_20"]
    assert {r.build_id for r in h.night("2024_01_21")} == {"broken"}
    assert h.night("2024_01_22") == []
    after = facts("broken", NightOutcome(day="2024_07_19", outcome="failed", commit="x"),
                  [NightOutcome(day=d, outcome=o, commit=c) for d, o, c in h.outcomes("broken")])
    assert (after.since, after.last_good, after.last_good_commit) == (
        before.since, before.last_good, before.last_good_commit) == ("2024_01_21", "2024_01_20", "c20")
    assert h.bisects("2024_01_21") == {}
    assert len(h.durations("ok", 30)) == 30  # the report's window is whole
    # The files of a pruned attempt went with it.
    with sqlite3.connect(h.path) as conn:
        orphans = conn.execute(
            "SELECT COUNT(*) FROM files f WHERE NOT EXISTS (SELECT 1 FROM builds b WHERE "
            "b.day = f.day AND b.build_id = f.build_id AND b.attempt = f.attempt)").fetchone()[0]
    assert orphans == 0
    assert prune_history(h, today, 0) == 0  # 0: keep everything


def test_retention_never_goes_below_the_reports_window(tmp_path: Path) -> None:
    import datetime as dt

    from nightly.history.retention import prune_history

    h = History(tmp_path / "history.sqlite")
    _nights(h, "a", "s" * 60)
    prune_history(h, dt.date(2024, 2, 29), 3)  # night 60 is 2024_02_29
    assert len(h.days()) == 31


def test_a_truncated_history_is_found_from_its_header_alone(tmp_path: Path) -> None:
    from nightly.history import recover

    path = tmp_path / "history.sqlite"
    h = History(path)
    _nights(h, "a", "s" * 50)
    h.close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert recover.header_verdict(path) == "ok"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    verdict = recover.header_verdict(path)
    assert "where the header declares" in verdict
    (tmp_path / "garbage").write_bytes(b"not a database" * 10)
    assert recover.header_verdict(tmp_path / "garbage") == "not a database"


def test_one_connection_per_thread_for_the_historys_life(tmp_path: Path) -> None:
    h = History(tmp_path / "history.sqlite")
    _nights(h, "a", "sss")
    first = h._conn()
    _nights(h, "b", "sss")
    assert h._conn() is first
    seen: list[sqlite3.Connection] = []
    t = threading.Thread(target=lambda: seen.append(h._conn()))
    t.start()
    t.join()
    assert seen[0] is not first
    h.close()
    assert h._conn() is not first  # closed: a new one on next use
    assert h.estimates(["a", "b"]) == {"a": 101.0, "b": 101.0}
