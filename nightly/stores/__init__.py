"""Where published files go: one small interface over an S3 bucket and a local mirror folder.

`base` holds the interface (Store, ObjectInfo, the errors), `s3` and `folder` the two
implementations; `open_store` picks one from a destination URL.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

from nightly.config.retry import Backoffs
from nightly.config.timeouts import ExternalTimeouts
from nightly.errors import ConfigError
from nightly.stores.base import (
    SHA256_RE,
    ObjectInfo,
    ObjectNotFound,
    PreconditionFailed,
    Store,
    check_key,
    file_sha256,
)
from nightly.stores.folder import FileStore
from nightly.stores.s3 import S3Store

__all__ = [
    "SHA256_RE",
    "FileStore",
    "ObjectInfo",
    "ObjectNotFound",
    "PreconditionFailed",
    "S3Store",
    "Store",
    "check_key",
    "file_sha256",
    "open_store",
]


def open_store(
    url: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    profile: str | None = None,
    acl: str | None = None,
    backoffs: Backoffs | None = None,
    timeouts: ExternalTimeouts | None = None,
    **tuning: Any,
) -> Store:
    """A Store for `s3://bucket[/prefix]` or `file:///absolute/path`, retrying by `backoffs`
    and waiting on S3 by `timeouts` (a configuration's `backoff` and `external_timeouts`;
    None: defaults.toml's)."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.username is not None or parsed.password is not None:
        # Never echo the URL: it carries a secret.
        raise ConfigError("credentials in a destination URL are not allowed; use a profile")
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ConfigError(f"no bucket in destination {url!r}")
        return S3Store(
            parsed.netloc,
            parsed.path.strip("/"),
            endpoint_url=endpoint_url,
            region=region,
            profile=profile,
            acl=acl,
            backoffs=backoffs,
            timeouts=timeouts,
            **tuning,
        )
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ConfigError(f"file:// destination must be local: {url!r}")
        path = Path(urllib.parse.unquote(parsed.path))
        if not path.is_absolute():
            raise ConfigError(f"file:// destination must be an absolute path: {url!r}")
        return FileStore(path, backoffs=backoffs)
    raise ConfigError(
        f"unsupported destination {parsed.scheme or url!r}", hint="use s3://BUCKET/PREFIX or file:///PATH"
    )
