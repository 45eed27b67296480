"""A build that leaves a 1,500-level folder tree in its WORK_DIR (issue 56, point 3): the
night deletes it without a traceback and its other builds go on, and the next night builds
every build, also where a killed run left such a tree in a build's folder. Through the
command line, with the stable build folder (nightly/builds/area/slot.py) where both nights'
builds have their folders."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.support.projects import Project, run_args
from tests.support.wheels import wheel_recipe

MATRIX = '[matrix.linux.manywheel]\npythons = ["3.11", "3.12"]\ncudas = ["cpu"]\n'
IDS = ["manywheel_3.11_cpu", "manywheel_3.12_cpu"]
DEPTH = 1500
NEXT_DAY = "2024_05_02"

# The 3.11 build, the first night only, leaves DEPTH nested folders (and a file at the bottom)
# in its WORK_DIR.
DEEP = r"""
if [ "$DESIRED_PYTHON" = 3.11 ] && [ ! -e "$SIG/deep-made" ]; then
  "$NIGHTLY_PYTHON" -c 'import os, sys
fd = os.open(os.environ["WORK_DIR"], os.O_RDONLY)
for _ in range(int(sys.argv[1])):
    os.mkdir("d", dir_fd=fd)
    child = os.open("d", os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = child
os.close(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))' @DEPTH@
  touch "$SIG/deep-made"
fi
"""


def folder(p: Project, bid: str) -> Path:
    return p.day.parent / ".builds" / "work" / bid


def plant(top: Path, depth: int) -> None:
    """`depth` nested folders under `top` (made relative to an open folder)."""
    top.mkdir(parents=True, exist_ok=True)
    fd = os.open(top, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    os.close(fd)


def test_a_deep_tree_left_by_a_build_stops_nothing_and_the_next_night_builds_it(
    tmp_path: Path, night_project: Any, run_cli: Any
) -> None:
    signals = tmp_path / "p" / "signals"
    recipe = wheel_recipe(signals).replace(
        'echo "building $ID with $PYTHON"\n',
        'echo "building $ID with $PYTHON"\n' + DEEP.replace("@DEPTH@", str(DEPTH)))
    assert "deep-made" in recipe
    p = night_project(matrix=MATRIX, queues=1, recipes={"manywheel": recipe},
                      extra="[smoke]\nenabled = false\n")

    code, out, err = run_cli(run_args(p.config), timeout=300)
    assert (signals / "deep-made").exists()
    assert "Traceback" not in out + err, err[-3000:]
    assert code == 0, (out[-3000:], err[-3000:])
    assert {b: e["status"] for b, e in p.state()["builds"].items()} == dict.fromkeys(
        IDS, "succeeded")
    assert not folder(p, IDS[0]).exists()  # the deep tree went with the build's folder

    # A run killed mid-build left such a tree in the other build's folder: the next night
    # deletes it before that build starts, and builds everything.
    plant(folder(p, IDS[1]) / "work", DEPTH)
    args = [a if a != p.day.name else NEXT_DAY for a in run_args(p.config)]
    code, out, err = run_cli(args, timeout=300)
    assert "Traceback" not in out + err, err[-3000:]
    assert code == 0, (out[-3000:], err[-3000:])
    builds = json.loads((p.day.parent / NEXT_DAY / "state.json").read_text())["builds"]
    assert {b: e["status"] for b, e in builds.items()} == dict.fromkeys(IDS, "succeeded")
    assert all(p.starts(b) == 2 for b in IDS)  # once a night each
    assert not folder(p, IDS[1]).exists()
