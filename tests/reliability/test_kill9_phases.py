"""kill -9 of `nightly run` in each phase of a small night that has them all (preparing,
building, repairing, testing, taking back, signing, publishing, indexing, reporting), then a
rerun: it exits 0 without a traceback, every build succeeded exactly once, the mirror holds
each package (and its provenance) once and whole.

The night is the smallest with every phase: two real (hand-written) wheels, smoke-tested in
a fresh venv, signed (provenance), published into a file:// mirror with its index pages and
report. The moments are reached exactly, as in test_kill9.py: the live view's phase of a
build held by the recipe or the smoke command (they wait for the test's go file), strace
holding nightly inside one system call, or the test holding the flock of the mirror object
nightly is about to write.

In the testing phase the smoke test leaves a writer behind (as pip does, still filling the
venv when nightly dies): a process of the killed night's smoke test that keeps creating
files in the build's folder. The rerun must find it (its box is recorded with the build) and
kill it before it deletes the folder.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from nightly.index.manifest import decode_manifest
from nightly.stores import FileStore
from tests.reliability.test_kill9 import DELAY_US, _wait, holding, stripe
from tests.support.cli import alive
from tests.support.projects import DATE, VERSION, Project, run_args
from tests.support.published import expected_objects, is_package, page_links, sha256_of, store_objects
from tests.support.traced import start_traced
from tests.support.wheels import hand_wheel_recipe

pytestmark = pytest.mark.strace

MATRIX = '[matrix.linux.manywheel]\npythons = ["3.11", "3.12"]\ncudas = ["cpu"]\n'
IDS = ["manywheel_3.11_cpu", "manywheel_3.12_cpu"]
SUCCEEDED_FOOTER = "result:      SUCCEEDED"

# Held in a phase while $SIG/hold-<phase> exists, until $SIG/go does (at most 60 s).
_HOLD = r"""
SIG=@SIG@
ID="manywheel_${DESIRED_PYTHON}_${DESIRED_CUDA}"
echo "start $$" >> "$SIG/$ID.starts"
hold() { local n=0; while [ ! -e "$SIG/go" ] && [ "$n" -lt 1200 ]; do sleep 0.05; n=$((n + 1)); done; }
if [ -e "$SIG/hold-building" ]; then echo "building $ID"; touch "$SIG/$ID.building"; hold; fi
if [ -e "$SIG/hold-repairing" ]; then
  echo "auditwheel repair --plat manylinux_2_17_x86_64 (held)"; touch "$SIG/$ID.repairing"; hold
fi
"""

# The smoke test's project command: in the testing phase, a writer left in the background
# (files created as fast as bash can, for 60 s), then held.
_SMOKE = r"""#!/usr/bin/env bash
SIG=@SIG@
if [ -e "$SIG/hold-testing" ]; then
  ( end=$((SECONDS + 60)); i=0
    while [ "$SECONDS" -lt "$end" ]; do : > "$PWD/w$i" 2>/dev/null || exit 0; i=$((i + 1)); done ) &
  echo "$!" >> "$SIG/pids"
  touch "$SIG/writer"
  n=0; while [ ! -e "$SIG/go" ] && [ "$n" -lt 1200 ]; do sleep 0.05; n=$((n + 1)); done
fi
"""


def wheel(bid: str) -> str:
    return f"demo-{VERSION}-{bid.split('_')[1].replace('.', '')}-py3-none-any.whl"


def key(bid: str) -> str:
    return f"whl/nightly/cpu/{wheel(bid)}"


@dataclass
class Night:
    p: Project
    store: Path

    def state(self) -> dict[str, Any]:
        return self.p.state()

    def status(self, bid: str) -> str:
        return str(self.state()["builds"].get(bid, {}).get("status", "pending"))

    def published(self) -> list[str]:
        return [b for b, e in self.state()["builds"].items() if e.get("published")]

    def phases(self) -> set[str]:
        """The phases the live view shows now (logs/master/live.json)."""
        try:
            live = json.loads((self.p.day / "logs/master/live.json").read_text())
        except (OSError, ValueError):
            return set()
        return {str(b.get("phase")) for b in live.get("builds", [])}

    def folder(self, bid: str) -> Path:
        """A host build's folder, in the root's stable build folder."""
        return self.p.day.parent / ".builds" / "work" / bid

    def package(self, bid: str) -> Path:
        return self.p.day / "packages" / "manywheel" / "cpu" / wheel(bid)


@dataclass
class Phase:
    hold: str = ""  # $SIG/hold-<hold> made before the night
    strace: Callable[[Night], list[str]] | None = None
    lock: str | None = None  # the mirror object whose lock stripe the test holds
    lock_before: Callable[[], tuple[str, ...]] = tuple  # what nightly writes before it
    ready: Callable[[Night], bool] = lambda n: True
    at_kill: Callable[[Night], None] = lambda n: None
    done_before: tuple[str, ...] = field(default=())


def _pages_before(folder_done: bool) -> tuple[str, ...]:
    files = tuple(k + s for b in IDS for k in (key(b),) for s in ("", ".metadata", ".provenance.json"))
    pages = ("whl/nightly/cpu/.index.json", "whl/nightly/cpu/demo/index.html")
    return files + pages + (("whl/nightly/cpu/index.html",) if folder_done else ())


def _none_built(n: Night) -> None:
    assert all(n.p.starts(b) == 0 for b in IDS)


def _running_in(phase: str) -> Callable[[Night], None]:
    def check(n: Night) -> None:
        assert phase in n.phases(), n.phases()
        assert "succeeded" not in {n.status(b) for b in IDS}
    return check


def _taking_back(n: Night) -> None:
    (bid,) = [b for b in IDS if (n.folder(b) / "taken").is_dir()]
    assert n.status(bid) == "running"
    assert not list((n.folder(bid) / "taken").iterdir())  # nothing taken yet
    assert "testing" not in n.phases()


PHASES: dict[str, Phase] = {
    # The night's preparation: the day's lock taken, nothing built (held in its flock).
    "preparing": Phase(
        strace=lambda n: ["-P", str(n.p.day.parent / f"{DATE}.lock"), "-e", "trace=flock",
                          "-e", f"inject=flock:delay_exit={DELAY_US}:when=1"],
        ready=lambda n: (n.p.day.parent / f"{DATE}.lock").exists(),
        at_kill=_none_built,
    ),
    "building": Phase(hold="building", ready=lambda n: "building" in n.phases()
                      and any((n.p.signals / f"{b}.building").exists() for b in IDS),
                      at_kill=_running_in("building")),
    "repairing": Phase(hold="repairing", ready=lambda n: "repairing" in n.phases(),
                       at_kill=_running_in("repairing")),
    "testing": Phase(hold="testing", ready=lambda n: "testing" in n.phases()
                     and (n.p.signals / "writer").exists(), at_kill=_running_in("testing")),
    # The recipe ended; its packages being taken back: held right after `taken/` is made.
    "taking-back": Phase(
        strace=lambda n: [*(a for b in IDS for a in ("-P", str(n.folder(b) / "taken"))),
                          "-e", "trace=mkdir,mkdirat",
                          "-e", f"inject=mkdir,mkdirat:delay_exit={DELAY_US}:when=1"],
        ready=lambda n: any((n.folder(b) / "taken").is_dir() for b in IDS),
        at_kill=lambda n: _taking_back(n),
    ),
    # Both builds succeeded; the first provenance file renamed into place, held there.
    "signing": Phase(
        # (strace's -P matches a rename by its source: the provenance's temporary file.)
        strace=lambda n: [*(a for b in IDS for a in ("-P", f"{n.package(b)}.provenance.json.tmp")),
                          "-e", "trace=rename,renameat,renameat2",
                          "-e", f"inject=rename,renameat,renameat2:delay_exit={DELAY_US}:when=1"],
        ready=lambda n: any(Path(f"{n.package(b)}.provenance.json").exists() for b in IDS),
        at_kill=lambda n: (None if not n.published() else pytest.fail("published already")),
        done_before=tuple(IDS),
    ),
    "publishing": Phase(
        lock=key(IDS[1]), lock_before=lambda: (key(IDS[0]),),
        ready=lambda n: n.published() == [IDS[0]],
        done_before=tuple(IDS),
    ),
    "indexing": Phase(
        lock="whl/nightly/cpu/index.html", lock_before=lambda: _pages_before(False),
        ready=lambda n: (n.store / "whl/nightly/cpu/demo/index.html").exists(),
        done_before=tuple(IDS),
    ),
    "reporting": Phase(
        lock=f"whl/nightly/reports/{DATE}_m.html",
        lock_before=lambda: (*_pages_before(True), "whl/nightly/cpu/demo_nightly.html"),
        ready=lambda n: (n.store / "whl/nightly/cpu/demo_nightly.html").exists(),
        at_kill=lambda n: None if not (n.p.day / "summary.json").exists() else pytest.fail(
            "the night had finished"),
        done_before=tuple(IDS),
    ),
}


def _project(night_project: Any, tmp_path: Path, store: Path) -> Project:
    from nightly import provenance

    signals = tmp_path / "p" / "signals"
    key_path, _pub = provenance.keygen(tmp_path / "keys")
    recipe = hand_wheel_recipe(version='os.environ["BUILD_VERSION"]',
                               body='f"__version__ = {v!r}\\n"',
                               before=_HOLD.replace("@SIG@", str(signals)))
    smoke = tmp_path / "smoke-command.sh"
    smoke.write_text(_SMOKE.replace("@SIG@", str(signals)))
    return night_project(  # type: ignore[no-any-return]
        matrix=MATRIX, queues=1, recipes={"manywheel": recipe}, extra=f"""
[publish]
url = "{store.as_uri()}"

[smoke]
import_name = "demo"
command = "bash {smoke}"

[provenance]
key = "{key_path}"
""")


@pytest.mark.parametrize("phase", list(PHASES))
def test_kill9_in_each_phase_then_rerun_finishes_every_build_once(
    phase: str, tmp_path: Path, night_project: Any, run_cli: Any
) -> None:
    ph = PHASES[phase]
    if ph.lock:
        assert stripe(ph.lock) not in {stripe(k) for k in ph.lock_before()}, (
            "the held stripe is shared by an object written earlier: pick another key")
    store = tmp_path / "mirror"
    p = _project(night_project, tmp_path, store)
    if ph.hold:
        (p.signals / f"hold-{ph.hold}").touch()
    n = Night(p, store)
    args = run_args(p.config)
    with holding(store, ph.lock):
        traced = start_traced(args, ph.strace(n) if ph.strace else ["-e", "trace=none"], tmp_path)
        try:
            pid = traced.nightly_pid
            _wait(lambda: ph.ready(n), traced, phase, timeout=120)
            time.sleep(0.3)  # nightly would go on now if it could (it must not: it is held)
            assert alive(pid), f"nightly is no longer running in {phase}"
            traced.kill9()
            _wait(lambda: not alive(pid), traced, "nightly to die", ends=True)
            ph.at_kill(n)
            before = {b: (n.status(b), p.starts(b)) for b in IDS}
        finally:
            traced.stop()
    assert [b for b in ph.done_before if before[b][0] != "succeeded"] == []
    (p.signals / "go").touch()

    code, out, err = run_cli(args, timeout=180)
    assert code == 0, (out, err)
    assert "Traceback" not in out + err, err
    check_once(n, before)


def check_once(n: Night, before: dict[str, tuple[str, int]]) -> None:
    p, builds = n.p, n.state()["builds"]
    assert sorted(builds) == IDS
    for bid in IDS:
        entry = builds[bid]
        assert entry["status"] == "succeeded", (bid, entry)
        log = (p.day / "logs/succeeded" / f"{bid}.log").read_text()
        assert log.count(SUCCEEDED_FOOTER) == 1, (bid, log[-2000:])
        if before[bid][0] == "succeeded":
            assert p.starts(bid) == before[bid][1], f"{bid} had succeeded but was built again"
        assert [pkg["name"] for pkg in entry["packages"]] == [wheel(bid)]
        assert Path(f"{n.package(bid)}.provenance.json").is_file()  # signed
        for pkg in entry["packages"]:
            assert sha256_of(p.day / pkg["path"]) == pkg["sha256"]
        assert sha256_of(n.store / key(bid)) == sha256_of(n.package(bid))
    assert not list((p.day / "logs").glob("*.log")), "a log left unfiled"
    assert p.summary()["exit_code"] == 0
    # The mirror: each wheel and its provenance once and whole, listed by the folder's pages.
    expected = {k: v for b in IDS for k, v in (
        (key(b), sha256_of(n.package(b))),
        (key(b) + ".provenance.json", sha256_of(Path(f"{n.package(b)}.provenance.json"))))}
    assert expected_objects(n.state()) == {key(b): expected[key(b)] for b in IDS}
    store = FileStore(n.store)
    for k, sha in expected.items():
        info = store.head(k)
        assert info is not None, k
        assert info.sha256 == sha == sha256_of(n.store / k), (k, info)
    objects = store_objects(n.store)
    assert sorted(k for k in objects if is_package(k)) == sorted(key(b) for b in IDS)
    folder = n.store / "whl/nightly/cpu"
    manifest = decode_manifest((folder / ".index.json").read_bytes())
    assert manifest is not None
    assert manifest.digests() == {wheel(b): expected[key(b)] for b in IDS}
    for page in ("demo_nightly.html", "demo/index.html"):  # the pages pip reads
        names = {unquote(h.split("#")[0].rpartition("/")[2])
                 for h, _ in page_links((folder / page).read_bytes())}
        assert names == {k.rpartition("/")[2] for k in expected}, (page, names)
    for bid in IDS:  # nothing of a build's folder is left, nor any process it started
        assert not n.folder(bid).exists(), sorted(x.name for x in n.folder(bid).iterdir())
    for pid in p.pids():
        assert not alive(pid), f"a process of the killed night ({pid}) outlived the rerun"
