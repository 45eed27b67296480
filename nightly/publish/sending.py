"""What upload sends is what it hashed: never the sha256 state.json carries.

A package is copied into a private folder (0700, nightly's own) while it is hashed; that copy
is what goes to the store, with the sha256 of those very bytes. When they are not the bytes
the build recorded (the package changed after it was built and tested), nothing is sent and
the upload of that file fails, naming it: that one read is the check that the bytes are
still those tested and signed (nothing re-hashes a package between its take-back and here).
A package's provenance goes first, from what the signing step signed. And when a name is
already in the store with other bytes, the refusal says whose they are: another build of
this day, or not this day's at all.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from nightly import provenance
from nightly.errors import NightlyError, PublishError
from nightly.files import remove_tree, sha256_file
from nightly.provenance.signed import PROVENANCE_MAX, Signatures, verifies
from nightly.stores import Store
from nightly.workspace import State

CHUNK = 1 << 20
SEND_PREFIX = ".nightly-send-"


def put_checked(store: Store, key: str, path: Path, recorded: str) -> None:
    """Upload `path` to `key` from a private copy hashed while it was made; PublishError
    (nothing sent) when that copy's bytes are not the `recorded` sha256."""
    _drop_stale_copies(path.parent)
    with tempfile.TemporaryDirectory(prefix=SEND_PREFIX, dir=path.parent) as tmp:
        copy = Path(tmp) / path.name
        digest = _copy_hashing(path, copy)
        if digest != recorded:
            raise PublishError(
                f"{path.name} changed since it was built: its bytes hash to sha256 "
                f"{digest[:16]}..., the build recorded {recorded[:16]}...; not uploaded "
                "(build it again: `nightly build` or `nightly run --rebuild <build id>`)")
        store.put(key, copy, digest)


def _drop_stale_copies(folder: Path) -> None:
    """The private copies an upload killed mid-way (kill -9) left beside the packages: one
    upload at a time per day (the day's lock), so any found now is stale. Only real folders
    of that name go, never through a link."""

    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if not name.startswith(SEND_PREFIX):
            continue
        try:
            if stat.S_ISDIR(os.lstat(folder / name).st_mode):
                remove_tree(folder / name)
        except OSError:
            continue


def _copy_hashing(src: Path, dest: Path) -> str:
    h = hashlib.sha256()
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as s, dest.open("wb") as out:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PublishError(f"{src.name} is not a regular file: not uploaded")
        while chunk := s.read(CHUNK):
            h.update(chunk)
            out.write(chunk)
    return h.hexdigest()


def refusal(store: Store, state: State, key: str, path: Path, sha256: str, recorded: str | None,
            build_id: str) -> PublishError:
    """Why `key` (in the store with other bytes than this build's `sha256`) is not replaced:
    which build of this day published it, or that none did, with the sha256 the store
    records and the one its bytes have."""
    dest = f"{store.url}/{key}"
    others = sorted(b for b, e in state.builds.items() if b != build_id and dest in e.published)
    actual = stored_sha256(store, key, path.parent)
    held = (f"the store records sha256 {(recorded or 'none')[:16]}..."
            + ("" if actual == recorded else
               f", its bytes hash to {(actual or 'unreadable')[:16]}...")
            + f"; this build's is {sha256[:16]}...")
    if others:
        return PublishError(
            f"{path.name} is already published by build {others[0]} of this day with other "
            f"bytes ({held}): one file name holds one set of bytes, so this build's is not "
            "published; give each build its own file name")
    return PublishError(
        f"{path.name} is already published with other bytes, not by this day's state "
        f"(another day's night or another tool published it; {held}): pass --rebuild with "
        "the build's id to replace it")


def stored_sha256(store: Store, key: str, scratch: Path) -> str | None:
    """The sha256 of the stored object's bytes (None when it cannot be read)."""
    with tempfile.TemporaryDirectory(dir=scratch, prefix=".nightly-check-") as tmp:
        dest = Path(tmp) / "object"
        try:
            store.get(key, dest)
        except (PublishError, OSError):
            return None
        return sha256_file(dest)


def provenance_beside(store: Store, key: str, name: str, sha256: str, signatures: Signatures,
                      log: Callable[[str], None]) -> str | None:
    """Put `<key>.provenance.json` into the store when the signing step signed this package
    and the store's copy differs: before the package itself, so nobody sees it without it.
    Returns its sha256 (for the index pages), None when the package has none nightly signed
    (a provenance file nightly did not sign is never published)."""
    data = signatures.of(name, sha256)
    pkey = key + provenance.SUFFIX
    if data is None:
        if name in signatures.refused:
            log(f"provenance: {name}: not published: it does not verify with the "
                "site's key (nightly publishes only what it signed)")
        return _published_sha(store, pkey, name, sha256, signatures)
    sha = hashlib.sha256(data).hexdigest()
    info = store.head(pkey)
    if info is None or info.sha256 != sha:
        store.put_bytes(pkey, data, "application/json")
        log(f"provenance: {store.url}/{pkey}")
    return sha


def _published_sha(store: Store, pkey: str, name: str, sha256: str,
                   signatures: Signatures) -> str | None:
    """The sha256 of the provenance already in the store when it is nightly's own for this
    file (the pages keep listing it), else None."""
    if signatures.public_key is None:
        return None
    try:
        got = store.get_bytes(pkey, max_bytes=PROVENANCE_MAX)
    except NightlyError:  # unreadable or too large: not listed
        return None
    if got is None or not verifies(name, sha256, got[0], signatures.public_key):
        return None
    return hashlib.sha256(got[0]).hexdigest()


__all__ = ["provenance_beside", "put_checked", "refusal", "stored_sha256"]
