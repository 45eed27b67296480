"""Secret masking, in one place: nothing nightly prints or writes carries a credential.

- `mask_env`: an environment shown in a build log's header, with the values of variables
  whose names look secret replaced by `****`;
- `safe_url`: any text with every `scheme://user:password@` reduced to `scheme://***@`;
- `mask`: a text with every occurrence of the given secrets (also URL-quoted, base64) as `***`;
- `secret_values`: every credential value the configuration points at (publishing, cache,
  notification), so build output can be masked by value wherever it appears;
- `Masker`: the same masking over a stream of bytes (a build's output as it comes), a secret
  split across two chunks included;
- `scrub_staged`: text another host wrote (a build log read back from the cluster's staging
  store) made fit for logs and reports: PEM blocks and private-key lines replaced by a line
  saying so, `NAME=value` lines of secret-looking names masked as `mask_env` does, URL
  credentials and the given secrets masked.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from urllib.parse import quote

SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "API_KEY", "ACCESS_KEY",
                "AUTH")
SECRET_RE = re.compile(f"({'|'.join(SECRET_WORDS)})", re.I)
_USERINFO = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://)[^/@\s]+@")
# `NAME=value` (also `export NAME=value`, `declare -x NAME="value"`) as `env` and shells print
# (matched from a line's start to its end: match(data, start, end))
_ASSIGN = re.compile(rb"([ \t]*(?:export[ \t]+|declare[ \t]+-x[ \t]+)?([A-Za-z_][A-Za-z0-9_]*)=)")
# Credentials in a URL, found from its "://" (a literal the regex engine searches fast: a
# build log can be tens of MB)
_URL_USERINFO = re.compile(r"://[^/@\s]+@")
# What may follow a PEM header until its END line: base64, RFC 1421 headers, blank lines.
_PEM_BODY = re.compile(r"^\s*(?:[A-Za-z0-9+/=]*|[A-Za-z-]+:.*)\s*$")
# The standard AWS variables boto3 and sccache read (the S3 stores' and the cache's keys).
AWS_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
# Shorter values are not masked: "***" for every "1" of a log helps nobody.
_MIN_SECRET = 6
PEM_REMOVED = ("[nightly] a PEM block ({}) was here: removed (key material never goes into "
               "nightly's logs or reports)")


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


def _drop_pem(text: str) -> str:
    """Each PEM block (BEGIN to END, or to the first line that cannot be part of it) and
    each other line naming a private key, replaced by one line saying so."""
    out: list[str] = []
    inside = False
    for line in text.splitlines(keepends=True):
        if inside:
            if "-----END " in line:
                inside = False
                continue
            if _PEM_BODY.match(line):
                continue
            inside = False
        if "-----BEGIN " in line:
            what = line.split("-----BEGIN ", 1)[1].split("-----", 1)[0].strip()[:40]
            out.append(PEM_REMOVED.format(f"BEGIN {what}") + "\n")
            inside = "-----END " not in line.split("-----BEGIN ", 1)[1]
        elif "PRIVATE KEY" in line:
            out.append(PEM_REMOVED.format("a private key line") + "\n")
        else:
            out.append(line)
    return "".join(out)


def scrub_staged(data: bytes, secrets: Sequence[str] = ()) -> bytes:
    """Bytes another host wrote, fit for nightly's logs and reports (see the module's doc).
    Undecodable bytes pass through unchanged."""
    text = _mask_assignments(data).decode("utf-8", "surrogateescape")
    if "-----BEGIN " in text or "PRIVATE KEY" in text:
        text = _drop_pem(text)
    text = mask(_URL_USERINFO.sub("://***@", text), *(s for s in secrets if len(s) >= 6))
    return text.encode("utf-8", "surrogateescape")


def _mask_assignments(data: bytes) -> bytes:
    """`NAME=****` for each `NAME=value` line whose name looks secret. Only the lines that
    hold one of SECRET_WORDS are looked at (found with bytes.find on an upper-cased copy,
    which keeps every offset: a regex over the whole text is many times slower)."""
    upper = data.upper()
    spans: set[tuple[int, int]] = set()
    for word in SECRET_WORDS:
        needle = word.encode()
        i = upper.find(needle)
        while i != -1:
            start = data.rfind(b"\n", 0, i) + 1
            end = data.find(b"\n", i)
            end = len(data) if end == -1 else end
            spans.add((start, end))
            i = upper.find(needle, end)
    if not spans:
        return data
    out, pos = [], 0
    for start, end in sorted(spans):
        m = _ASSIGN.match(data, start, end)  # the value: the rest of the line
        if m and SECRET_RE.search(m.group(2).decode("ascii")):
            out += [data[pos:start], m.group(1), b"****"]
            pos = end
    out.append(data[pos:])
    return b"".join(out)


def environment_secrets(env: Mapping[str, str]) -> list[str]:
    """The values of the variables whose names look secret (what mask_env hides)."""
    return [v for k, v in env.items() if SECRET_RE.search(k) and v]


def secret_values(config: object, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
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


__all__ = [
    "AWS_VARS",
    "PEM_REMOVED",
    "SECRET_RE",
    "SECRET_WORDS",
    "Masker",
    "environment_secrets",
    "forms",
    "mask",
    "mask_env",
    "safe_url",
    "scrub_staged",
    "secret_values",
]
