"""The S3 store against moto's S3 server on loopback (boto3 over HTTP), and the file://
store doing the same things the same way."""

from __future__ import annotations

import base64
import hashlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import pytest

from nightly.errors import ConfigError, PublishError
from nightly.index import list_index_prefixes
from nightly.stores import (
    FileStore,
    PreconditionFailed,
    S3Store,
    Store,
    file_sha256,
    open_store,
)
from nightly.stores.layout import INDEX_PREFIXES
from tests.support.fixtures import MOTO_ACCESS_KEY, MOTO_SECRET_KEY
from tests.support.net import free_port
from tests.support.s3 import Moto

ACCESS_KEY = MOTO_ACCESS_KEY  # the `moto` fixture's server takes these
SECRET_KEY = MOTO_SECRET_KEY
MB = 1024 * 1024


def s3(moto: Moto, bucket: str, **kw: Any) -> S3Store:
    store = open_store(f"s3://{bucket}/pub", endpoint_url=moto.endpoint, **kw)
    assert isinstance(store, S3Store)
    return store


def raw(moto: Moto) -> Any:
    return boto3.client("s3", endpoint_url=moto.endpoint)


def make_file(path: Path, size: int) -> str:
    path.write_bytes(os.urandom(size))
    return file_sha256(path)


def test_put_head_metadata_and_native_checksum(moto: Moto, bucket: str, tmp_path: Path) -> None:
    store = s3(moto, bucket, acl="public-read")
    src = tmp_path / "demo-1.0.0.dev20261121+cpu-py3-none-any.whl"
    digest = make_file(src, 1000)
    key = f"whl/nightly/cpu/{src.name}"
    store.put(key, src, digest)
    info = store.head(key)
    assert info is not None
    assert (info.key, info.size, info.sha256) == (key, 1000, digest)
    r = raw(moto).head_object(Bucket=bucket, Key=f"pub/{key}", ChecksumMode="ENABLED")
    assert r["Metadata"] == {"sha256": digest}
    assert base64.b64decode(r["ChecksumSHA256"]).hex() == digest
    grants = raw(moto).get_object_acl(Bucket=bucket, Key=f"pub/{key}")["Grants"]
    assert any(g["Grantee"].get("URI", "").endswith("AllUsers") for g in grants)
    assert store.head("whl/nightly/cpu/missing.whl") is None


def test_multipart_upload_keeps_sha256(moto: Moto, bucket: str, tmp_path: Path) -> None:
    store = s3(moto, bucket, multipart_threshold=5 * MB, multipart_chunksize=5 * MB)
    src = tmp_path / "libtorch-shared-with-deps-1.0.0.dev20261121+cpu.zip"
    digest = make_file(src, 12 * MB)
    key = f"libtorch/nightly/cpu/{src.name}"
    before = store.requests
    store.put(key, src, digest)
    # create + 3 parts + complete
    assert store.requests - before == 5
    etag = raw(moto).head_object(Bucket=bucket, Key=f"pub/{key}")["ETag"]
    assert etag.endswith('-3"')
    info = store.head(key)
    assert info is not None
    assert info.sha256 == digest
    out = tmp_path / "back.zip"
    store.get(key, out)
    assert file_sha256(out) == digest


def test_list_is_paginated_and_relative(moto: Moto, bucket: str) -> None:
    client = raw(moto)
    keys = [f"pub/whl/nightly/cpu/p-1.0.{n}-py3-none-any.whl" for n in range(1100)]
    keys += ["pub/whl/nightly/cu126/x.whl", "other/whl/nightly/cpu/y.whl"]
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda k: client.put_object(Bucket=bucket, Key=k, Body=b"x"), keys))
    store = s3(moto, bucket)
    before = store.requests
    listed = [o.key for o in store.list("whl/nightly/cpu/")]
    assert store.requests - before == 2  # 1000 + 100
    assert listed == sorted(k[4:] for k in keys[:1100])
    assert [o.key for o in store.list("whl/")][-1] == "whl/nightly/cu126/x.whl"


def test_split_listing_is_the_whole_listing(moto: Moto, bucket: str) -> None:
    """`list_level` (a "/" delimiter, paginated) and the index's split listing give what one
    plain listing gives, in the same order."""
    client = raw(moto)
    keys = [f"pub/whl/nightly/p-1.0.{n}-py3-none-any.whl" for n in range(1050)]
    keys += ["pub/whl/nightly/cpu/a.whl", "pub/whl/nightly/cpu/torch/index.html", "pub/whl/test/cpu/b.whl",
             "pub/whl/c.whl", "pub/libtorch/nightly/cpu/d.zip", "pub/whl-other/e.whl", "other/whl/f.whl"]
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda k: client.put_object(Bucket=bucket, Key=k, Body=b"x"), keys))
    store = s3(moto, bucket)
    objects, subs = store.list_level("whl/nightly/")
    assert len(objects) == 1050
    assert subs == ["whl/nightly/cpu/"]
    assert store.list_level("whl/") == ([o for o in store.list("whl/c.whl")], ["whl/nightly/", "whl/test/"])
    whole = sorted((o.key for p in INDEX_PREFIXES for o in store.list(p)), key=str.encode)
    assert [o.key for o in list_index_prefixes(store, workers=4)] == whole
    assert len(whole) == len(keys) - 2


def test_copy_is_server_side_and_keeps_metadata(moto: Moto, bucket: str, tmp_path: Path) -> None:
    store = s3(moto, bucket)
    src = tmp_path / "demo-2.1.0-py3-none-any.whl"
    digest = make_file(src, 2 * MB)
    store.put(f"whl/test/cpu/{src.name}", src, digest)
    before = store.requests
    store.copy(f"whl/test/cpu/{src.name}", f"whl/cpu/{src.name}")
    assert store.requests - before == 2  # HEAD + CopyObject: no bytes through us
    info = store.head(f"whl/cpu/{src.name}")
    assert info is not None
    assert (info.size, info.sha256) == (2 * MB, digest)
    with pytest.raises(PublishError, match="no such object"):
        store.copy("whl/test/cpu/missing.whl", "whl/cpu/missing.whl")


def test_delete(moto: Moto, bucket: str, tmp_path: Path) -> None:
    store = s3(moto, bucket)
    src = tmp_path / "f.whl"
    store.put("whl/nightly/cpu/f.whl", src, make_file(src, 10))
    store.delete("whl/nightly/cpu/f.whl")
    assert store.head("whl/nightly/cpu/f.whl") is None
    store.delete("whl/nightly/cpu/f.whl")  # deleting twice is fine, as on S3


def test_conditional_writes(moto: Moto, bucket: str) -> None:
    store = s3(moto, bucket)
    key = "whl/nightly/cpu/.index.json"
    etag = store.put_bytes(key, b"{1}", "application/json", if_none_match=True)
    with pytest.raises(PreconditionFailed):
        store.put_bytes(key, b"{2}", "application/json", if_none_match=True)
    etag2 = store.put_bytes(key, b"{3}", "application/json", if_match=etag)
    with pytest.raises(PreconditionFailed):
        store.put_bytes(key, b"{4}", "application/json", if_match=etag)
    assert store.get_bytes(key) == (b"{3}", etag2)
    assert store.get_bytes("whl/nightly/cpu/none.json") is None
    r = raw(moto).head_object(Bucket=bucket, Key=f"pub/{key}")
    assert r["ContentType"] == "application/json"


def test_bad_keys_are_rejected(moto: Moto, bucket: str) -> None:
    store = s3(moto, bucket)
    for key in ("", "/abs", "a//b", "a/../b", "a/./b", "tab\there"):
        with pytest.raises(PublishError, match="invalid object key"):
            store.head(key)


def test_unreachable_server_fails_without_credentials(moto: Moto, bucket: str) -> None:
    dead = f"http://{ACCESS_KEY}:{SECRET_KEY}@127.0.0.1:{free_port()}"
    store = S3Store(bucket, "pub", endpoint_url=dead, attempts=2, backoff=0.01, botocore_attempts=1)
    started = time.monotonic()
    with pytest.raises(PublishError) as exc:
        store.head("whl/nightly/cpu/x.whl")
    assert time.monotonic() - started < 10
    message = str(exc.value)
    assert "head s3://" in message
    assert SECRET_KEY not in message
    assert ACCESS_KEY not in message
    assert exc.value.__cause__ is None
    with pytest.raises(ConfigError) as cfg:
        open_store(f"s3://{ACCESS_KEY}:{SECRET_KEY}@{bucket}/pub")
    assert SECRET_KEY not in str(cfg.value)


def test_server_down_then_back(moto: Moto, bucket: str, tmp_path: Path) -> None:
    """Stopped mid-way: bounded retries, then PublishError; restarted: the retry succeeds."""
    src = tmp_path / "demo-1.0-py3-none-any.whl"
    digest = make_file(src, 1000)
    quick = s3(moto, bucket, attempts=2, backoff=0.01, botocore_attempts=1)
    quick.put("whl/nightly/cpu/a.whl", src, digest)
    moto.server.stop()
    try:
        with pytest.raises(PublishError) as exc:
            quick.put("whl/nightly/cpu/b.whl", src, digest)
        assert SECRET_KEY not in str(exc.value)
        assert ACCESS_KEY not in str(exc.value)
        # A patient store rides out a restart that happens while it is retrying.
        patient = s3(moto, bucket, attempts=8, backoff=0.2, botocore_attempts=1)
        timer = threading.Timer(0.5, moto.restart)
        timer.start()
        patient.put("whl/nightly/cpu/b.whl", src, digest)
        timer.join()
    finally:
        if not moto.server._thread or not moto.server._thread.is_alive():
            moto.restart()
    info = quick.head("whl/nightly/cpu/b.whl")
    assert info is not None
    assert info.sha256 == digest


def test_unknown_profile_is_a_config_error(moto: Moto) -> None:
    with pytest.raises(ConfigError, match="profile"):
        open_store("s3://bkt/p", endpoint_url=moto.endpoint, profile="nope")


def test_unsupported_destination() -> None:
    with pytest.raises(ConfigError, match="unsupported destination"):
        open_store("ftp://host/path")
    with pytest.raises(ConfigError, match="must be local"):
        open_store("file://otherhost/path")
    with pytest.raises(ConfigError, match="absolute"):
        open_store("file:relative/path")


# --------------------------------------------------------------------------- parity


@pytest.fixture(params=[pytest.param("s3", marks=pytest.mark.s3), "file"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "file":
        return open_store((tmp_path / "mirror").as_uri())
    moto_: Moto = request.getfixturevalue("moto")
    return s3(moto_, request.getfixturevalue("bucket"))


def test_both_stores_behave_alike(any_store: Store, tmp_path: Path) -> None:
    store = any_store
    src = tmp_path / "demo-1.0.0.dev20261121+cpu-py3-none-any.whl"
    digest = make_file(src, 3000)
    keys = [
        "whl/nightly/cpu/demo-1.0.0.dev20261121+cpu-py3-none-any.whl",
        "whl/nightly/cpu/demo/index.html",
        "whl/nightly/cpu2/z.whl",
        "whl/nightly/cpu.txt",
        "whl/nightly/cpu/a b&c.whl",
    ]
    for key in keys:
        store.put(key, src, digest)
    assert [o.key for o in store.list("whl/nightly/cpu")] == sorted(keys, key=str.encode)
    assert [o.key for o in store.list("whl/nightly/cpu/")] == sorted(keys[0:2] + keys[4:])
    assert [o.key for o in store.list("whl/nightly/cpu/d")] == keys[0:2]  # "-" < "/"
    info = store.head(keys[0])
    assert info is not None
    assert (info.size, info.sha256) == (3000, digest)
    assert info.last_modified is not None
    store.copy(keys[0], "whl/cpu/demo.whl")
    copied = store.head("whl/cpu/demo.whl")
    assert copied is not None
    assert copied.sha256 == digest
    assert store.ensure("whl/cpu/demo.whl", src, digest) is False
    etag = store.put_bytes("whl/cpu/index.html", b"<html>", "text/html")
    with pytest.raises(PreconditionFailed):
        store.put_bytes("whl/cpu/index.html", b"<x>", "text/html", if_none_match=True)
    got = store.get_bytes("whl/cpu/index.html")
    assert got == (b"<html>", etag)
    page = store.head("whl/cpu/index.html")
    assert page is not None
    assert page.sha256 == hashlib.sha256(b"<html>").hexdigest()
    store.delete("whl/cpu/demo.whl")
    assert store.head("whl/cpu/demo.whl") is None
    out = tmp_path / "out" / "x.whl"
    store.get(keys[0], out)
    assert file_sha256(out) == digest
    assert store.requests > 0


def test_file_store_is_atomic_and_hides_its_bookkeeping(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "mirror")
    store.put_bytes("whl/nightly/cpu/index.html", b"old", "text/html")
    stop = threading.Event()
    seen: set[bytes] = set()

    def reader() -> None:
        while not stop.is_set():
            got = store.get_bytes("whl/nightly/cpu/index.html")
            assert got is not None
            seen.add(got[0])

    t = threading.Thread(target=reader)
    t.start()
    for n in range(200):
        store.put_bytes("whl/nightly/cpu/index.html", b"A" * 10000 if n % 2 else b"B" * 20000, "t")
    stop.set()
    t.join()
    assert seen <= {b"old", b"A" * 10000, b"B" * 20000}
    assert [o.key for o in store.list("")] == ["whl/nightly/cpu/index.html"]
    with pytest.raises(PublishError, match="reserved"):
        store.head(".nightly-store/meta/x")


def test_published_pages_reports_and_logs_carry_cache_control(
    moto: Moto, bucket: str, tmp_path: Path
) -> None:
    """Index pages and the night's report with its logs: short-lived in the nightly channel,
    longer in the release channel (issue 29), as S3 serves them."""
    import datetime as dt

    from nightly.index import regenerate
    from nightly.publish.reports import TAIL_BYTES, publish_report
    from nightly.report.html import render_html
    from nightly.workspace import Day, write_json

    store = s3(moto, bucket)
    for folder in ("whl/nightly/cpu", "whl/cpu"):
        src = tmp_path / f"demo-1.0-py3-none-any-{folder.count('/')}.whl"
        name = "demo-1.0-py3-none-any.whl"
        store.put(f"{folder}/{name}", src, make_file(src, 100))
        regenerate(store, [folder], full=True)
    day = Day(tmp_path / "root", dt.date(2026, 11, 24))
    day.create()
    write_json(day.state_path, {"builds": {"a": {"status": "failed", "log": "logs/failed/a.log"},
                                           "b": {"status": "succeeded", "log": "logs/succeeded/b.log"}}})
    (day.failed / "a.log").write_text("nightly build a\nerror: broke\n")
    (day.succeeded / "b.log").write_text("nightly build b\n" + ("x" * 80 + "\n") * (TAIL_BYTES // 40))
    for channel in ("nightly", "release"):
        publish_report(store, day, None,
                       lambda base, notes: render_html(day, None, link_base=base, notes=notes),
                       channel=channel, machine="m", log=lambda _: None)

    def cache_control(key: str) -> str:
        return str(raw(moto).head_object(Bucket=bucket, Key=f"pub/{key}").get("CacheControl"))

    short, long = "public, max-age=300", "public, max-age=3600"
    assert cache_control("whl/nightly/cpu/index.html") == short
    assert cache_control("whl/cpu/index.html") == long
    assert cache_control("whl/nightly/reports/2026_11_24_m.html") == short
    assert cache_control("whl/reports/2026_11_24_m.html") == long
    assert cache_control("whl/nightly/reports/2026_11_24_m/logs/failed/a.log") == short
    page = raw(moto).get_object(Bucket=bucket, Key="pub/whl/nightly/reports/2026_11_24_m.html")
    html = page["Body"].read().decode()
    assert 'href="2026_11_24_m/logs/failed/a.log"' in html
    assert "Cut (too large): b" in html
    tail = raw(moto).get_object(Bucket=bucket, Key="pub/whl/nightly/reports/2026_11_24_m/logs/"
                                "succeeded/b.log")["Body"].read()
    assert tail.startswith(b"[nightly] this log was cut")
    assert len(tail) <= TAIL_BYTES + 200
