"""What S3 answers, read: the sha256 a writer recorded in an object's metadata (or S3's own
whole-object checksum), a HEAD's headers as head_object's answer, a response's timestamps,
and secrets masked out of an error's text. Nothing here talks to S3 (nightly.stores.s3 does).
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import re
from datetime import datetime
from typing import Any

from nightly.stores.base import SHA256_RE, ObjectInfo

# user:password@ in URLs, and the signature parts of presigned URLs.
SECRET_IN_URL = re.compile(r"(?i)(//)[^/@\s]+@|((?:X-Amz-)?(?:Signature|Credential|Security-Token)=)[^&\s]+")


# Where other tools record a file's sha256 in the object's user metadata (x-amz-meta-…):
# nightly writes `sha256`; PyTorch's upload jobs and manage_v2.py write `checksum-sha256`.
METADATA_SHA256_KEYS = ("sha256", "checksum-sha256", "x-amz-meta-checksum-sha256")


def _recorded_sha256(metadata: dict[str, str]) -> str | None:
    """The sha256 a writer recorded in the user metadata, as lowercase hex (hex or base64)."""
    for name in METADATA_SHA256_KEYS:
        value = (metadata.get(name) or "").strip()
        if SHA256_RE.fullmatch(value.lower()):
            return value.lower()
        if len(value) == 44:
            try:
                raw = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                continue
            if len(raw) == 32:
                return raw.hex()
    return None


def head_info(key: str, r: Any) -> ObjectInfo:
    """head_object's answer as an ObjectInfo."""
    sha = _recorded_sha256(r.get("Metadata") or {}) or _native_sha256(r)
    return ObjectInfo(
        key=key,
        size=int(r["ContentLength"]),
        sha256=sha.lower() if sha else None,
        etag=r.get("ETag"),
        last_modified=r.get("LastModified"),
    )


def as_head_object(headers: dict[str, str]) -> dict[str, object]:
    """A HEAD's headers (lowercase names) as boto3's head_object would give them."""
    modified = headers.get("last-modified")
    return {
        "ContentLength": headers.get("content-length", "0"),
        "Metadata": {k[len("x-amz-meta-"):]: v for k, v in headers.items() if k.startswith("x-amz-meta-")},
        "ChecksumSHA256": headers.get("x-amz-checksum-sha256"),
        "ChecksumType": headers.get("x-amz-checksum-type"),
        "ETag": headers.get("etag"),
        "LastModified": timestamp(modified) if modified else None,
    }


def _native_sha256(head: Any) -> str | None:
    """The object's S3 SHA256 checksum as hex, when it covers the whole object."""
    value = head.get("ChecksumSHA256")
    if not value or "-" in value or head.get("ChecksumType") == "COMPOSITE":
        return None  # multipart uploads get a checksum of checksums, not the file's sha256
    try:
        return base64.b64decode(value).hex()
    except (binascii.Error, ValueError):
        return None


def timestamp(value: Any) -> datetime:
    """A response's timestamp: ISO 8601 (listings) read by datetime, HTTP dates (HEAD's and
    GET's Last-Modified) by email.utils, anything else (epoch numbers) by botocore's own
    parser; dateutil, botocore's default, costs more than the rest of a HEAD's parsing."""
    if isinstance(value, str) and "T" in value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
    if isinstance(value, str) and value.endswith("GMT"):
        try:
            return email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            pass
    from botocore.utils import parse_timestamp

    parsed: datetime = parse_timestamp(value)
    return parsed
