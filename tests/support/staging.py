"""Writing a staging store by hand, as a worker would: an attempt's files under its prefix."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from nightly.cluster.staging import ATTEMPT_JSON, LOG_TXT, RESULT_JSON
from nightly.stores import FileStore


def put_attempt(store: FileStore, prefix: str, about: Mapping[str, Any], *,
                log: bytes | None = None, chunks: tuple[bytes, ...] = (),
                result: Mapping[str, Any] | None = None) -> None:
    """attempt.json (`about`), streamed log chunks, log.txt and result.json under `prefix`."""
    store.put_bytes(prefix + ATTEMPT_JSON, json.dumps(dict(about)).encode(), "application/json")
    for i, c in enumerate(chunks, 1):
        store.put_bytes(f"{prefix}log/{i:06d}", c, "text/plain")
    if log is not None:
        store.put_bytes(prefix + LOG_TXT, log, "text/plain")
    if result is not None:
        store.put_bytes(prefix + RESULT_JSON, json.dumps(dict(result)).encode(),
                        "application/json")
