"""The S3 server (moto, on loopback, reached by boto3 over HTTP) goes away in the middle of
the night's uploads: right after it answered the N-th package upload, its listening socket
is closed and connections kept alive are cut.

A short outage is ridden out by the store's retries; a long one is reported (exit 1,
`upload_error` per build, the summary's failed uploads), the packages stay, and `nightly
upload` after the server is back publishes what is missing: every package once, whole, and
index pages that list exactly the objects.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.projects import DATE, run_args
from tests.support.published import check_tree, sha256_of
from tests.support.s3 import StoppableS3, s3_env, s3_objects
from tests.support.wheels import wheel_name, wheel_recipe

MATRIX = """
[matrix.linux.manywheel]
pythons = ["3.6m", "3.7m"]
cudas = ["cpu", "cu100"]
"""
IDS = sorted(f"manywheel_{p}_{c}" for p in ("3.6m", "3.7m") for c in ("cpu", "cu100"))
ENV = s3_env("AKIARELIABILITYTEST1", "reliability-test-secret-key")


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[StoppableS3]:
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    srv = StoppableS3()
    yield srv
    srv.stop()


def project(night_project: Any, tmp_path: Path, srv: StoppableS3, bucket: str) -> Any:
    signals = tmp_path / "p" / "signals"
    p = night_project(
        matrix=MATRIX, recipes={"manywheel": wheel_recipe(signals)},
        extra=(f'[publish]\nurl = "s3://{bucket}/pub"\nendpoint_url = "{srv.endpoint}"\n\n'
               "[smoke]\nenabled = false\n"),
    )
    for bid in IDS:  # 1 MB packages
        (signals / f"{bid}.big").write_text(str(1 << 20))
    return p


def key_of(bid: str) -> str:
    cuda = bid.rsplit("_", 1)[1]
    return f"whl/nightly/{cuda}/{wheel_name(bid, cuda)}"


def check_bucket(srv: StoppableS3, bucket: str, state: dict[str, Any], tmp: Path) -> None:
    """Exactly one whole object per package, with its sha256 metadata; pages consistent."""
    client = srv.client()
    expected = {key_of(b): e["packages"][0]["sha256"] for b, e in state["builds"].items()}
    tree = tmp / f"download-{uuid.uuid4().hex[:6]}"
    for key, obj in s3_objects(client, bucket, "pub/").items():
        rel = key.removeprefix("pub/")
        dest = tree / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        client.download_file(bucket, key, str(dest))
        assert dest.stat().st_size == obj["Size"]
        if rel in expected:
            meta = client.head_object(Bucket=bucket, Key=key)["Metadata"]
            assert meta.get("sha256") == expected[rel], rel
    check_tree(tree, expected)


def test_a_short_outage_is_ridden_out_by_retries(
    s3: StoppableS3, night_project: Any, run_cli: Any, start_cli: Any, tmp_path: Path
) -> None:
    bucket = f"rel-{uuid.uuid4().hex[:10]}"
    s3.start(die_after=1)
    s3.client().create_bucket(Bucket=bucket)
    p = project(night_project, tmp_path, s3, bucket)
    run = start_cli(run_args(p.config), env=ENV)
    s3.wait_dead(timeout=60)
    time.sleep(1.0)  # the server is down for a second, then back on the same port
    s3.start()
    code, out, err = run.wait(timeout=120)
    assert code == 0, (out, err)
    state = p.state()
    assert all(not e.get("upload_error") and e.get("published") for e in state["builds"].values())
    assert len(s3.puts) >= len(IDS)
    check_bucket(s3, bucket, state, tmp_path)


def test_a_long_outage_is_reported_and_nightly_upload_finishes_later(
    s3: StoppableS3, night_project: Any, run_cli: Any, tmp_path: Path
) -> None:
    bucket = f"rel-{uuid.uuid4().hex[:10]}"
    s3.start(die_after=2)
    s3.client().create_bucket(Bucket=bucket)
    p = project(night_project, tmp_path, s3, bucket)
    code, out, err = run_cli(run_args(p.config), env=ENV, timeout=300)
    assert s3.dead.is_set()
    assert code == 1, (out, err)
    assert "Traceback" not in err
    state = p.state()["builds"]
    uploaded = [b for b in IDS if state[b].get("published")]
    failed = [b for b in IDS if state[b].get("upload_error")]
    assert uploaded == IDS[:2], state
    assert failed == IDS[2:], state
    for bid in failed:
        assert key_of(bid) in state[bid]["upload_error"]
        assert "failed" in state[bid]["upload_error"]
        assert state[bid]["status"] == "succeeded"  # the build is fine; its upload is not
    summary = p.summary()
    assert summary["exit_code"] == 1
    assert sorted(summary["failed_uploads"]) == failed
    run_log = (p.day / "logs/master/run.log").read_text()
    for bid in failed:
        assert f"upload failed: s3://{bucket}/pub/{key_of(bid)}" in run_log
        assert "rerun `nightly upload`" in run_log
    # The packages stay where they were built, whole.
    for bid in IDS:
        (pkg,) = state[bid]["packages"]
        assert sha256_of(p.day / pkg["path"]) == pkg["sha256"]

    # The server comes back (same port, same data). Only what is missing goes up.
    s3.start()
    code, out, err = run_cli(["upload", "--config", str(p.config), "--date", DATE], env=ENV, timeout=120)
    assert code == 0, (out, err)
    assert "2 uploaded, 2 already there, 0 failed, 0 index errors" in out
    state = p.state()
    for bid in IDS:
        entry = state["builds"][bid]
        assert not entry.get("upload_error"), entry
        assert entry["published"] == {f"s3://{bucket}/pub/{key_of(bid)}": entry["packages"][0]["sha256"]}
    check_bucket(s3, bucket, state, tmp_path)
    # The night's summary says so now (issue 14 item 5): no failed upload left, exit code 0.
    summary = p.summary()
    assert summary["failed_uploads"] == []
    assert not summary["publish_error"]
    assert summary["exit_code"] == 0
    # Twice is harmless: nothing uploaded again.
    code, out, err = run_cli(["upload", "--config", str(p.config), "--date", DATE], env=ENV, timeout=120)
    assert code == 0, (out, err)
    assert "0 uploaded, 4 already there" in out
