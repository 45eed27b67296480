"""What one test run builds once and all its tests share, across pytest-xdist's workers.

A session fixture is made once per worker: under `-n 2` each worker would build the same
nightly wheel, venv or unpacked sdist for itself, and two workers writing one cache folder
at once would tear it. Here:

- `run_folder(tmp_path_factory)`: a folder the run owns. Under xdist the parent of the
  workers' basetemps (pytest's own `pytest-N` folder of this run, shared by its workers);
  without xdist the basetemp itself. pytest removes old runs' folders, so nothing from
  another run is ever taken for this one's.
- `once(tmp_path_factory, name, make)`: `make(folder)` fills `<run folder>/shared/<name>`
  the first time any worker asks; the others wait on a file lock and get the same folder.
  A `make` that raises leaves nothing marked complete: the next test to ask builds again
  (and fails with its own error) instead of taking a half-made folder.
- `locked(path)`: a file lock for caches kept between runs (~/.cache/nightly/corpus): two
  workers downloading or unpacking one sdist at once would tear it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

COMPLETE = ".complete"


class Basetemp(Protocol):
    """pytest's tmp_path_factory (all that is used of it)."""

    def getbasetemp(self) -> Path: ...


def run_folder(tmp_path_factory: Basetemp) -> Path:
    base = tmp_path_factory.getbasetemp()
    # xdist gives each worker <run>/popen-gwN as its basetemp (PYTEST_XDIST_WORKER is set
    # in the workers only).
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Holds an exclusive lock on `path` (created, never removed: removing a lock file
    another process waits on would let a third one in beside it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def once(tmp_path_factory: Basetemp, name: str,
         make: Callable[[Path], None]) -> Path:
    """The folder `make` filled for this run, made by whichever test asked first."""
    shared = run_folder(tmp_path_factory) / "shared"
    folder = shared / name
    with locked(shared / f"{name}.lock"):
        if (folder / COMPLETE).is_file():
            return folder
        shutil.rmtree(folder, ignore_errors=True)  # a failed attempt's leftovers
        folder.mkdir(parents=True)
        make(folder)
        (folder / COMPLETE).write_text(name + "\n")
    return folder
