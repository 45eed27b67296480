"""A build attempt's log as read back from the staging store: bounded, and scrubbed.

Every host of the build network can write to staging, so an attempt's log there is text
from an untrusted source that goes into the day folder's logs, the report's failure tails
and the published report. It is read without following a symlink and only if it is a
regular file (the folder store refuses anything else: "symlink in staging"); at most
STAGED_LOG_MAX bytes of it are read (beyond that the first LOG_HEAD and the last bytes are
kept, with a line saying it was cut); and what is kept goes through
nightly.redact.scrub_staged (PEM blocks and private-key lines removed, secret-looking
variables, URL credentials and the orchestrator's secrets masked).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence, Set
from dataclasses import dataclass

from nightly.errors import PublishError, UnsafeEntry
from nightly.redact import scrub_staged
from nightly.stores import Store

STAGED_LOG_MAX = 32 * 1024 * 1024  # documented in docs/cluster.md ("Staging")
LOG_HEAD = 1024 * 1024  # of a log that is cut: its start (the rest of the budget: its end)
LOG_TXT = "log.txt"
LOG_CHUNKS = "log/"


@dataclass(frozen=True)
class StagedLog:
    raw: bytes  # the bytes as found (cut when too long)
    text: bytes  # what goes into nightly's logs: `raw` scrubbed, notes added
    whole: bool  # `raw` is the whole log as found (so its sha256 can be checked)


def _cut_note(size: int, limit: int, head: int) -> bytes:
    return (f"\n[nightly] ... this log was cut: staging holds {size} bytes, more than the "
            f"{limit} nightly reads of a staged log; its first {head} and last "
            f"{limit - head} bytes are kept ...\n").encode()


def _read_one(store: Store, key: str, limit: int) -> tuple[bytes, bytes, bool] | None:
    """(raw, raw with a cut note, whole) of one object, at most `limit` bytes read."""
    got = store.read_prefix(key, limit + 1)
    if got is None:
        return None
    data, size = got
    if len(data) <= limit and size <= limit:
        return data, data, True
    size = max(size, len(data))
    head = data[: min(LOG_HEAD, limit // 2)]
    tail_len = limit - len(head)
    tail = store.read_range(key, max(size - tail_len, len(head)), tail_len)[:tail_len]
    return head + tail, head + _cut_note(size, limit, len(head)) + tail, False


def log_check(body: bytes, want: str) -> bytes:
    """A warning under a log that is not the one its worker recorded (verified staging)."""
    got = hashlib.sha256(body).hexdigest()
    if not want or got == want:
        return b""
    return (f"\n[nightly] warning: this log as found in staging (sha256 {got}) is not the one "
            f"the worker recorded (sha256 {want}): it was changed in staging, or is missing "
            "there\n").encode()


def read_staged_log(
    store: Store, prefix: str, names: Set[str], *, secrets: Sequence[str] = (),
    limit: int = STAGED_LOG_MAX,
) -> StagedLog:
    """The attempt's whole log (`prefix` + log.txt), else the chunks it streamed (log/...)
    before it ended, concatenated: at most `limit` bytes read in all."""
    try:
        if LOG_TXT in names:
            got = _read_one(store, prefix + LOG_TXT, limit)
            if got is not None:
                return StagedLog(got[0], scrub_staged(got[1], secrets), got[2])
        raw, note, left = b"", b"", limit
        for name in sorted(n for n in names if n.startswith(LOG_CHUNKS)):
            part = store.read_prefix(prefix + name, left)
            if part is None:
                continue  # deleted meanwhile
            raw += part[0]
            left -= len(part[0])
            if part[1] > len(part[0]):
                note = (f"\n[nightly] ... this log was cut: nightly reads at most {limit} bytes "
                        "of a staged log ...\n").encode()
                break
        return StagedLog(raw, scrub_staged(raw + note, secrets), not note)
    except UnsafeEntry as e:
        return StagedLog(b"", f"\n[nightly] this attempt's log was not read: {e}\n".encode(),
                         False)
    except (PublishError, OSError) as e:
        return StagedLog(b"", f"\n[nightly] this attempt's log could not be read: {e}\n".encode(),
                         False)


__all__ = ["LOG_HEAD", "STAGED_LOG_MAX", "StagedLog", "log_check", "read_staged_log"]
