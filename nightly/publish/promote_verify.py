"""What `nightly promote` publishes is what it verified: the test channel's bytes, read.

Before anything is written to the release channel, every file of the candidate still to be
promoted is downloaded from the test channel onto this machine (bounded by the size the build
recorded), its sha256 computed from those bytes, never taken from a store's record (an S3
object's metadata, a folder store's size/mtime stamp: both are whatever its last writer
said), and compared with the sha256 the build recorded; its provenance is read from the
test channel (bounded) and verified with the configured key against that name and sha256.
Then the verified provenance (and a wheel's core metadata, from the verified wheel) is
written to the release channel, the package copied by the store (server-side on S3) and the
copy read back: its bytes must hash to the verified sha256, or it is removed. A release file
already there counts as promoted only when its bytes hash to the build's sha256.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nightly import provenance
from nightly.errors import ObjectTooLarge, PublishError
from nightly.files import sha256_file
from nightly.index import metadata

if TYPE_CHECKING:
    from nightly.stores import Store

PROVENANCE_MAX = 1 << 20  # a provenance file is a few kB


@dataclass
class Checked:
    """One test-channel file, read and verified (or why not)."""

    name: str
    problem: str = ""
    local: Path | None = None  # the verified bytes on this machine
    provenance: bytes | None = None  # its verified provenance (None: no key configured)


def bytes_sha256(store: Store, key: str, dest: Path, size: int | None) -> str | None:
    """Download `key` to `dest` (at most `size` bytes when known) and hash what was read;
    None when the object is not there. ObjectTooLarge when it holds more."""
    if store.head(key) is None:
        return None
    store.get(key, dest, max_bytes=size)
    return sha256_file(dest)


def released_matches(store: Store, key: str, sha256: str, size: int | None, tmp: Path) -> bool:
    """A release file already there is the build's: its bytes hash to the build's sha256."""
    dest = tmp / "released"
    try:
        return bytes_sha256(store, key, dest, size) == sha256
    except ObjectTooLarge:
        return False
    finally:
        dest.unlink(missing_ok=True)


def check_test_file(store: Store, src: str, *, sha256: str, size: int | None, tmp: Path,
                    public_key: Any) -> Checked:
    """Read `src` from the test channel into `tmp` and verify it: its bytes' sha256 is the
    build's, and (with a key) its provenance there verifies for that name and sha256."""
    name = src.rpartition("/")[2]
    dest = tmp / name
    try:
        got = bytes_sha256(store, src, dest, size)
    except ObjectTooLarge as e:
        return Checked(name, problem=f"{name}: the test channel's file holds more than the "
                       f"{size} bytes built ({e}): refusing to promote a file that is not "
                       "the one built")
    if got is None:
        return Checked(name, problem=f"{name}: not in the test channel ({src})")
    if got != sha256:
        return Checked(name, problem=f"{name}: its bytes in the test channel have sha256 "
                       f"{got}, not the build's sha256 {sha256}: refusing to promote a file "
                       "that is not the one built")
    if public_key is None:
        return Checked(name, local=dest)
    try:
        found = store.get_bytes(src + provenance.SUFFIX, max_bytes=PROVENANCE_MAX)
    except ObjectTooLarge:
        return Checked(name, problem=f"{name}: its provenance in the test channel is larger "
                       f"than {PROVENANCE_MAX} bytes")
    bundle = None if found is None else found[0]
    verdict = provenance.verify(name, got, bundle, public_key)
    if not verdict.ok:
        return Checked(name, problem=f"{name}: its provenance in the test channel does not "
                       f"verify: {verdict.reason}")
    return Checked(name, local=dest, provenance=bundle)


def publish_checked(store: Store, src: str, dst: str, checked: Checked, sha256: str) -> None:
    """Promote one verified file: its verified provenance and core metadata first (so nobody
    sees the package without them), then the package by the store's own copy (server-side on
    S3: the bytes never travel through this machine again), read back from the release
    folder: a copy whose bytes do not hash to `sha256` (the test file changed after it was
    verified) is removed and the promotion stops there."""
    if checked.local is None:
        raise PublishError(f"{checked.name}: not verified")
    if checked.provenance is not None:
        store.put_bytes(dst + provenance.SUFFIX, checked.provenance, "application/json")
    if dst.endswith(".whl"):  # its PEP 658 core metadata, from the verified wheel itself
        try:
            md = metadata.from_wheel(checked.local)
            store.put_bytes(dst + metadata.METADATA_SUFFIX, md.data, metadata.METADATA_TYPE)
        except (PublishError, OSError):
            pass  # the pages then do not offer it, as at upload
    store.copy(src, dst)
    back = checked.local.with_name(checked.local.name + ".back")
    try:
        got = bytes_sha256(store, dst, back, checked.local.stat().st_size)
    except ObjectTooLarge:
        got = "(more bytes than built)"
    finally:
        back.unlink(missing_ok=True)
    if got != sha256:
        store.delete(dst)
        raise PublishError(f"the release copy {store.url}/{dst} has sha256 {got}, not the "
                           f"verified {sha256} (the test file changed while promoting); it "
                           "was removed")


__all__ = ["PROVENANCE_MAX", "Checked", "check_test_file", "publish_checked", "released_matches"]
