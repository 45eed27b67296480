"""Secret masking, in one place: nothing nightly prints or writes carries a credential.

- `mask_env`: an environment shown in a build log's header, with the values of variables
  whose names look secret replaced by `****`;
- `safe_url`: any text with every `scheme://user:password@` reduced to `scheme://***@`;
- `mask`: a text with every occurrence of the given secrets (also URL-quoted, base64) as `***`;
- `secret_values`: every credential value the configuration points at (publishing, cache,
  notification), so build output can be masked by value wherever it appears;
- `Masker`: the same masking over a stream of bytes (a build's output as it comes), a secret
  split across two chunks included.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

SECRET_RE = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_KEY|ACCESS_KEY|AUTH)", re.I)
_USERINFO = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://)[^/@\s]+@")
# The standard AWS variables boto3 and sccache read (the S3 stores' and the cache's keys).
AWS_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
# Shorter values are not masked: "***" for every "1" of a log helps nobody.
_MIN_SECRET = 6


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: ("****" if SECRET_RE.search(k) else v) for k, v in env.items()}


def safe_url(url: str) -> str:
    """`url` (or any text) with every `scheme://user:password@` reduced to `scheme://***@`."""
    return _USERINFO.sub(r"\1***@", url)


def forms(secret: str) -> set[str]:
    """The ways a secret shows up in text: as is, URL-quoted, base64 (standard and URL-safe,
    with and without padding)."""
    raw = secret.encode()
    out = {secret, quote(secret, safe=""), quote(secret)}
    for enc in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
        text = enc.decode()
        out |= {text, text.rstrip("=")}
    return {f for f in out if f}


def mask(text: str, *secrets: str) -> str:
    """`text` with every occurrence of each secret (also URL-quoted, base64) replaced by `***`."""
    for secret in secrets:
        if not secret:
            continue
        # Longest first: a quoted form may contain the plain one.
        for form in sorted(forms(secret), key=len, reverse=True):
            text = text.replace(form, "***")
    return text


def secret_values(config: Any, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Every credential value this configuration can use, read where nightly reads them:
    the AWS variables, the anaconda token (variable or file), the PyPI and SMTP passwords."""
    env = os.environ if environ is None else environ
    names = list(AWS_VARS)
    publish = getattr(config, "publish", None)
    notify = getattr(config, "notify", None)
    values: list[str] = []
    if publish is not None:
        names += [publish.token_env, publish.pypi_password_env]
        if publish.token_file:
            with contextlib.suppress(OSError, UnicodeDecodeError):
                values.append(Path(publish.token_file).expanduser().read_text().strip())
    if notify is not None:
        names.append(notify.smtp_password_env)
    values += [env.get(n, "") for n in names if n]
    return tuple(sorted({v for v in values if len(v) >= _MIN_SECRET}))


class Masker:
    """Masks secrets in a stream of chunks. The tail of a chunk that could be the start of a
    secret is held back until the next chunk (or `flush`) says what it is."""

    def __init__(self, secrets: Iterable[str]) -> None:
        found: set[bytes] = set()
        for s in secrets:
            if len(s) >= _MIN_SECRET:
                found |= {f.encode() for f in forms(s)}
        self.forms = sorted(found, key=len, reverse=True)
        self.held = b""

    def feed(self, chunk: bytes) -> bytes:
        if not self.forms:
            return chunk
        data = self._replace(self.held + chunk)
        keep = self._partial_tail(data)
        self.held = data[len(data) - keep:] if keep else b""
        return data[: len(data) - keep]

    def flush(self) -> bytes:
        out, self.held = self._replace(self.held), b""
        return out

    def _replace(self, data: bytes) -> bytes:
        for form in self.forms:
            data = data.replace(form, b"***")
        return data

    def _partial_tail(self, data: bytes) -> int:
        """The length of the longest tail of `data` that begins some secret's form."""
        window = len(self.forms[0]) - 1  # the longest form, less one byte
        start = max(0, len(data) - window)
        best = 0
        for form in self.forms:
            # Only where the form's first two bytes occur in the window can a tail of two
            # bytes or more begin it (searched for whole: far fewer hits than one byte).
            i = data.find(form[:2], start)
            while i != -1 and len(data) - i > best:
                if len(data) - i < len(form) and form.startswith(data[i:]):
                    best = len(data) - i
                    break
                i = data.find(form[:2], i + 1)
            if best == 0 and data.endswith(form[:1]):
                best = 1
        return best


__all__ = ["AWS_VARS", "SECRET_RE", "Masker", "forms", "mask", "mask_env", "safe_url",
           "secret_values"]
