"""The folder store below its root: no symlink followed, only regular files read, reads capped.

What a host that can write a shared staging folder could plant there: a symlink to a secret
file, a symlinked folder pointing elsewhere, a FIFO, a symlink to /dev/zero, a file larger
than its writer reported. Nothing of it may be read, written through or deleted through.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from nightly.cluster.stagedlog import read_staged_log
from nightly.cluster.staging import StagingDay, read_json
from nightly.errors import ObjectTooLarge, PublishError, UnsafeEntry
from nightly.redact import scrub_staged
from nightly.stores import FileStore

SECRET = (b"-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n"
          b"-----END PRIVATE KEY-----\n")


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    f = tmp_path / "outside" / "orchestrator-key.pem"
    f.parent.mkdir()
    f.write_bytes(SECRET)
    return f


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    s = FileStore(tmp_path / "staging", label="staging")
    s.put_bytes("day/a/log.txt", b"hello\n", "text/plain")
    return s


def test_a_symlinked_file_is_never_read(store: FileStore, secret: Path, tmp_path: Path) -> None:
    (store.root / "day" / "a" / "key.txt").symlink_to(secret)
    key = "day/a/key.txt"
    reads: list[Callable[[], object]] = [lambda: store.get_bytes(key), lambda: store.read_range(key, 0, 100),
             lambda: store.read_prefix(key, 100), lambda: store.head(key),
             lambda: store.get(key, tmp_path / "got"), lambda: store.copy(key, "day/b")]
    for read in reads:
        with pytest.raises(UnsafeEntry, match=r"symlink in staging: .*key\.txt is a symbolic link"):
            read()
    assert not (tmp_path / "got").exists()
    assert store.head("day/b") is None
    # It is listed as itself (its own size, not the target's), and deleting it removes the
    # link alone.
    (info,) = [o for o in store.list("day/a/") if o.key == key]
    assert info.size == len(str(secret))
    store.delete(key)
    assert not (store.root / key).is_symlink()
    assert secret.read_bytes() == SECRET


def test_nothing_goes_through_a_symlinked_folder(store: FileStore, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    (outside / "builds" / "x").mkdir(parents=True)
    (outside / "builds" / "x" / "keep.txt").write_bytes(b"keep")
    (store.root / "day2").symlink_to(outside)
    with pytest.raises(UnsafeEntry, match=r"symlink in staging: .*day2 is a symbolic link"):
        list(store.list("day2/"))
    with pytest.raises(UnsafeEntry, match="symlink in staging"):
        store.get_bytes("day2/builds/x/keep.txt")
    with pytest.raises(UnsafeEntry, match="symlink in staging"):
        store.delete("day2/builds/x/keep.txt")
    with pytest.raises(UnsafeEntry, match="symlink in staging"):
        store.put_bytes("day2/builds/x/new.txt", b"new", "text/plain")
    assert sorted(p.name for p in outside.rglob("*")) == ["builds", "keep.txt", "x"]
    # Seen from the root, the link is one entry: dropping the whole store removes the link,
    # never what it points to.
    keys = [o.key for o in store.list("")]
    assert sorted(keys) == ["day/a/log.txt", "day2"]
    for k in keys:
        store.delete(k)
    assert (outside / "builds" / "x" / "keep.txt").read_bytes() == b"keep"
    assert not (store.root / "day2").exists()


def test_a_symlinked_bookkeeping_folder_is_not_written_through(tmp_path: Path) -> None:
    root, outside = tmp_path / "staging", tmp_path / "elsewhere"
    root.mkdir()
    outside.mkdir()
    (root / ".nightly-store").symlink_to(outside)
    store = FileStore(root, label="staging")
    with pytest.raises(UnsafeEntry, match=r"symlink in staging: .*\.nightly-store"):
        store.put_bytes("day/x", b"data", "text/plain")
    assert list(outside.iterdir()) == []


def test_fifos_and_devices_are_refused_at_once(store: FileStore, tmp_path: Path) -> None:
    os.mkfifo(store.root / "day" / "a" / "fifo")
    (store.root / "day" / "a" / "zero").symlink_to("/dev/zero")
    with pytest.raises(UnsafeEntry, match=r"not a regular file in staging: .*fifo is a FIFO"):
        store.get_bytes("day/a/fifo")  # would block forever if it were opened
    with pytest.raises(UnsafeEntry, match="not a regular file in staging"):
        store.get("day/a/fifo", tmp_path / "got", max_bytes=10)
    with pytest.raises(UnsafeEntry, match="symlink in staging"):
        store.get("day/a/zero", tmp_path / "got")  # would fill the disk
    with pytest.raises(UnsafeEntry, match="symlink in staging"):
        store.get_bytes("day/a/zero")
    assert not (tmp_path / "got").exists()


def test_reads_are_capped(store: FileStore, tmp_path: Path) -> None:
    data = b"x" * 5000
    store.put_bytes("day/a/pkg.whl", data, "application/zip")
    out = tmp_path / "out" / "pkg.whl"
    with pytest.raises(ObjectTooLarge, match="holds 5000 bytes or more, more than the 4999") as e:
        store.get("day/a/pkg.whl", out, max_bytes=4999)
    assert e.value.size == 5000
    assert not out.exists()
    assert list(out.parent.iterdir()) == []  # no partial download left
    store.get("day/a/pkg.whl", out, max_bytes=5000)
    assert out.read_bytes() == data
    with pytest.raises(ObjectTooLarge):
        store.get_bytes("day/a/pkg.whl", max_bytes=10)
    assert store.get_bytes("day/a/pkg.whl", max_bytes=5000) == (
        data, f'"{hashlib.sha256(data).hexdigest()}"')
    assert store.read_prefix("day/a/pkg.whl", 3) == (b"xxx", 5000)
    assert store.read_prefix("day/a/missing", 3) is None


def test_keys_cannot_leave_the_root(store: FileStore) -> None:
    for key in ("../x", "day/../../x", "/etc/passwd", ".nightly-store/meta/x"):
        with pytest.raises(PublishError):
            store.get_bytes(key)


# ---------------------------------------------------------------------------- staging


def test_a_staged_log_is_cut_with_a_note(store: FileStore) -> None:
    body = b"".join(b"line %d\n" % i for i in range(30000))  # ~240 kB
    store.put_bytes("day/builds/b/t/log.txt", body, "text/plain")
    log = read_staged_log(store, "day/builds/b/t/", {"log.txt"}, limit=100_000)
    assert not log.whole
    assert len(log.raw) == 100_000
    assert b"this log was cut: staging holds %d bytes, more than the 100000" % len(body) in log.text
    assert log.text.startswith(b"line 0\n")
    assert log.text.endswith(b"line 29999\n")  # the end (where a build says why it failed)
    whole = read_staged_log(store, "day/builds/b/t/", {"log.txt"}, limit=len(body))
    assert whole.whole
    assert whole.raw == whole.text == body


def test_streamed_chunks_are_capped_in_all(store: FileStore) -> None:
    for n in range(1, 6):
        store.put_bytes(f"day/builds/b/t/log/{n:06d}", b"%d" % n * 100, "text/plain")
    names = {f"log/{n:06d}" for n in range(1, 6)}
    log = read_staged_log(store, "day/builds/b/t/", names, limit=250)
    assert log.raw == b"1" * 100 + b"2" * 100 + b"3" * 50
    assert b"this log was cut" in log.text


def test_a_symlinked_log_is_reported_never_read(store: FileStore, secret: Path) -> None:
    (store.root / "day" / "builds" / "b" / "t").mkdir(parents=True)
    (store.root / "day" / "builds" / "b" / "t" / "log.txt").symlink_to(secret)
    log = read_staged_log(store, "day/builds/b/t/", {"log.txt"})
    assert b"this attempt's log was not read: symlink in staging" in log.text
    assert SECRET[30:60] not in log.text
    staging = StagingDay(store, "day")
    assert "symlink in staging" in staging.unsafe("b", "t")
    assert staging.unsafe("a", "t") == ""
    assert read_json(store, "day/builds/b/t/log.txt") is None


def test_staged_text_is_scrubbed() -> None:
    text = (b"step 1\nAWS_SECRET_ACCESS_KEY=abc123\nexport PYPI_TOKEN=pypi-xyz\nPATH=/bin\n"
            + SECRET + b"cloning https://bob:hunter2@git.example.com/x\nseal 0123456789abcdef\n"
            + b"-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n" + b"\xff\xfe raw bytes\n")
    out = scrub_staged(text, ["0123456789abcdef"])
    assert b"abc123" not in out
    assert b"pypi-xyz" not in out
    assert b"AWS_SECRET_ACCESS_KEY=****" in out
    assert b"PATH=/bin" in out
    assert b"MIGHAgEAMBMG" not in out
    assert b"MIIEow" not in out
    assert b"PRIVATE KEY-----" not in out
    assert out.count(b"a PEM block (BEGIN") == 2
    assert b"hunter2" not in out
    assert b"https://***@git.example.com/x" in out
    assert b"0123456789abcdef" not in out
    assert b"\xff\xfe raw bytes\n" in out  # undecodable bytes pass through
    assert out.startswith(b"step 1\n")
