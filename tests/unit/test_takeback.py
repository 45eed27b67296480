"""Taking a finished build's packages back (nightly.builds.run.takeback): nightly's own files
in a folder of its own: the inode the build account wrote adopted only where nothing else can
write it any more (one link, no open writer, made nightly's), else a new file nightly writes;
read without following a link or waiting on a FIFO, bounded; the hash is taken once and
checked again by the upload's own read."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import stat
import struct
import zipfile
from pathlib import Path

import pytest

from nightly.builds.run import collect
from nightly.builds.run.takeback import NotTaken, Taken, take_build, take_one, taken_folder
from nightly.core.matrix import Build
from nightly.errors import PublishError
from nightly.publish import sending
from nightly.stores.folder import FileStore
from nightly.workspace import Day, State


def _built(tmp_path: Path) -> tuple[Path, Path]:
    """A build folder with OUTPUT_DIR holding one wheel, both the account's."""
    folder = tmp_path / "build"
    out = folder / "out"
    out.mkdir(parents=True)
    whl = out / "demo-1.0-py3-none-any.whl"
    whl.write_bytes(b"built bytes" * 1000)
    if os.geteuid() == 0:  # as the build account would leave them
        for p in (folder, out, whl):
            os.chown(p, 65534, 65534)
    return folder, whl


def test_the_taken_package_is_a_new_file_of_nightlys_that_the_account_cannot_change(
    tmp_path: Path,
) -> None:
    folder, whl = _built(tmp_path)
    held = os.open(whl, os.O_RDWR)  # a process of the account holds it open from before
    try:
        taken = take_one(whl, taken_folder(folder))
        digest = hashlib.sha256(taken.read_bytes()).hexdigest()
        os.ftruncate(held, 0)
        os.pwrite(held, b"TAMPERED", 0)
    finally:
        os.close(held)
    assert whl.read_bytes() == b"TAMPERED"  # the account's inode changed...
    assert taken.read_bytes() == b"built bytes" * 1000  # ...nightly's copy did not
    assert hashlib.sha256(taken.read_bytes()).hexdigest() == digest
    st, orig = taken.stat(), whl.stat()
    assert (st.st_dev, st.st_ino) != (orig.st_dev, orig.st_ino)
    assert st.st_nlink == 1
    assert st.st_uid == os.geteuid()
    assert stat.S_IMODE(st.st_mode) == 0o644
    parent = taken.parent.stat()
    assert parent.st_uid == os.geteuid()
    assert stat.S_IMODE(parent.st_mode) == 0o755
    assert taken.parent != whl.parent


def _acl_granting_write(uid: int) -> bytes:
    """A POSIX access ACL (the kernel's xattr form) that gives user `uid` read and write."""
    entries = [(0x01, 6, 0xFFFFFFFF), (0x02, 6, uid), (0x04, 4, 0xFFFFFFFF),
               (0x10, 6, 0xFFFFFFFF), (0x20, 4, 0xFFFFFFFF)]
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


def test_a_package_no_one_else_can_write_is_adopted_made_nightlys_without_a_copy(
    tmp_path: Path,
) -> None:
    folder, whl = _built(tmp_path)
    os.chmod(whl, 0o4777)
    os.setxattr(whl, "system.posix_acl_access", _acl_granting_write(65534))
    was = whl.stat()
    taken = take_one(whl, taken_folder(folder))
    st = taken.stat()
    assert (st.st_dev, st.st_ino) == (was.st_dev, was.st_ino)  # not a byte copied
    assert not whl.exists()  # the build's name for it is gone: one link, nightly's
    assert st.st_nlink == 1
    assert (st.st_uid, st.st_gid) == (os.geteuid(), os.getegid())
    assert stat.S_IMODE(st.st_mode) == 0o644
    assert "system.posix_acl_access" not in os.listxattr(taken)
    assert taken.read_bytes() == b"built bytes" * 1000


def test_a_second_link_or_an_open_writer_gets_a_copy(tmp_path: Path) -> None:
    folder, whl = _built(tmp_path)
    other = folder / "elsewhere.whl"
    os.link(whl, other)  # a name the account could still write through
    taken = take_one(whl, taken_folder(folder))
    assert taken.stat().st_ino != other.stat().st_ino
    assert other.stat().st_nlink == 2
    assert whl.exists()
    # A descriptor opened for writing after the package was written (passed on, say, to a
    # process that outlived the build) is found however little it is used.
    folder, whl = _built(tmp_path / "again")
    held = os.open(whl, os.O_WRONLY)
    try:
        taken = take_one(whl, taken_folder(folder))
    finally:
        os.close(held)
    assert taken.stat().st_ino != whl.stat().st_ino


def test_a_link_a_fifo_or_an_oversized_file_is_not_taken(tmp_path: Path) -> None:
    _, whl = _built(tmp_path)
    dest = tmp_path / "dest"
    dest.mkdir()
    secret = tmp_path / "root-secret"
    secret.write_text("key")
    link = whl.with_name("link-1.0-py3-none-any.whl")
    link.symlink_to(secret)
    with pytest.raises(NotTaken, match=r"link-1\.0-py3-none-any\.whl: cannot be taken"):
        take_one(link, dest)
    fifo = whl.with_name("fifo-1.0-py3-none-any.whl")
    os.mkfifo(fifo)
    with pytest.raises(NotTaken, match="is not a regular file"):
        take_one(fifo, dest)  # returns at once: never waits for a writer
    with pytest.raises(NotTaken, match="more than the 100 a package may have"):
        take_one(whl, dest, limit=100)
    assert sorted(p.name for p in dest.iterdir()) == []


def test_the_hash_taken_back_is_carried_to_filing_without_reading_the_package_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder, whl = _built(tmp_path)
    built = whl.read_bytes()
    [taken], why = take_build([whl], folder, {}, lambda _line: None)
    assert why is None
    assert taken == Taken(path=taken.path, sha256=hashlib.sha256(built).hexdigest(),
                          size=len(built))
    day = Day(tmp_path / "root", dt.date(2024, 1, 2))
    day.create()
    state = State(day.state_path)

    def no_read(path: Path) -> str:
        raise AssertionError(f"{path.name} was read again before filing")

    monkeypatch.setattr(collect, "sha256_file", no_read)
    [filed] = collect.file_packages(day, state, Build(package="manywheel", python="3.12",
                                                      cuda="cpu"), [taken])
    assert (filed.name, filed.sha256, filed.size) == (whl.name, taken.sha256, taken.size)
    assert hashlib.sha256((day.path / filed.path).read_bytes()).hexdigest() == taken.sha256


def test_bytes_changed_after_take_back_are_refused_by_the_uploads_own_read(
    tmp_path: Path,
) -> None:
    folder, whl = _built(tmp_path)
    [taken], _ = take_build([whl], folder, {}, lambda _line: None)
    store = FileStore(tmp_path / "store")
    taken.path.write_bytes(b"changed")
    with pytest.raises(PublishError, match=re.escape(taken.name) + " changed since it was "
                       "built.*not uploaded"):
        sending.put_checked(store, f"whl/{taken.name}", taken.path, taken.sha256)
    assert store.head(f"whl/{taken.name}") is None
    taken.path.unlink()
    os.mkfifo(taken.path)  # never waited on
    with pytest.raises(PublishError, match="not a regular file"):
        sending.put_checked(store, f"whl/{taken.name}", taken.path, taken.sha256)


def test_the_one_hash_is_of_the_bytes_kept_normalised_or_not(tmp_path: Path) -> None:
    """Hashed as copied; a wheel nightly's normalising rewrites is hashed as rewritten."""
    for epoch in ("", "1700000000"):
        folder = tmp_path / f"build{epoch}"
        (folder / "out").mkdir(parents=True)
        whl = folder / "out" / "demo-1.0-py3-none-any.whl"
        with zipfile.ZipFile(whl, "w") as z:  # not canonical: names out of order
            z.writestr("demo/b.py", b"b = 1\n")
            z.writestr("demo/a.py", b"a = 1\n")
        built = hashlib.sha256(whl.read_bytes()).hexdigest()
        lines: list[bytes] = []
        taken, why = take_build([whl], folder, {"SOURCE_DATE_EPOCH": epoch}, lines.append)
        assert why is None
        [t] = taken
        assert t.sha256 == hashlib.sha256(t.path.read_bytes()).hexdigest()
        assert t.size == t.path.stat().st_size
        assert (t.sha256 == built) == (epoch == ""), epoch
        assert f"{whl.name} sha256 {t.sha256}".encode() in b"".join(lines)
