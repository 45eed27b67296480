"""How the full run hands tests to xdist's two workers (tests/support/schedule.py) and what
its workers build once and share (tests/support/runcache.py).

The scheduler is xdist's own loadfile scheduler with another idea of a unit of work; it is
driven here with stand-ins for the two workers (what it uses of one: its gateway's id,
`send_runtest_some`, `shutdown`, `shutting_down`), as xdist's controller drives it.
"""

from __future__ import annotations

import importlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support import schedule
from tests.support.runcache import COMPLETE, once, run_folder

ROOT = Path(__file__).resolve().parents[2]
CORPUS = "tests/integration/test_corpus.py"
IMAGES = "tests/integration/test_images.py"


@dataclass(eq=False)  # hashed by identity, as xdist's workers are
class Worker:
    name: str
    sent: list[int] = field(default_factory=list)
    shutting_down: bool = False

    @property
    def gateway(self) -> SimpleNamespace:
        return SimpleNamespace(id=self.name)

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


class Config:
    """What the scheduler reads of pytest's config: two workers, xdist's default reorder."""

    def __init__(self) -> None:
        self.option = SimpleNamespace(loadscopereorder=True, dist="loadfile")

    def getvalue(self, name: str) -> Any:
        return {"tx": ["2*popen"]}[name]

    def getoption(self, name: str) -> Any:
        return getattr(self.option, name)


def _schedule(collection: list[str]) -> tuple[list[str], list[str]]:
    """The tests each of two workers is first given, in the order given."""
    config = Config()
    scheduler = schedule.pytest_xdist_make_scheduler(config, None)  # type: ignore[arg-type]
    assert isinstance(scheduler, schedule.SuiteScheduling)
    one, two = Worker("gw0"), Worker("gw1")
    for w in (one, two):
        scheduler.add_node(w)
    for w in (one, two):
        scheduler.add_node_collection(w, collection)
    scheduler.schedule()
    return [collection[i] for i in one.sent], [collection[i] for i in two.sent]


def test_a_spread_files_tests_go_to_both_workers_and_other_files_stay_whole() -> None:
    corpus = [f"{CORPUS}::test_corpus_project[{k}]" for k in ("markupsafe", "ujson")]
    images = [f"{IMAGES}::test_{n}" for n in ("a", "b", "c")]
    unit = ["tests/unit/test_x.py::test_1", "tests/unit/test_x.py::test_2"]
    one, two = _schedule([*corpus, *images, *unit])
    # The two corpus tests first, one to each worker; a whole file each after them, in the
    # collection's order (xdist's own would give the file of three tests first).
    assert one == [corpus[0], *images]
    assert two == [corpus[1], *unit]


def test_other_modes_keep_xdists_scheduler() -> None:
    config = Config()
    config.option.dist = "load"
    assert schedule.pytest_xdist_make_scheduler(config, None) is None  # type: ignore[arg-type]


def test_a_test_of_a_spread_file_is_its_own_unit_of_work() -> None:
    nodeid = f"{CORPUS}::test_corpus_project[mapbox-earcut]"
    assert schedule.scope_of(nodeid) == nodeid
    assert schedule.scope_of(f"{IMAGES}::test_a") == IMAGES
    assert schedule.scope_of(f"{IMAGES}::TestX::test_a") == IMAGES


def test_the_named_files_exist() -> None:
    """A renamed file would quietly lose its place (or its spreading)."""
    for name in (*schedule.HEAVIEST, *schedule.SPREAD):
        assert (ROOT / name).is_file(), name


@dataclass
class Item:
    """What the ordering reads of a collected test: its file and its `slow` marker."""

    path: Path
    name: str
    slow: bool = False

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "slow" and self.slow else None


def test_the_heaviest_files_go_first_and_a_files_tests_keep_their_order() -> None:
    def at(rel: str, name: str, *, slow: bool = False) -> Item:
        return Item(ROOT / rel, name, slow)

    items = [
        at("tests/unit/test_a.py", "a1"),
        at("tests/integration/test_aarch64.py", "arm"),
        at("tests/integration/test_night.py", "n1"),
        at("tests/integration/test_night.py", "n2", slow=True),  # its file counts as slow
        at(CORPUS, "c1"),
        at("tests/unit/test_a.py", "a2"),
        at(CORPUS, "c2"),
        at(IMAGES, "i1"),
    ]
    schedule.pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    assert [i.name for i in items] == ["c1", "c2", "i1", "arm", "n1", "n2", "a1", "a2"]


def test_the_first_tests_go_before_the_heaviest_files_in_their_order() -> None:
    zig, earcut = (schedule.FIRST[0].split("::", 1), schedule.FIRST[1].split("::", 1))
    items = [
        Item(ROOT / "tests/unit/test_a.py", "a1"),
        Item(ROOT / CORPUS, "test_corpus_project[markupsafe]"),
        Item(ROOT / earcut[0], earcut[1]),
        Item(ROOT / IMAGES, "i1"),
        Item(ROOT / zig[0], "test_a_host_build_with_zig_reaches_manylinux_2_5"),
        Item(ROOT / zig[0], zig[1]),
    ]
    schedule.pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    assert [i.name for i in items] == [
        zig[1], earcut[1], "test_corpus_project[markupsafe]", "test_a_host_build_with_zig_"
        "reaches_manylinux_2_5", "i1", "a1"]


def test_one_worker_starts_the_image_builders_and_the_other_the_host_nights() -> None:
    first = list(schedule.FIRST)
    one, two = _schedule([*first, f"{IMAGES}::test_a", "tests/unit/test_x.py::test_1"])
    assert one[:2] == [first[0], first[2]]  # the zig image, then the corpus builder image
    assert two[:2] == [first[1], first[3]]  # mapbox-earcut and cmarkgfm on the host


def test_the_first_tests_exist_in_spread_files() -> None:
    """Each of FIRST is a test of a SPREAD file (a test of a whole-file unit cannot leave its
    file), named as its file defines it (a renamed test would quietly lose its place)."""
    assert len(set(schedule.FIRST)) == len(schedule.FIRST)
    for nodeid in schedule.FIRST:
        name, _, test = nodeid.partition("::")
        assert name in schedule.SPREAD, nodeid
        function, _, params = test.partition("[")
        module = importlib.import_module(name.removesuffix(".py").replace("/", "."))
        found = getattr(module, function, None)
        assert callable(found), nodeid
        ids = {"-".join(map(str, v)) if isinstance(v, tuple) else str(v)
               for mark in getattr(found, "pytestmark", []) if mark.name == "parametrize"
               for v in mark.args[1]}
        assert params.removesuffix("]") in ids if params else not ids, (nodeid, ids)


@dataclass
class Factory:
    base: Path

    def getbasetemp(self) -> Path:
        return self.base


def test_once_builds_once_for_every_worker_and_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers (threads: each opens the lock file itself, and flock locks of two
    opens exclude each other) ask at once: one builds, the other waits and gets it."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    workers = [Factory(tmp_path / "pytest-7" / f"popen-gw{n}") for n in (0, 1)]
    assert {run_folder(w) for w in workers} == {tmp_path / "pytest-7"}
    made: list[int] = []

    def make(folder: Path) -> None:
        made.append(threading.get_ident())
        time.sleep(0.3)  # the other worker asks meanwhile
        (folder / "artefact").write_text("built")

    got: list[Path] = []
    threads = [threading.Thread(target=lambda w=w: got.append(once(w, "thing", make)))
               for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1
    assert got == [tmp_path / "pytest-7" / "shared" / "thing"] * 2
    assert (got[0] / "artefact").read_text() == "built"


def test_a_failed_build_is_not_taken_and_the_next_asker_builds_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    factory = Factory(tmp_path / "pytest-3")  # no xdist: the basetemp is the run's
    assert run_folder(factory) == tmp_path / "pytest-3"

    def broken(folder: Path) -> None:
        (folder / "half").write_text("half")
        raise RuntimeError("download failed")

    with pytest.raises(RuntimeError, match="download failed"):
        once(factory, "thing", broken)
    folder = tmp_path / "pytest-3" / "shared" / "thing"
    assert not (folder / COMPLETE).exists()
    def whole(folder: Path) -> None:
        (folder / "whole").write_text("whole")

    got = once(factory, "thing", whole)
    assert got == folder
    assert sorted(p.name for p in folder.iterdir()) == sorted([COMPLETE, "whole"])
