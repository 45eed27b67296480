"""nightly's own wheel, as a user gets it: pypa/build makes the sdist from a copy of the
working tree, then the wheel from that sdist (so a file the sdist leaves out is missing from
the wheel too). Built once per run (tests/support/runcache.py) for every test that installs
nightly from its wheel (test_init.py with the manylinux extra, test_extras.py bare); the
copy keeps the build's leftovers out of the repository.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.runcache import Basetemp, once

REPO = Path(__file__).resolve().parents[2]


def nightly_wheel(tmp_path_factory: Basetemp) -> Path:
    (wheel,) = (once(tmp_path_factory, "nightly-wheel", _build) / "dist").glob("*.whl")
    return wheel


def _build(folder: Path) -> None:
    tree = folder / "tree"
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
        capture_output=True, text=True, check=True,
    ).stdout.split("\0")
    for rel in filter(None, files):
        src = REPO / rel
        if src.is_file():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, tree / rel)
    built = subprocess.run([sys.executable, "-m", "build", "--outdir", str(folder / "dist"),
                            str(tree)], capture_output=True, text=True)
    if built.returncode != 0:
        raise RuntimeError(f"python -m build failed:\n{built.stdout}\n{built.stderr}")
    shutil.rmtree(tree)
