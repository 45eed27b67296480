"""What a listing's ETag says about an object's bytes: enough to read identical small files once.

In PyTorch's layout the wheels of one version for each Python carry the same METADATA, so
their `<wheel>.metadata` files have the same bytes; a first full index run reads one of them
(`coldread.py`) and gives the others its sha256 and Requires-Python.

When objects are taken to be the same
    Their listing entries have the same size and the same ETag, and that ETag has the shape
    of a digest of the body: 32 hex digits (S3's ETag of a single-part upload without
    SSE-KMS or SSE-C is the MD5 of its bytes; MinIO, R2 and moto do the same) or 64 (the
    folder store's, a SHA-256). A multipart ETag (`"<hex>-<parts>"`) is a digest of the
    parts' digests and says nothing about the bytes; it is never used. And the shape is not
    trusted by itself: the one object that is read must have exactly that digest (`matches`),
    which is not so under SSE-KMS or SSE-C, or on a store whose ETags are not digests of the
    body; then every object is read on its own.

Why this is safe
    Two different bodies with one ETag and size is an MD5 collision, which only someone who
    can write the bucket could plant, and they could write any `.metadata` or index page
    anyway: the pages trust the bucket's writers, and this adds nothing they could not do.
    By accident (128 bits) it does not happen. A `.metadata` replaced since the listing has
    another ETag, so it is read on its own; what the pages record is checked by every client
    that downloads it (the `data-core-metadata` sha256).
"""

from __future__ import annotations

import hashlib
import re

from nightly.stores import ObjectInfo

_DIGEST = re.compile(r'"?([0-9a-f]{32}|[0-9a-f]{64})"?')

BodyKey = tuple[str, int]  # (digest, size)


def body_key(obj: ObjectInfo) -> BodyKey | None:
    """What objects with the same bytes share, when the ETag can stand for them: (digest,
    size); None for a multipart or otherwise opaque ETag."""
    m = _DIGEST.fullmatch(obj.etag or "")
    return (m.group(1), obj.size) if m else None


def matches(obj: ObjectInfo, etag: str | None, body: bytes) -> bool:
    """Whether `body`, read with `etag`, is the listed object's and its ETag is the body's
    digest (MD5 or SHA-256): only then does the ETag name these bytes."""
    key = body_key(obj)
    if key is None or etag != obj.etag or len(body) != obj.size:
        return False
    digest = key[0]
    algorithm = hashlib.md5 if len(digest) == 32 else hashlib.sha256
    return algorithm(body, usedforsecurity=False).hexdigest() == digest
