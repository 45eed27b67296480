"""kill -9 of `nightly run` at eleven moments of a night that publishes into a file:// mirror,
then a rerun: the night completes, every build succeeded exactly once, the mirror holds each
package once and whole, and the index pages list exactly the objects, with their sha256.

The moments are reached exactly, not by luck:
- by the recipes (they wait for the test's go file), and state.json polled;
- by strace (`inject=`): nightly is held inside one system call (`delay_exit`) while the
  test kills it, or is killed by the kernel at that call (`signal=KILL`): the lock's flock,
  the unlink that ends a recipe's process-group record, the rename that files a log, the
  sendfile that copies a package into the mirror, the stat that follows installing it;
- by holding the flock of the mirror's lock stripe of one object: nightly blocks right
  before writing that object (a later package, a folder's root page, the report).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nightly.workspace import is_locked
from tests.support.cli import alive
from tests.support.projects import Project, run_args
from tests.support.published import check_published, expected_objects, sha256_of
from tests.support.traced import start_traced
from tests.support.wheels import publish_toml, wheel_name, wheel_recipe

pytestmark = pytest.mark.strace

MATRIX = """
[matrix.linux.manywheel]
pythons = ["3.6m", "3.7m", "3.8"]
cudas = ["cpu", "cu100"]
"""
IDS = sorted(f"manywheel_{p}_{c}" for p in ("3.6m", "3.7m", "3.8") for c in ("cpu", "cu100"))
BIG = "manywheel_3.6m_cpu"  # padded to 4 MB: the first package uploaded
SUCCEEDED_FOOTER = "result:      SUCCEEDED"
DELAY_US = 20_000_000  # how long strace holds nightly in the call (it is killed long before)


def cuda_of(bid: str) -> str:
    return bid.rsplit("_", 1)[1]


def key_of(bid: str) -> str:
    return f"whl/nightly/{cuda_of(bid)}/{wheel_name(bid, cuda_of(bid))}"


def stripe(key: str) -> str:
    """The lock stripe of an object in nightly.stores.folder.FileStore."""
    return hashlib.sha1(key.encode()).hexdigest()[:2]


@dataclass
class Night:
    p: Project
    store: Path
    tmp: Path

    @property
    def state(self) -> dict[str, Any]:
        return self.p.state()

    def status(self, bid: str) -> str:
        return str(self.state["builds"].get(bid, {}).get("status", "pending"))

    def succeeded(self) -> list[str]:
        return [b for b, e in self.state["builds"].items() if e.get("status") == "succeeded"]

    def published(self) -> list[str]:
        return [b for b, e in self.state["builds"].items() if e.get("published")]

    def tmp_files(self) -> list[Path]:
        d = self.store / ".nightly-store" / "tmp"
        return [f for f in d.iterdir() if f.is_file()] if d.exists() else []


@dataclass
class Moment:
    """How to reach one kill point: recipe behaviours, strace arguments, a flock to hold,
    the condition to kill at, and what must hold at that instant."""

    behaviours: dict[str, str] = field(default_factory=dict)
    strace: Callable[[Night], list[str]] | None = None
    hold: str | None = None  # the object key whose lock stripe the test holds
    holds_before: tuple[str, ...] = ()  # keys nightly writes before it (must not share it)
    ready: Callable[[Night], bool] = lambda n: True
    at_kill: Callable[[Night], None] = lambda n: None
    killed_by_strace: bool = False
    adopted: tuple[str, ...] = ()  # finished before the kill: must not be built again


def _log_path(n: Night, bid: str) -> Path:
    return n.p.day / "logs" / f"{bid}.log"


def _build_folder(n: Night, bid: str) -> Path:
    """A host build's folder: in its root's stable build folder (nightly/builds/area/slot.py)."""
    return n.p.day.parent / ".builds" / "work" / bid


def _record(n: Night, bid: str) -> Path:
    return _build_folder(n, bid).parent / f".{bid}.pgid"


def _package(n: Night, bid: str) -> Path:
    return n.p.day / "packages" / "manywheel" / cuda_of(bid) / wheel_name(bid, cuda_of(bid))


def _none_started(n: Night) -> None:
    assert all(n.p.starts(b) == 0 for b in IDS)
    assert not n.state["builds"]


def _two_running(n: Night) -> None:
    assert not n.succeeded()
    assert sorted(n.status(b) for b in IDS).count("running") == 2


def _uncollected(n: Night) -> None:
    bid = "manywheel_3.8_cpu"
    assert n.status(bid) == "running"
    assert n.p.delivered(bid) == 1
    assert list((_build_folder(n, bid) / "out").iterdir())  # the package, not yet filed
    assert not _package(n, bid).exists()


def _footer_unfiled(n: Night) -> None:
    bid = "manywheel_3.8_cpu"
    assert n.status(bid) == "running"
    assert SUCCEEDED_FOOTER in _log_path(n, bid).read_text()
    assert not (n.p.day / "logs/succeeded" / f"{bid}.log").exists()


def _filed_not_recorded(n: Night) -> None:
    bid = "manywheel_3.8_cpu"
    assert n.status(bid) == "running"
    assert (n.p.day / "logs/succeeded" / f"{bid}.log").exists()


def _copied_not_installed(n: Night) -> None:
    (tmp,) = n.tmp_files()
    assert tmp.stat().st_size == _package(n, BIG).stat().st_size > 4_000_000
    assert not (n.store / key_of(BIG)).exists()
    assert not n.published()


def _installed_no_metadata(n: Night) -> None:
    assert sha256_of(n.store / key_of(BIG)) == sha256_of(_package(n, BIG))
    assert not (n.store / ".nightly-store" / "meta" / f"{key_of(BIG)}.json").exists()
    assert not n.published()


def _three_published(n: Night) -> None:
    assert sorted(n.published()) == IDS[:3]
    assert not (n.store / key_of(IDS[3])).exists()


def _manifest_no_root_page(n: Night) -> None:
    cpu = n.store / "whl/nightly/cpu"
    assert (cpu / ".index.json").exists()
    assert not (cpu / "index.html").exists()
    assert not (n.store / "whl/nightly/cu100/.index.json").exists()


def _second_folder_half(n: Night) -> None:
    assert (n.store / "whl/nightly/cpu/demo_nightly.html").exists()
    assert (n.store / "whl/nightly/cu100/.index.json").exists()
    assert not (n.store / "whl/nightly/cu100/index.html").exists()


def _index_done_report_not(n: Night) -> None:
    assert (n.store / "whl/nightly/cu100/demo_nightly.html").exists()
    # The logs the report links are published first, so the page never links a missing one.
    assert not (n.store / "whl/nightly/reports/2024_05_01_m.html").exists()
    assert (n.store / "whl/nightly/reports/2024_05_01_m/logs").is_dir()
    assert not (n.p.day / "summary.json").exists()


def _cpu_pages() -> tuple[str, ...]:
    """What nightly writes before the cpu folder's root pages: every package, then the
    cpu folder's manifest and project pages."""
    # Every wheel is the project's (demo), with its core metadata beside it.
    return (*(key_of(b) for b in IDS), *(key_of(b) + ".metadata" for b in IDS),
            "whl/nightly/cpu/.index.json", "whl/nightly/cpu/demo/index.html")


MOMENTS: dict[str, Moment] = {
    # The day's lock just taken: nightly held in flock(2) of ROOT/DAY.lock.
    "lock-taken": Moment(
        strace=lambda n: ["-P", str(n.p.day.parent / "2024_05_01.lock"), "-e", "trace=flock",
                          "-e", f"inject=flock:delay_exit={DELAY_US}:when=1"],
        ready=lambda n: is_locked(n.p.day),
        at_kill=_none_started,
    ),
    "two-builds-running": Moment(
        behaviours=dict.fromkeys(IDS, "child+go:60"),
        ready=lambda n: sum(n.p.starts(b) for b in IDS) == 2,
        at_kill=_two_running,
    ),
    # The recipe exited, its package still in its output folder: held in the unlink of
    # the recipe's process-group record, right after the recipe ended.
    "recipe-exited-output-uncollected": Moment(
        strace=lambda n: ["-P", str(_record(n, "manywheel_3.8_cpu")), "-e", "trace=unlink,unlinkat",
                          "-e", f"inject=unlink,unlinkat:delay_exit={DELAY_US}"],
        ready=lambda n: n.p.delivered("manywheel_3.8_cpu") == 1
        and not _record(n, "manywheel_3.8_cpu").exists(),
        at_kill=_uncollected,
    ),
    # Footer written, log not yet moved into succeeded/: killed by the kernel at the rename.
    "footer-written-log-not-moved": Moment(
        strace=lambda n: ["-P", str(_log_path(n, "manywheel_3.8_cpu")), "-e", "trace=rename",
                          "-e", "inject=rename:signal=KILL"],
        killed_by_strace=True,
        at_kill=_footer_unfiled,
        adopted=("manywheel_3.8_cpu",),
    ),
    # Log moved into succeeded/, state.json not yet told: held right after the rename.
    "log-moved-state-not-updated": Moment(
        strace=lambda n: ["-P", str(_log_path(n, "manywheel_3.8_cpu")), "-e", "trace=rename",
                          "-e", f"inject=rename:delay_exit={DELAY_US}"],
        ready=lambda n: (n.p.day / "logs/succeeded/manywheel_3.8_cpu.log").exists(),
        at_kill=_filed_not_recorded,
        adopted=("manywheel_3.8_cpu",),
    ),
    "between-builds-half-succeeded": Moment(
        behaviours={b: "child+go:60" for b in IDS[-2:]},
        ready=lambda n: len(n.succeeded()) == 4 and sum(n.p.starts(b) for b in IDS[-2:]) == 2,
        at_kill=lambda n: None,
    ),
    # Mid-upload: the 4 MB package copied into the mirror's temporary file, not yet moved
    # into place.
    "mid-upload-copied-not-installed": Moment(
        # The store writes the bytes it hashes (read/write, no sendfile): held on entering the
        # rename that would install the copy, the first one into the cpu folder (BIG's).
        strace=lambda n: ["-P", str((n.store / key_of(BIG)).parent),
                          "-e", "trace=rename,renameat,renameat2",
                          "-e", f"inject=rename,renameat,renameat2:delay_enter={DELAY_US}:when=1"],
        ready=lambda n: bool(n.tmp_files())
        and n.tmp_files()[0].stat().st_size == _package(n, BIG).stat().st_size,
        at_kill=_copied_not_installed,
    ),
    # Mid-upload: the object in place, its sha256 metadata not yet written: held in the
    # rename that put it there. The store renames relative to its folders' descriptors
    # (no symlink followed), so the folder is what strace matches: the first rename into
    # the cpu folder is the first package's, BIG's.
    "mid-upload-installed-no-metadata": Moment(
        strace=lambda n: ["-P", str((n.store / key_of(BIG)).parent),
                          "-e", "trace=rename,renameat,renameat2",
                          "-e", f"inject=rename,renameat,renameat2:delay_exit={DELAY_US}:when=1"],
        ready=lambda n: (n.store / key_of(BIG)).exists(),
        at_kill=_installed_no_metadata,
    ),
    # Between uploads: three packages published and recorded, the fourth waiting.
    "between-uploads": Moment(
        hold=key_of(IDS[3]),
        holds_before=tuple(key_of(b) for b in IDS[:3]),
        ready=lambda n: len(n.published()) == 3,
        at_kill=_three_published,
    ),
    # Mid-index: the cpu folder's manifest and project pages written, its root pages not.
    "mid-index-manifest-written": Moment(
        hold="whl/nightly/cpu/index.html",
        holds_before=_cpu_pages(),
        ready=lambda n: (n.store / "whl/nightly/cpu/demo/index.html").exists(),
        at_kill=_manifest_no_root_page,
    ),
    # Mid-index, second folder: cpu done, cu100's manifest written, its pages not.
    "mid-index-second-folder": Moment(
        hold="whl/nightly/cu100/demo/index.html",
        holds_before=(*_cpu_pages(), "whl/nightly/cpu/index.html", "whl/nightly/cpu/demo_nightly.html",
                      "whl/nightly/cu100/.index.json"),
        ready=lambda n: (n.store / "whl/nightly/cu100/.index.json").exists(),
        at_kill=_second_folder_half,
    ),
    # After the index, while the night's report is being published (summary not written).
    "publishing-the-report": Moment(
        hold="whl/nightly/reports/2024_05_01_m.html",
        holds_before=(*_cpu_pages(), "whl/nightly/cpu/index.html", "whl/nightly/cpu/demo_nightly.html",
                      "whl/nightly/cu100/.index.json", "whl/nightly/cu100/index.html",
                      "whl/nightly/cu100/demo_nightly.html",
                      *(f"whl/nightly/cu100/{b.replace('.', '-').replace('_', '-')}/index.html"
                        for b in IDS if b.endswith("cu100"))),
        ready=lambda n: (n.store / "whl/nightly/cu100/demo_nightly.html").exists(),
        at_kill=_index_done_report_not,
    ),
}


@contextmanager
def holding(store: Path, key: str | None) -> Iterator[None]:
    """Hold the exclusive flock FileStore takes to write `key` (and shares to read it)."""
    if key is None:
        yield
        return
    locks = store / ".nightly-store" / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    fd = os.open(locks / f"{stripe(key)}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _wait(
    pred: Callable[[], bool], traced: Any, what: str, timeout: float = 60, *, ends: bool = False
) -> None:
    """Poll `pred`; unless the wait is for nightly to end (`ends`), nightly ending first is
    a failure (it went past the moment)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        if not ends and not traced.running() and not pred():
            out, err = traced.wait()
            raise AssertionError(f"nightly ended before {what}:\n{out[-3000:]}\n{err[-3000:]}")
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("moment", list(MOMENTS))
def test_kill9_then_rerun_completes_once_and_the_mirror_is_whole(
    moment: str, tmp_path: Path, night_project: Any, run_cli: Any
) -> None:
    m = MOMENTS[moment]
    if m.hold:
        assert stripe(m.hold) not in {stripe(k) for k in m.holds_before}, (
            "the held stripe is shared by an object written earlier: pick another key")
    signals = tmp_path / "p" / "signals"
    store = tmp_path / "mirror"
    p = night_project(
        matrix=MATRIX, recipes={"manywheel": wheel_recipe(signals, m.behaviours)},
        extra=publish_toml(store),
    )
    (signals / f"{BIG}.big").write_text(str(4 * 1024 * 1024))
    n = Night(p, store, tmp_path)
    args = run_args(p.config)

    with holding(store, m.hold):
        strace_args = m.strace(n) if m.strace else ["-e", "trace=none"]
        traced = start_traced(args, strace_args, tmp_path, seccomp=not m.killed_by_strace)
        try:
            pid = traced.nightly_pid
            if m.killed_by_strace:
                _wait(lambda: not alive(pid), traced, f"the kernel's kill at {moment}", ends=True)
            else:
                _wait(lambda: m.ready(n), traced, moment)
                time.sleep(0.3)  # let nightly go on if it could (it must not: it is held)
                assert alive(pid), f"nightly is no longer running at {moment}"
                traced.kill9()
                _wait(lambda: not alive(pid), traced, "nightly to die", ends=True)
            m.at_kill(n)
            before = {b: (n.status(b), p.starts(b)) for b in IDS}
        finally:
            traced.stop()
    for b in IDS:
        p.go(b)
    # The rerun comes the next morning: what the killed run left in the mirror's temporary
    # folder is a day old by then.
    day_ago = time.time() - 86400
    for f in n.tmp_files():
        os.utime(f, (day_ago, day_ago))

    code, out, err = run_cli(args, timeout=120)
    assert code == 0, (out, err)
    check_completed_once(n, before, m.adopted)


def check_completed_once(n: Night, before: dict[str, tuple[str, int]], adopted: tuple[str, ...]) -> None:
    p, state = n.p, n.state["builds"]
    assert sorted(state) == IDS
    for bid in IDS:
        entry = state[bid]
        assert entry["status"] == "succeeded", (bid, entry)
        log = (p.day / "logs/succeeded" / f"{bid}.log").read_text()
        assert log.count(SUCCEEDED_FOOTER) == 1, (bid, log[-2000:])
        if before[bid][0] == "succeeded" or bid in adopted:
            assert p.starts(bid) == before[bid][1], f"{bid} had finished before the kill but ran again"
        (pkg,) = entry["packages"]
        filed = p.day / pkg["path"]
        assert filed.name == wheel_name(bid, cuda_of(bid))
        assert sha256_of(filed) == pkg["sha256"]
        dest = f"{n.store.as_uri()}/{key_of(bid)}"
        assert entry["published"] == {dest: pkg["sha256"]}, (bid, entry["published"])
        assert not entry.get("upload_error")
    assert not list((p.day / "logs").glob("*.log")), "a log left unfiled"
    assert not list((p.day / "logs/failed").iterdir())
    assert sorted(f.name for f in (p.day / "packages").rglob("*") if f.is_file()) == sorted(
        wheel_name(b, cuda_of(b)) for b in IDS
    )
    summary = p.summary()
    assert summary["exit_code"] == 0, summary
    assert not summary["failed_uploads"], summary
    check_published(n.store, expected_objects(n.state))
    # A killed upload's temporary copy (up to a whole package) must not stay in the mirror
    # for ever: once the night has completed, nothing is left from a writer that died.
    assert not n.tmp_files(), f"left in the mirror: {[(f.name, f.stat().st_size) for f in n.tmp_files()]}"
    for pid in p.pids():
        assert not alive(pid), f"a recipe process ({pid}) outlived the night"
