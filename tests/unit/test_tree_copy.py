"""nightly.files.copy.copy_tree, the night's copies of a project's tree (its source into the
day, a slot and a build user's area, the wheelhouse's look at it) and the cluster's staged
tarball of it: any depth (shutil.copytree dies of RecursionError at ~1,000 levels, a
path-based walk of ENAMETOOLONG past PATH_MAX), one folder of each side open at a time, no
link followed, modes and times kept, FIFOs, sockets and devices left out."""

from __future__ import annotations

import os
import socket
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nightly.cluster.staging import make_tarball
from nightly.files import remove_tree, sha256_file, walk_tree
from nightly.files.copy import copy_tree
from tests.unit.test_tree import chain, few_fds

__all__ = ["few_fds"]  # the fixture, used by name

# Past recursion's limit (~1,000) and, with chain's 3-byte levels, past PATH_MAX (4,096);
# half of test_tree's depth: each of these trees is made and removed again (seconds each).
DEPTH = 1500


@pytest.fixture
def deep_cleanup(tmp_path: Path) -> Iterator[None]:
    """The deep trees removed after the test: pytest's own clean-up of old tmp_paths
    recurses (a RecursionError at the exit of a later session)."""
    yield
    for entry in list(tmp_path.iterdir()):
        remove_tree(entry)


def test_a_tree_deeper_than_recursion_and_path_max_is_copied(
    tmp_path: Path, few_fds: None, deep_cleanup: None
) -> None:
    src, dest = tmp_path / "src", tmp_path / "out" / "copy"
    deepest = chain(src, DEPTH)
    copy_tree(src, dest)
    want = {e.rel: (e.is_dir, e.st.st_size if e.is_file else 0) for e in walk_tree(src)}
    got = {e.rel: (e.is_dir, e.st.st_size if e.is_file else 0) for e in walk_tree(dest)}
    assert deepest in got
    assert got == want
    assert len([r for r, (d, _) in got.items() if not d]) == DEPTH // 500


def test_links_stay_links_modes_and_times_are_kept_and_special_files_left_out(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    (outside / "secret").mkdir(parents=True)
    (outside / "secret" / "key").write_text("never copied\n")
    src = tmp_path / "src"
    (src / "pkg" / "sub").mkdir(parents=True)
    (src / "pkg" / "run.sh").write_text("echo hi\n")
    os.chmod(src / "pkg" / "run.sh", 0o750)
    (src / "pkg" / "sub" / "data.txt").write_text("d" * 5000)
    os.utime(src / "pkg" / "sub" / "data.txt", (1_000_000, 1_000_000))
    (src / "to-outside").symlink_to(outside / "secret")
    (src / "dangling").symlink_to("no/such/file")
    os.mkfifo(src / "pkg" / "fifo")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(src / "pkg" / "sock"))
        os.chmod(src / "pkg" / "sub", 0o555)  # a read-only folder is filled, then closed
        os.utime(src / "pkg" / "sub", (2_000_000, 2_000_000))
        dest = tmp_path / "copy"
        copy_tree(src, dest, ignore=lambda name: name == "run.sh.bak")
    assert (dest / "pkg" / "run.sh").read_text() == "echo hi\n"
    assert stat.S_IMODE(os.stat(dest / "pkg" / "run.sh").st_mode) == 0o750
    assert (dest / "pkg" / "sub" / "data.txt").read_text() == "d" * 5000
    assert os.stat(dest / "pkg" / "sub" / "data.txt").st_mtime == 1_000_000
    assert stat.S_IMODE(os.stat(dest / "pkg" / "sub").st_mode) == 0o555
    assert os.stat(dest / "pkg" / "sub").st_mtime == 2_000_000
    assert os.readlink(dest / "to-outside") == str(outside / "secret")  # the link, as it was
    assert os.readlink(dest / "dangling") == "no/such/file"
    assert not (dest / "to-outside").resolve().is_relative_to(dest)
    assert sorted(os.listdir(dest / "pkg")) == ["run.sh", "sub"]  # no FIFO, no socket
    assert not (tmp_path / "copy" / "secret").exists()


def test_ignored_names_are_left_out_at_every_level_and_the_destination_must_be_new(
    tmp_path: Path,
) -> None:
    src = tmp_path / "src"
    (src / "a" / "__pycache__").mkdir(parents=True)
    (src / "a" / "__pycache__" / "m.pyc").write_bytes(b"x")
    (src / "a" / "m.py").write_text("x = 1\n")
    (src / "__pycache__").mkdir()
    copy_tree(src, tmp_path / "copy", ignore=lambda name: name == "__pycache__")
    assert sorted(e.rel for e in walk_tree(tmp_path / "copy")) == ["a", "a/m.py"]
    with pytest.raises(FileExistsError):
        copy_tree(src, tmp_path / "copy")
    link = tmp_path / "link-to-src"
    link.symlink_to(src)
    with pytest.raises(NotADirectoryError):  # a link is not followed
        copy_tree(link, tmp_path / "other")


def test_the_cluster_tarball_of_a_deep_tree_is_made_and_the_same_each_time(
    tmp_path: Path, few_fds: None, deep_cleanup: None
) -> None:
    src = tmp_path / "src"
    deepest = chain(src, DEPTH)
    (src / "link").symlink_to("dd")
    os.mkfifo(src / "fifo")
    sha1 = make_tarball(src, tmp_path / "one.tar.gz")
    assert make_tarball(src, tmp_path / "two.tar.gz") == sha1
    with tarfile.open(tmp_path / "one.tar.gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members[deepest].isdir()
    assert members["link"].issym()
    assert members["link"].linkname == "dd"
    assert "fifo" not in members
    assert all(m.uid == 0 and not m.uname for m in members.values())


def test_a_folder_store_lists_a_deep_tree_another_host_wrote(
    tmp_path: Path, few_fds: None, deep_cleanup: None
) -> None:
    """A folder store (a shared mirror, the cluster's staging) walked its tree recursively,
    one descriptor held per level: a deep tree in it ended the listing in RecursionError
    (or, at 64 open files, EMFILE)."""
    from nightly.stores import FileStore

    root = tmp_path / "store"
    root.mkdir()
    deepest = chain(root / "whl", DEPTH)
    store = FileStore(root)
    top = _file(tmp_path / "top.txt")
    store.put("whl/top.txt", top, sha256_file(top))
    keys = [o.key for o in store.list("whl/")]
    assert "whl/top.txt" in keys
    assert f"whl/{deepest.rsplit('/', 499)[0]}/f" in keys  # a file 1,001 levels down
    assert len(keys) == 1 + DEPTH // 500
    assert not any(o.key.startswith(".nightly-store") for o in store.list(""))


def _file(path: Path) -> Path:
    path.write_text("x\n")
    return path
