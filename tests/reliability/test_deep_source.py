"""A 1,500-level folder tree in the project's own source (issue 56's known gap: the night's
copies of the source still recursed). The night copies the source as it is, at any depth,
into the day folder and each build's slot (nightly.files.copy): every build sees the whole
tree, the night exits 0 without a traceback, and a second night builds again. Through the
command line, as tests/reliability/test_deep_tree.py does for a tree a build leaves."""

from __future__ import annotations

import datetime as dt
import json
import os
import pwd
from pathlib import Path
from typing import Any

import pytest

from nightly.files import remove_tree
from nightly.workspace import Day
from tests.reliability.test_deep_tree import DEPTH, IDS, MATRIX, NEXT_DAY, plant
from tests.support.accounts import account
from tests.support.projects import run_args
from tests.support.wheelrecipe import wheel_step
from tests.support.wheels import wheel_recipe

__all__ = ["account"]  # the fixture, used by name

# Each build counts the levels of the tree in its SOURCE_DIR (relative to open folders: the
# path is past what a shell handles comfortably) and that the leaf is there.
COUNT = r"""
"$NIGHTLY_PYTHON" -c 'import os, sys
fd, depth = os.open(os.path.join(os.environ["SOURCE_DIR"], "deep"), os.O_RDONLY), 0
while "d" in os.listdir(fd):
    child = os.open("d", os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
    os.close(fd)
    fd, depth = child, depth + 1
leaf = "leaf" in os.listdir(fd)
open(sys.argv[1], "a").write(f"{depth} {leaf}\n")' "$SIG/$ID.depth"
"""


def test_a_deep_tree_in_the_project_source_is_built_on_two_nights(
    tmp_path: Path, night_project: Any, run_cli: Any
) -> None:
    try:
        two_nights(tmp_path, night_project, run_cli)
    finally:  # pytest's own clean-up of old tmp_paths recurses (RecursionError at exit)
        remove_tree(tmp_path / "p")


def two_nights(tmp_path: Path, night_project: Any, run_cli: Any) -> None:
    signals = tmp_path / "p" / "signals"
    recipe = wheel_recipe(signals).replace(
        'echo "building $ID with $PYTHON"\n', 'echo "building $ID with $PYTHON"\n' + COUNT)
    p = night_project(matrix=MATRIX, queues=1, recipes={"manywheel": recipe},
                      extra="[smoke]\nenabled = false\n")
    plant(p.path / "src" / "deep", DEPTH)
    (p.path / "src" / "deep" / "to-readme").symlink_to("../README")  # a link stays a link

    code, out, err = run_cli(run_args(p.config), timeout=300)
    assert "Traceback" not in out + err, err[-3000:]
    assert "RecursionError" not in out + err
    assert code == 0, (out[-3000:], err[-3000:])
    assert {b: e["status"] for b, e in p.state()["builds"].items()} == dict.fromkeys(
        IDS, "succeeded")
    for bid in IDS:  # each build had the whole tree in its source
        assert (signals / f"{bid}.depth").read_text() == f"{DEPTH} True\n"
    source = Day(p.day.parent, dt.date(2024, 5, 1)).source  # the day's copy, as nightly names it
    assert os.readlink(source / "deep" / "to-readme") == "../README"

    args = [a if a != p.day.name else NEXT_DAY for a in run_args(p.config)]
    code, out, err = run_cli(args, timeout=300)
    assert "Traceback" not in out + err, err[-3000:]
    assert code == 0, (out[-3000:], err[-3000:])
    builds = json.loads((p.day.parent / NEXT_DAY / "state.json").read_text())["builds"]
    assert {b: e["status"] for b, e in builds.items()} == dict.fromkeys(IDS, "succeeded")
    for bid in IDS:
        assert (signals / f"{bid}.depth").read_text() == f"{DEPTH} True\n" * 2
        assert p.starts(bid) == 2


# The build user's recipe: counts the tree the same way in its copy of the source (in its
# build area), says so in its log, and packs a pure wheel (the account reaches no signals).
USER_RECIPE = ("#!/usr/bin/env bash\nset -euo pipefail\necho \"recipe as uid $(id -u)\"\n"
               + COUNT.replace(' "$SIG/$ID.depth"', "").replace(
                   'open(sys.argv[1], "a").write(f"{depth} {leaf}\\n")',
                   'print(f"depth: {depth} {leaf}")')
               + wheel_step(dist="demo"))
assert "print(" in USER_RECIPE
assert "$SIG" not in USER_RECIPE


@pytest.mark.slow
def test_a_deep_tree_in_the_source_reaches_a_build_users_area_on_two_nights(
    tmp_path: Path, night_project: Any, run_cli: Any, account: pwd.struct_passwd,
) -> None:
    """The same, with `[executor.local] user`: the source is copied once more, into the
    build user's area (nightly.builds.area.userarea), where the build runs as the account."""
    area = Path(f"/var/tmp/nightly-{account.pw_name}")
    try:
        p = night_project(matrix=MATRIX, queues=1, recipes={"manywheel": USER_RECIPE},
                          extra="[smoke]\nenabled = false\n")
        text = p.config.read_text()
        assert 'user = "root"' in text  # these tests run as root
        p.config.write_text(text.replace('user = "root"', f'user = "{account.pw_name}"'))
        plant(p.path / "src" / "deep", DEPTH)
        for date in (p.day.name, NEXT_DAY):
            args = [a if a != p.day.name else date for a in run_args(p.config)]
            code, out, err = run_cli(args, timeout=300)
            assert "Traceback" not in out + err, err[-3000:]
            state = json.loads((p.day.parent / date / "state.json").read_text())["builds"]
            assert code == 0, {b: e.get("reason") for b, e in state.items()}
            for bid in IDS:
                assert state[bid]["status"] == "succeeded", state[bid]
                log = (p.day.parent / date / state[bid]["log"]).read_text()
                assert f"recipe as uid {account.pw_uid}\n" in log, log[-3000:]
                assert f"depth: {DEPTH} True\n" in log, log[-3000:]
    finally:  # the account's clean-up and pytest's recurse: the deep copies go first
        remove_tree(tmp_path / "p")
        remove_tree(area)
