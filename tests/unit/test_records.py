"""The typed records of a build's state entry (tested, cache, manylinux): read from the
state.json format earlier versions wrote, written back key for key, and read leniently."""

from __future__ import annotations

import json
from pathlib import Path

from nightly.core.manylinux import ManylinuxRecord, describe
from nightly.workspace.cost import GpuHosts, build_cost, verdict_of
from nightly.workspace.records import CacheStats, TestPart, TestRecord
from nightly.workspace.state import BuildEntry, State

# A state.json written by the previous version of nightly (its own State.update with its
# smoke.stage_part/tested_record, CacheStats.to_json and manylinux record dicts).
OLD_STATE = (
    '{"builds":{"conda_3.12_cpu":{"attempts":2,"reason":"exit status 1","status":"failed","updated":1'
    '795839020.7905447},"libtorch_cpu":{"attempts":1,"cache":{"errors":0,"hit_rate":null,"hits":0,"mi'
    'sses":0,"off":"sccache server did not start","requests":0,"where":""},"manylinux":{"glibc":"2.36'
    '","zips":{"libtorch-static.zip":"","libtorch.zip":"2.36"}},"status":"succeeded","tested":{"cpu":'
    '{"attempts":1,"result":"passed","seconds":95839020.786,"when":"2023-11-14T22:13:20+00:00","where'
    '":"lin-b"},"gpu":{"reason":"no GPU","result":"not run","seconds":0.0,"when":"2023-11-14T22:16:40'
    '+00:00","where":""},"result":"not run","seconds":95839020.786},"updated":1795839020.786466},"man'
    'ywheel_3.12_cu126":{"attempts":1,"cache":{"errors":0,"hit_rate":0.75,"hits":3,"misses":1,"reques'
    'ts":4,"where":"/var/cache/sccache"},"machine":"lin-a","manylinux":{"glibc":"2.17","policy":"2_28'
    '","tags":["manylinux_2_17_x86_64.manylinux2014_x86_64"],"toolchain":"sysroot"},"status":"succeed'
    'ed","tested":{"cpu":{"attempts":1,"result":"passed","seconds":95839020.783,"when":"2023-11-14T22'
    ':13:20+00:00","where":"lin-a"},"gpu":{"attempts":2,"reason":"GPU test: exit status 4","result":"'
    'failed","seconds":95838920.783,"when":"2023-11-14T22:15:00+00:00","where":"tls://10.0.0.2:8786",'
    '"worker_name":"gpu-1"},"pythons":[{"python":"3.10","result":"passed","seconds":1.5},{"python":"3'
    '.11","reason":"exit status 1","result":"failed","seconds":2.0}],"result":"failed","seconds":1916'
    '77941.566},"updated":1795839020.7834802}},"meta":{}}'
)


def _old(tmp_path: Path) -> State:
    path = tmp_path / "state.json"
    path.write_text(OLD_STATE + "\n")
    return State(path)


def test_an_old_state_json_reads_as_typed_records(tmp_path: Path) -> None:
    e = _old(tmp_path).get("manywheel_3.12_cu126")
    assert isinstance(e.tested, TestRecord)
    assert (e.tested.result, e.tested.seconds) == ("failed", 191677941.566)
    assert e.tested.cpu is not None
    assert e.tested.gpu is not None
    assert (e.tested.cpu.result, e.tested.cpu.where, e.tested.cpu.attempts) == ("passed", "lin-a", 1)
    assert (e.tested.gpu.worker_name, e.tested.gpu.attempts) == ("gpu-1", 2)
    assert e.tested.gpu.reason == "GPU test: exit status 4"
    assert [(t.python, t.result) for t in e.python_tests] == [("3.10", "passed"), ("3.11", "failed")]
    assert e.cache == CacheStats(hits=3, misses=1, requests=4, where="/var/cache/sccache")
    assert e.manylinux == ManylinuxRecord(
        policy="2_28", tags=("manylinux_2_17_x86_64.manylinux2014_x86_64",), glibc="2.17",
        toolchain="sysroot")
    assert describe(e.manylinux) == "policy 2_28: manylinux_2_17, toolchain sysroot"
    assert verdict_of(e) == "failed"
    lib = _old(tmp_path).get("libtorch_cpu")
    assert lib.cache is not None
    assert lib.cache.off == "sccache server did not start"
    assert lib.manylinux is not None
    assert lib.manylinux.tags is None
    assert describe(lib.manylinux) == "needs glibc 2.36"
    assert verdict_of(lib) == "GPU test not run"
    cost = build_cost(lib, GpuHosts())
    assert (cost.tested_on, cost.gpu_test_s) == ("lin-b", 0.0)  # the GPU part did not run
    plain = _old(tmp_path).get("conda_3.12_cpu")
    assert (plain.tested, plain.cache, plain.manylinux) == (None, None, None)


def test_records_write_back_the_old_format_key_for_key(tmp_path: Path) -> None:
    old = json.loads(OLD_STATE)["builds"]
    state = _old(tmp_path)
    for bid, raw in old.items():
        entry = state.get(bid)
        for key in ("tested", "cache", "manylinux"):
            record = getattr(entry, key)
            assert (None if record is None else record.to_json()) == raw.get(key), (bid, key)
        assert {k: entry.to_json().get(k) for k in raw} == {**raw, "updated": entry.updated}
        # A record written back through State.update lands on disk exactly as it was.
        state.update(bid, tested=entry.tested, cache=entry.cache, manylinux=entry.manylinux)
    on_disk = json.loads((tmp_path / "state.json").read_text())["builds"]
    for bid, raw in old.items():
        for key in ("tested", "cache", "manylinux"):
            assert on_disk[bid].get(key) == raw.get(key), (bid, key)


def test_a_record_built_in_code_round_trips() -> None:
    cpu = TestPart(result="passed", where="m", when="2026-01-01T00:00:00+00:00", seconds=1.5,
                   attempts=1)
    gpu = TestPart(result="not run", where="", when="2026-01-01T00:00:02+00:00", reason="no GPU")
    tested = TestRecord.of(cpu, gpu)
    assert (tested.result, tested.seconds) == ("not run", 1.5)
    assert "attempts" not in tested.to_json()["gpu"]  # type: ignore[operator]
    assert TestRecord.from_json(tested.to_json()) == tested
    stats = CacheStats(hits=1, misses=3, requests=4, errors=1, where="s3://b/p")
    assert stats.to_json()["hit_rate"] == 0.25
    assert CacheStats.from_json(stats.to_json()) == stats
    record = ManylinuxRecord(policy="2_28", zips={"a.zip": "2.28"}, glibc="2.28")
    assert ManylinuxRecord.from_json(record.to_json()) == record
    entry = BuildEntry(status="succeeded", tested=tested, cache=stats, manylinux=record)
    assert BuildEntry.from_json(json.loads(json.dumps(entry.to_json()))) == entry


def test_malformed_records_read_leniently(tmp_path: Path) -> None:
    """A hand-edited or damaged entry: a record that is no object reads as unset, a field of
    the wrong type as its default, a part that is no object as absent; keys this version
    does not know are kept."""
    e = BuildEntry.from_json({"status": "succeeded", "tested": "passed", "cache": [1, 2],
                              "manylinux": 7})
    assert (e.tested, e.cache, e.manylinux) == (None, None, None)
    assert verdict_of(e) == "untested"
    e = BuildEntry.from_json({
        "status": "succeeded",
        "tested": {"result": "passed", "seconds": "soon", "cpu": 5,
                   "gpu": {"result": "passed", "where": "g", "seconds": True, "attempts": "x"},
                   "pythons": "3.12", "by": "hand"},
        "cache": {"hits": "many", "misses": None, "requests": 2.7, "errors": True, "where": 3},
        "manylinux": {"policy": None, "tags": "manylinux_2_17_x86_64", "zips": [1],
                      "glibc": "2.17"},
    })
    assert e.tested is not None
    assert (e.tested.seconds, e.tested.cpu, e.tested.pythons) == (0.0, None, ())
    assert e.tested.gpu is not None
    assert (e.tested.gpu.seconds, e.tested.gpu.attempts) == (0.0, None)
    assert e.tested.extra == {"by": "hand"}
    assert e.tested.to_json()["by"] == "hand"
    assert verdict_of(e) == "passed"
    assert build_cost(e, GpuHosts()).tested_on == "g"
    assert e.cache == CacheStats(hits=0, misses=0, requests=2, errors=0, where="3")
    assert e.manylinux == ManylinuxRecord(glibc="2.17")
    assert describe(e.manylinux) == "needs glibc 2.17"
    # The whole file still loads through State, the damaged entry with it.
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"builds": {"b": {"status": "succeeded", "tested": [],
                                                   "cache": {"hits": {}}}}, "meta": {}}))
    b = State(path).get("b")
    assert b.tested is None
    assert b.cache is not None
    assert b.cache.hits == 0
