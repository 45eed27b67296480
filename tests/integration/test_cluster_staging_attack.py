"""An attacker who can write the staging folder, against a real TLS Dask cluster on loopback.

The cluster is test_cluster_tls's (scheduler and three workers with `nightly cluster certs`
certificates, started once for this module); the orchestrator is the real `nightly` command.
The attacker is a separate process that only writes in the staging folder while the
orchestrator is frozen (SIGSTOP) after the victims' workers have finished: it swaps an
attempt's log.txt for a symlink to the orchestrator's TLS key, a package for a FIFO or a
symlink to /dev/zero, a log for one larger than nightly reads; or, before the night, makes
staging/<day> a symlink to another folder. None of it reaches the orchestrator's key or files.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nightly.cluster.stagedlog import STAGED_LOG_MAX
from tests.support.fixture_types import MakeProject, MakeRecipe, RunCli, StartCli, WaitUntil
from tests.support.modules import load_file

_t: Any = load_file("integration_cluster_tls_helpers",
                    Path(__file__).with_name("test_cluster_tls.py"))
ALL_BUILDS, DaskCluster, make_project = _t.ALL_BUILDS, _t.DaskCluster, _t.make_project
mirror_files, run_args, staged_files = _t.mirror_files, _t.run_args, _t.staged_files
SUCCEEDED_FOOTER = _t.SUCCEEDED_FOOTER

KEY_THIEF = "manywheel_3.7m_cu100"  # its log.txt becomes a symlink to the orchestrator's key
FIFO = "manywheel_3.6m_cu100"  # its package becomes a FIFO
ZERO = "manywheel_3.7m_cpu"  # its package a symlink to /dev/zero
BIG = "manywheel_3.6m_cpu"  # its log.txt larger than nightly reads of a staged log
VICTIMS = (KEY_THIEF, FIFO, ZERO, BIG)


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    base = tmp_path_factory.mktemp("tls-cluster")
    c = DaskCluster(base, certs=_t._certs(base / "certs"))
    c.start()
    yield c
    c.close()


@pytest.fixture
def cluster(tls_cluster: Any) -> Any:
    tls_cluster.ensure()
    return tls_cluster


def attacker(script: str) -> None:
    """Run `script` in a process of its own: what a host that can write staging does."""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)


def _secret_lines(*files: Path) -> list[bytes]:
    lines = [ln for f in files for ln in f.read_bytes().splitlines()
             if ln and not ln.startswith(b"-----")]
    assert lines
    return lines


def _assert_nowhere(secret: list[bytes], *roots: Path, texts: tuple[str, ...] = ()) -> int:
    """No line of `secret` in any file under `roots` (symlinks are not followed: staging's
    own links are the attacker's, not something nightly wrote) nor in `texts`."""
    scanned = 0
    for root in roots:
        for f in root.rglob("*"):
            if f.is_symlink() or not f.is_file() or f.name.endswith("-key.pem") \
                    or f.name == "ca-key.pem":
                continue
            data = f.read_bytes()
            scanned += 1
            for line in secret:
                assert line not in data, f"secret bytes in {f}"
            assert b"PRIVATE KEY-----" not in data, f"a private key in {f}"
    for t in texts:
        assert all(line.decode("utf-8", "replace") not in t for line in secret)
    return scanned


def _finished(p: Any, start_cli: Any, wait_until: Any) -> tuple[Any, dict[str, Path]]:
    """The night started, frozen once every victim runs, the victims then finished on their
    workers (packages, log.txt and result.json in staging, not yet collected)."""
    night = start_cli(run_args(p))
    wait_until(lambda: all(p.starts(v) == 1 for v in VICTIMS), timeout=60,
               what="the victims to start")
    os.kill(night.pid, signal.SIGSTOP)
    for v in VICTIMS:
        p.go(v)

    def attempts() -> dict[str, Path]:
        return {v: f.parent for f in staged_files(p) for v in VICTIMS
                if f.name == "result.json" and f"/builds/{v}/" in str(f)}

    wait_until(lambda: len(attempts()) == len(VICTIMS), timeout=60,
               what="the victims' results in staging")
    return night, attempts()


def test_an_attacker_writing_staging_gets_nothing(
    night_project: MakeProject, make_recipe: MakeRecipe, start_cli: StartCli, wait_until: WaitUntil,
    cluster: Any
) -> None:
    """(a) log.txt a symlink to the orchestrator's key, (c) a package that is a FIFO or a
    symlink to /dev/zero, (d) a log larger than the limit: one night."""
    certs = cluster.certs
    p = make_project(night_project, make_recipe, cluster, extra=_t._tls_toml(certs),
                     behaviours={v: "go:60" for v in VICTIMS}, default="sleep:0.2")
    key_file = certs / "orchestrator-key.pem"
    key_before = key_file.read_bytes()
    night, attempts = _finished(p, start_cli, wait_until)
    (fifo_pkg,) = (attempts[FIFO] / "packages").iterdir()
    (zero_pkg,) = (attempts[ZERO] / "packages").iterdir()
    size = STAGED_LOG_MAX + (1 << 20)
    attacker(f"""
import os
os.replace({str(attempts[KEY_THIEF] / "log.txt")!r}, {str(attempts[KEY_THIEF] / "old")!r})
os.symlink({str(key_file)!r}, {str(attempts[KEY_THIEF] / "log.txt")!r})
os.unlink({str(fifo_pkg)!r}); os.mkfifo({str(fifo_pkg)!r})
os.unlink({str(zero_pkg)!r}); os.symlink("/dev/zero", {str(zero_pkg)!r})
with open({str(attempts[BIG] / "log.txt")!r}, "wb") as f:
    f.write(b"FIRST LINE OF THE BIG LOG\\n")
    f.truncate({size} - 25)  # sparse: no disk; 25: the last line
    f.seek(0, 2)
    f.write(b"LAST LINE OF THE BIG LOG\\n")
""")
    os.kill(night.pid, signal.SIGCONT)
    code, out, err = night.wait(timeout=180)  # a read of a FIFO or of /dev/zero never ends
    assert code == 1, (out, err)
    state = p.state()["builds"]

    # (a) The build fails naming the symlink; no byte of the key anywhere nightly writes.
    e = state[KEY_THIEF]
    assert e["status"] == "failed"
    assert e["reason"].startswith("symlink in staging: ")
    assert "log.txt is a symbolic link" in e["reason"]
    assert "nothing of this attempt is used" in e["reason"]
    assert e["packages"] == []
    log = (p.day / "logs" / "failed" / f"{KEY_THIEF}.log").read_text()
    assert "this attempt's log was not read: symlink in staging" in log
    assert key_file.read_bytes() == key_before
    # The clean-up removed the attacker's symlinks and FIFOs themselves, never their targets.
    left = [f for f in (p.path / "staging").rglob("*")
            if not f.is_dir() and ".nightly-store" not in f.parts]
    assert left == []
    # (c) A FIFO, or /dev/zero behind a symlink: refused at once, the night went on.
    for bid, what in ((FIFO, "is a FIFO"), (ZERO, "is a symbolic link")):
        e = state[bid]
        assert e["status"] == "failed", e
        assert what in e["reason"], e
        assert e["packages"] == []
    assert f"packages/{zero_pkg.name} is a symbolic link" in state[ZERO]["reason"]
    assert f"packages/{fifo_pkg.name} is a FIFO" in state[FIFO]["reason"]
    # (d) The oversized log: cut, with a note; the build itself is fine.
    e = state[BIG]
    assert e["status"] == "succeeded", e
    big = p.day / "logs" / "succeeded" / f"{BIG}.log"
    assert big.stat().st_size < STAGED_LOG_MAX + 64 * 1024
    with big.open("rb") as f:
        head = f.read(2 << 20)  # the attempt header, the first MiB, the note
        f.seek(-(1 << 16), os.SEEK_END)
        tail = f.read()
    assert b"FIRST LINE OF THE BIG LOG" in head
    assert b"LAST LINE OF THE BIG LOG" in tail
    assert (f"this log was cut: staging holds {size} bytes, more than the {STAGED_LOG_MAX}"
            .encode()) in head

    # Nothing of the victims that failed was published; the others were.
    published = mirror_files(p)
    assert len(published) == len(ALL_BUILDS) - 3
    others = [b for b in ALL_BUILDS if b not in (KEY_THIEF, FIFO, ZERO, BIG)]
    assert all(state[b]["status"] == "succeeded" for b in others)
    # The key (and the CA's, and every host's) in no log, state entry, report, published
    # file or output; the night's seal key neither.
    secret = _secret_lines(*certs.glob("*-key.pem"))
    seal = (p.day / "work" / "cluster" / "seal.key").read_bytes()
    scanned = _assert_nowhere([*secret, seal.hex().encode()], p.path, cluster.base,
                              texts=(out, err))
    assert scanned > 20


def test_a_symlinked_day_folder_in_staging_reaches_nothing(
    night_project: MakeProject, make_recipe: MakeRecipe, run_cli: RunCli, cluster: Any, tmp_path: Path
) -> None:
    """(b) staging/<day> is a symlink to another folder before the night: nothing there is
    read, written or deleted (the end-of-night clean-up included)."""
    p = make_project(night_project, make_recipe, cluster, extra=_t._tls_toml(cluster.certs),
                     default="sleep:0.2")
    outside = tmp_path / "precious"
    files = {"a.txt": os.urandom(8).hex().encode(), "builds/x/tok/log.txt":
             os.urandom(8).hex().encode(), "inputs/keep.bin": os.urandom(64)}
    for rel, data in files.items():
        (outside / rel).parent.mkdir(parents=True, exist_ok=True)
        (outside / rel).write_bytes(data)
    before = {f: f.stat().st_mtime_ns for f in outside.rglob("*")}
    attacker(f"""
import os
os.makedirs({str(p.path / "staging")!r}, exist_ok=True)
os.symlink({str(outside)!r}, {str(p.path / "staging" / "2024_05_01")!r})
""")
    code, out, err = run_cli(run_args(p), timeout=120)
    assert code == 1, (out, err)
    assert "cannot write to the staging store" in err
    assert "symlink in staging: " in err
    assert "2024_05_01 is a symbolic link" in err
    assert all(p.starts(b) == 0 for b in ALL_BUILDS)  # nothing ran on the workers
    after = {f: f.stat().st_mtime_ns for f in outside.rglob("*")}
    assert after == before  # nothing added, deleted or changed
    for rel, data in files.items():
        assert (outside / rel).read_bytes() == data
    assert (p.path / "staging" / "2024_05_01").is_symlink()
    digests = [hashlib.sha256(d).hexdigest().encode() for d in files.values()]
    _assert_nowhere([files["a.txt"], files["builds/x/tok/log.txt"],
                     files["inputs/keep.bin"][:16], *digests], p.path, texts=(out, err))


@pytest.mark.parametrize("address", ["tcp://192.0.2.2@127.0.0.1:8786",
                                     "tcp://127.0.0.1#@192.0.2.2:8786"])
def test_addresses_a_url_parser_reads_differently_are_refused(
    night_project: MakeProject, make_recipe: MakeRecipe, run_cli: RunCli, cluster: Any, address: str
) -> None:
    """The host Dask would connect to is not loopback: refused before anything, exit 2."""
    p = make_project(night_project, make_recipe, cluster)
    code, out, err = run_cli(run_args(p, "--cluster", address), timeout=60)
    assert code == 2, (out, err)
    assert f"refusing the unencrypted cluster address {address}" in err
    assert not p.day.exists()


def _listening(pid: int) -> list[str]:
    """The local addresses (hex, as /proc/net/tcp* writes them) of the process's listening
    TCP sockets."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    out = []
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            f = row.split()
            if f[3] == "0A" and f[9] in inodes:  # LISTEN
                out.append(f[1].split(":")[0])
    return out


def test_the_documented_commands_listen_on_loopback_only(cluster: Any) -> None:
    """The scheduler and the workers, started with the flags docs/cluster.md gives for one
    machine (--host 127.0.0.1, --dashboard-address 127.0.0.1:...): every port they listen
    on, Dask's and the HTTP server's (which runs even with --no-dashboard), is on loopback."""
    loopback = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1, ::1
    for name, proc in cluster.procs.items():
        addresses = _listening(proc.pid)
        assert len(addresses) >= 2, (name, addresses)  # the comm port and the HTTP server
        assert set(addresses) <= loopback, (name, addresses)
