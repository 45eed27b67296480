"""The day's staged inputs on a worker host: the source and recipes tarballs the orchestrator
staged (`staging.make_tarball`) fetched, checked against their sha256 and unpacked once per
content and host (`ensure_input`), and dropped when unused for a while (`prune_inputs`)."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from nightly.errors import NightlyError
from nightly.files import discard_tree, remove_tree, sha256_file
from nightly.stores import Store
from nightly.workspace.archive import Limits, unpack

KEEP_INPUTS_S = 2 * 86400  # fetched inputs unused this long are dropped from a host


# A staged source (a whole checkout with its submodules) is far larger than an sdist.
INPUT_LIMITS = Limits(members=5_000_000, total_bytes=256 << 30, ratio=1000)


def ensure_input(
    store: Store, key: str, sha256: str, folder: Path, kind: str, *, size: int = 0
) -> Path:
    """The day's source or recipes on this host: fetched from staging (never more than the
    `size` the orchestrator staged, when known) and unpacked once per content (several builds
    of one host share it; an flock makes them wait for one fetch)."""
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{kind}-{sha256[:16]}"
    dest, done = folder / name, folder / f"{name}.ok"
    fd = os.open(folder / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if done.exists() and dest.is_dir():
            done.touch()  # its time of last use, for prune_inputs
            return dest
        archive = folder / f"{name}.tar.gz"
        store.get(key, archive, max_bytes=size or None)
        got = sha256_file(archive)
        if got != sha256:
            raise NightlyError(f"staging {key}: sha256 {got} is not the expected {sha256}")
        if dest.exists():
            remove_tree(dest)
        unpack(archive, dest, links=True, limits=INPUT_LIMITS)
        archive.unlink()
        done.touch()
        return dest
    finally:
        os.close(fd)  # releases the flock


def prune_inputs(folder: Path, keep_s: float = KEEP_INPUTS_S) -> None:
    """Drop fetched sources and recipes not used for `keep_s` (one is fetched per day)."""
    now = time.time()
    for done in folder.glob("*.ok"):
        name = done.name[: -len(".ok")]
        try:
            if now - done.stat().st_mtime < keep_s:
                continue
        except OSError:
            continue
        lock = folder / f"{name}.lock"
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue  # being fetched right now: in use
        try:
            done.unlink(missing_ok=True)
            discard_tree(folder / name)
            lock.unlink(missing_ok=True)
        finally:
            os.close(fd)
