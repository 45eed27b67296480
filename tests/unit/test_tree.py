"""nightly.files' tree helpers: any depth (a recursive walk dies of RecursionError at ~1,000
levels, a path-based one of ENAMETOOLONG), no link followed, one folder open at a time, and a
folder a leftover process still writes in emptied again (bounded)."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from nightly.files import remove_tree, walk_tree

# Past recursion's limit (1,000 frames) and past PATH_MAX (4,096 bytes) with 3-byte names:
# 1,500 levels, a path of 6,000 bytes (3,000 levels of 2 bytes took twice as long to make and
# remove, for nothing more checked: the test says both limits are passed).
DEPTH = 1500
PATH_MAX = 4096


def chain(top: Path, depth: int, name: str = "ddd") -> str:
    """`depth` nested folders under `top`, made relative to an open folder (the path is
    longer than PATH_MAX); a file every 500 levels. The relative path of the deepest."""
    top.mkdir()
    fd = os.open(top, os.O_RDONLY)
    try:
        for i in range(depth):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = child
            if i % 500 == 0:
                os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    return "/".join([name] * depth)


@pytest.fixture
def few_fds() -> Iterator[None]:
    """At most 64 open files while the test runs: a walk holding a folder open per level
    (3,000 here) could not finish."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64 + len(os.listdir("/proc/self/fd")), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_tree_deeper_than_recursion_and_path_max_is_walked_and_removed(
    tmp_path: Path, few_fds: None
) -> None:
    top = tmp_path / "deep"
    try:
        deepest = chain(top, DEPTH)
        assert sys.getrecursionlimit() < DEPTH
        assert len(str(top / deepest)) > PATH_MAX
        seen = {e.rel: e for e in walk_tree(top)}
        assert deepest in seen
        assert seen[deepest].is_dir
        assert len([r for r, e in seen.items() if e.is_dir]) == DEPTH
        assert len([r for r, e in seen.items() if e.is_file]) == DEPTH // 500
        assert all(r.rsplit("/", 1)[-1] == e.name for r, e in seen.items())
        remove_tree(top)
        assert not top.exists()
    finally:
        # pytest's removal of old runs' folders (shutil.rmtree, recursive) dies of
        # RecursionError in a tree this deep: a failed test must not leave it behind.
        # remove_tree is what is tested: when it is what failed, the tree stays.
        if top.exists():
            with contextlib.suppress(OSError):
                remove_tree(top)


def test_links_are_never_followed_and_closed_folders_are_opened_up(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("mine\n")
    top = tmp_path / "build"
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "to-outside").symlink_to(outside)
    (top / "a" / "b" / "file").write_text("x")
    (top / "shut").mkdir()
    (top / "shut" / "inside").write_text("y")
    os.chmod(top / "shut", 0)
    os.chmod(top / "a" / "b", 0o500)  # read-only: its file cannot be unlinked as it is
    found = {e.rel: e for e in walk_tree(top, skip=lambda rel: rel == "shut")}
    assert sorted(found) == ["a", "a/b", "a/b/file", "a/to-outside"]
    assert stat.S_ISLNK(found["a/to-outside"].st.st_mode)
    remove_tree(top)
    assert not top.exists()
    assert (outside / "keep").read_text() == "mine\n"
    link = tmp_path / "link"
    link.symlink_to(outside)
    remove_tree(link)  # the link goes, never what it points to
    assert not link.is_symlink()
    assert (outside / "keep").exists()
    remove_tree(tmp_path / "absent" / "too")  # nothing there: nothing to do


def test_a_folder_a_leftover_process_still_writes_in_is_emptied_again_after_killing_it(
    tmp_path: Path,
) -> None:
    top = tmp_path / "build"
    venv = top / "smoke" / "venv"
    venv.mkdir(parents=True)
    stop = threading.Event()

    def writer() -> None:  # a pip still filling the venv after its nightly died
        i = 0
        while not stop.is_set():
            try:
                (venv / f"f{i}").write_text("x")
            except OSError:
                return
            i += 1

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    def kill() -> None:
        stop.set()
        t.join()

    remove_tree(top, before_retry=kill)
    assert not top.exists()
    stop.set()
    t.join()


@pytest.mark.timeout(120)  # a hang is the failure this test looks for
def test_a_writer_that_is_never_stopped_ends_in_an_error_not_a_hang(tmp_path: Path) -> None:
    top = tmp_path / "build"
    (top / "w").mkdir(parents=True)
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            try:
                (top / "w").mkdir(exist_ok=True)
                (top / "w" / f"f{i}").write_text("x")
            except OSError:
                if not top.exists():
                    return
            i += 1

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        err = None
        try:
            remove_tree(top)  # gone, or given up after a bounded number of passes
        except OSError as e:
            err = e.errno
        assert err in (None, errno.ENOTEMPTY)
    finally:
        stop.set()
        t.join()
