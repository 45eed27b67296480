"""Whether another account reaches a path, from the mode bits (nightly/reach.py): no user is
switched to; the account is a uid and its groups, the tree is this process's own."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nightly.reach import Account, denied, missing_bits

ME = os.geteuid()
OTHER = 1001 if ME != 1001 else 1002  # an account that owns nothing here
SOMEONE = Account(name="someone", uid=OTHER, gids=frozenset({OTHER}))


@pytest.fixture
def tree() -> Iterator[Path]:
    """A tree in a folder everybody may search (/tmp, not pytest's 0700 base)."""
    top = Path(tempfile.mkdtemp(prefix="nightly-reach-", dir="/tmp"))
    (top / "open" / "deep").mkdir(parents=True)
    (top / "open" / "deep" / "tool").write_text("#!/bin/sh\n")
    for p in (top, top / "open", top / "open" / "deep"):
        p.chmod(0o755)
    (top / "open" / "deep" / "tool").chmod(0o755)
    yield top
    for root, _dirs, _files in os.walk(top):
        os.chmod(root, 0o755)
    shutil.rmtree(top)


def _reach(path: Path, who: Account, need: str, top: Path) -> str | None:
    """`denied` as "folder-under-top:missing" (None: reached)."""
    why = denied(path, who, need)
    return None if why is None else f"{why.where.relative_to(top)}:{why.missing}"


def test_a_private_folder_on_the_way_is_named_with_the_search_bit_missing(tree: Path) -> None:
    tool = tree / "open" / "deep" / "tool"
    assert _reach(tool, SOMEONE, "x", tree) is None
    (tree / "open").chmod(0o700)
    assert _reach(tool, SOMEONE, "x", tree) == "open:x"
    why = denied(tool, SOMEONE, "x")
    assert why is not None
    assert not why.final


def test_the_path_itself_needs_what_is_asked(tree: Path) -> None:
    deep = tree / "open" / "deep"
    assert _reach(deep, SOMEONE, "rx", tree) is None
    assert _reach(deep, SOMEONE, "wx", tree) == "open/deep:w"  # others cannot write it
    (deep / "tool").chmod(0o700)
    assert _reach(deep / "tool", SOMEONE, "x", tree) == "open/deep/tool:x"
    why = denied(deep / "tool", SOMEONE, "rx")
    assert why is not None
    assert why.final
    assert why.missing == "rx"


def test_the_owner_class_decides_even_when_others_have_more(tree: Path) -> None:
    deep = tree / "open" / "deep"
    if ME == 0:  # root's own bits would not count: the folder goes to an ordinary owner
        os.chown(deep, 4242, 4243)
    st = os.stat(deep)
    owner = Account(name="owner", uid=st.st_uid, gids=frozenset())
    member = Account(name="member", uid=4244, gids=frozenset({st.st_gid}))
    other = Account(name="other", uid=4245, gids=frozenset({4245}))
    deep.chmod(0o077)  # the owner may not, everybody else may
    assert missing_bits(os.stat(deep), owner, "rx") == "rx"
    assert missing_bits(os.stat(deep), member, "rwx") == ""
    assert missing_bits(os.stat(deep), other, "rwx") == ""
    deep.chmod(0o750)  # the group reads and searches, others nothing
    assert missing_bits(os.stat(deep), member, "rwx") == "w"
    assert missing_bits(os.stat(deep), other, "x") == "x"


def test_root_reaches_everything(tree: Path) -> None:
    (tree / "open").chmod(0o000)
    try:
        assert denied(tree / "open" / "deep" / "tool", Account(name="root", uid=0,
                                                              gids=frozenset()), "rwx") is None
    finally:
        (tree / "open").chmod(0o755)


def test_a_symlink_is_followed_to_where_it_leads(tree: Path) -> None:
    private = tree / "private"
    (private / "bin").mkdir(parents=True)
    private.chmod(0o700)
    (private / "bin").chmod(0o755)
    (tree / "open" / "link").symlink_to(private / "bin")
    # The link sits in an open folder; its target's way is closed.
    assert _reach(tree / "open" / "link", SOMEONE, "rx", tree) == "private:x"


def test_a_path_that_does_not_exist_is_not_a_reach_problem(tree: Path) -> None:
    assert _reach(tree / "open" / "missing" / "x", SOMEONE, "r", tree) is None


def test_the_sentence_names_the_folder_its_mode_and_what_is_missing(tree: Path) -> None:
    (tree / "open").chmod(0o700)
    why = denied(tree / "open" / "deep" / "tool", SOMEONE, "x")
    assert why is not None
    text = why.sentence("nbuild")
    assert "drwx------" in text
    assert "nbuild lacks search (x)" in text
