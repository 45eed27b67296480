"""nightly.builds.run.onename: concurrent filers of one file name (the night's queues)."""

from __future__ import annotations

import datetime as dt
import hashlib
import threading
from pathlib import Path

import pytest

from nightly.builds.run import onename
from nightly.workspace import Day, PackageFile, State


def _day(tmp_path: Path) -> tuple[Day, State, Path]:
    day = Day(tmp_path / "root", dt.date(2024, 5, 1))
    day.create()
    dest_dir = day.package_dir("manywheel", "cpu")
    dest_dir.mkdir(parents=True)
    return day, State(day.state_path), dest_dir


def test_many_queues_filing_one_name_with_other_bytes_one_wins(tmp_path: Path) -> None:
    day, state, dest_dir = _day(tmp_path)
    dest = dest_dir / "demo-1.0-py3-none-any.whl"
    results: dict[str, object] = {}

    def filer(n: int) -> None:
        src = tmp_path / f"out{n}" / dest.name
        src.parent.mkdir()
        src.write_bytes(f"build {n}".encode())
        digest, size = hashlib.sha256(src.read_bytes()).hexdigest(), src.stat().st_size
        try:
            placed = onename.place(day, state, f"b{n}", src, dest, digest)
        except onename.NameTaken as e:
            results[f"b{n}"] = e
            return
        results[f"b{n}"] = placed
        state.update(f"b{n}", packages=[PackageFile(
            name=dest.name, path=str(dest.relative_to(day.path)), size=size, sha256=digest)])
        onename.release([dest])

    threads = [threading.Thread(target=filer, args=(n,)) for n in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [b for b, r in results.items() if isinstance(r, onename.Placed)]
    assert len(won) == 1, results
    assert dest.read_bytes() == f"build {won[0][1:]}".encode()
    for b, r in results.items():
        if b != won[0]:
            assert isinstance(r, onename.NameTaken)
            assert won[0] in str(r)
    assert sorted(p.name for p in dest_dir.iterdir()) == [dest.name]  # no temporary left


def test_identical_bytes_are_shared_and_the_file_is_kept(tmp_path: Path) -> None:
    day, state, dest_dir = _day(tmp_path)
    dest = dest_dir / "x.whl"
    inodes = []
    for n in range(2):
        src = tmp_path / f"o{n}" / "x.whl"
        src.parent.mkdir()
        src.write_bytes(b"same")
        placed = onename.place(day, state, f"b{n}", src, dest, hashlib.sha256(b"same").hexdigest())
        assert placed.new == (n == 0)
        assert not src.exists()  # filed (or the same bytes already are)
        inodes.append(dest.stat().st_ino)
    assert inodes[0] == inodes[1]


def test_a_failed_build_takes_back_only_what_it_linked(tmp_path: Path) -> None:
    day, state, dest_dir = _day(tmp_path)
    src = tmp_path / "a.whl"
    src.write_bytes(b"a")
    placed = onename.place(day, state, "b", src, dest_dir / "a.whl", hashlib.sha256(b"a").hexdigest())
    onename.take_back([placed])
    assert not (dest_dir / "a.whl").exists()
    link = tmp_path / "link.whl"
    link.symlink_to(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="regular file"):
        onename.place(day, state, "b", link, dest_dir / "link.whl", "0" * 64)
