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
import functools
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol
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


# What secret_values reads of the configuration (nightly.config.Config, a layer above: named
# here by what it reads, so mypy checks each call with a Config against it).
class _Publish(Protocol):
    @property
    def url(self) -> str: ...
    @property
    def profile(self) -> str: ...
    @property
    def token_env(self) -> str: ...
    @property
    def token_file(self) -> str: ...
    @property
    def pypi_password_env(self) -> str: ...


class _Notify(Protocol):
    @property
    def smtp_password_env(self) -> str: ...


class _Cluster(Protocol):
    @property
    def staging(self) -> str: ...
    @property
    def profile(self) -> str: ...


class _Cache(Protocol):
    @property
    def url(self) -> str: ...
    @property
    def profile(self) -> str: ...


class SecretsConfig(Protocol):
    """The settings that name where credentials are: publishing, SMTP, the S3 stores."""

    @property
    def publish(self) -> _Publish: ...
    @property
    def notify(self) -> _Notify: ...
    @property
    def cluster(self) -> _Cluster: ...
    @property
    def cache(self) -> _Cache: ...


def secret_values(config: SecretsConfig,
                  environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Every credential value this configuration can use, read where nightly reads them:
    the AWS variables, the anaconda token (variable or file), the PyPI and SMTP passwords."""
    env = os.environ if environ is None else environ
    names = list(AWS_VARS)
    publish = config.publish
    values: list[str] = []
    names += [publish.token_env, publish.pypi_password_env]
    if publish.token_file:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            values.append(Path(publish.token_file).expanduser().read_text().strip())
    names.append(config.notify.smtp_password_env)
    values += [env.get(n, "") for n in names if n]
    for profile in _aws_profiles(config):
        values += aws_profile_secrets(profile)
    return tuple(sorted({v for v in values if len(v) >= _MIN_SECRET}))


def _aws_profiles(config: SecretsConfig) -> list[str]:
    """The AWS profiles ("" for the default chain) of the S3 stores this configuration uses:
    [publish], [cluster] staging and [cache], each where its URL is s3://."""
    stores = ((config.publish.url, config.publish.profile),
              (config.cluster.staging, config.cluster.profile),
              (config.cache.url, config.cache.profile))
    return sorted({profile for url, profile in stores if url.startswith("s3://")})


@functools.lru_cache(maxsize=16)
def aws_profile_secrets(profile: str) -> tuple[str, ...]:
    """The secret key and session token botocore resolves for `profile` ("" the default
    chain: variables, then the shared credentials and config files), as the stores will:
    a shared credentials file's keys are masked like the variables. Instance and container
    roles are not asked (no metadata request per build); nothing found, nothing masked."""
    try:
        import botocore.session

        session = botocore.session.Session(profile=profile or None)
        resolver = session.get_component("credential_provider")
        for name in ("iam-role", "container-role"):
            with contextlib.suppress(Exception):
                resolver.remove(name)
        creds = session.get_credentials()
        if creds is None:
            return ()
        frozen = creds.get_frozen_credentials()
    except Exception:  # no botocore, no such profile, an unreadable file: nothing to mask
        return ()
    return tuple(v for v in (frozen.access_key, frozen.secret_key, frozen.token) if v)


_BEGIN = b"-----BEGIN "
_END = b"-----END "
_DASHES = b"-----"
_LABEL_MAX = 80  # "-----BEGIN ENCRYPTED PRIVATE KEY-----": a label is a few words
_LINE_MAX = 4096  # a key's body lines are 64 or 70 characters
_PEM_BODY_B = re.compile(rb"^\s*(?:[A-Za-z0-9+/=]*|[A-Za-z-]+:.*)\s*$")


def _prefix_tail(data: bytes, mark: bytes) -> int:
    """The length of the longest tail of `data` that begins `mark` (shorter than it)."""
    for k in range(min(len(mark) - 1, len(data)), 0, -1):
        if data.endswith(mark[:k]):
            return k
    return 0


class PemFilter:
    """Removes PEM private-key blocks (`-----BEGIN <any> PRIVATE KEY-----` through its END
    line: RSA, EC, OPENSSH, ENCRYPTED, PGP…) from a stream of bytes, a block split across
    chunks and lines included, each replaced by one line saying so (PEM_REMOVED). A block
    ends at its END marker, or at the first line that cannot be part of it (that line is
    kept), so a header without an END costs a log nothing but the key. Text without
    "-----BEGIN " passes with one search per chunk."""

    def __init__(self) -> None:
        self.buf = b""
        self.inside = False
        self.header_line = False  # the rest of the BEGIN line is the key's too
        self.eat_newline = False  # a block's END marker ended the last chunk

    def feed(self, chunk: bytes) -> bytes:
        data, self.buf = self.buf + chunk, b""
        if self.eat_newline and data:
            self.eat_newline = False
            data = data[1:] if data.startswith(b"\n") else data
        if not self.inside and _BEGIN not in data:
            keep = _prefix_tail(data, _BEGIN)
            self.buf = data[len(data) - keep:] if keep else b""
            return data[: len(data) - keep]
        out: list[bytes] = []
        pos = 0
        while pos < len(data):
            step = self._inside(data, pos) if self.inside else self._outside(data, pos, out)
            if step is None:
                break
            pos = step
        return b"".join(out)

    def flush(self) -> bytes:
        data, self.buf = self.buf, b""
        if self.inside:
            self.inside = False
            return b""
        if _BEGIN in data and b"PRIVATE KEY" in data:
            return PEM_REMOVED.format("an unfinished BEGIN line").encode() + b"\n"
        return data

    def _outside(self, data: bytes, pos: int, out: list[bytes]) -> int | None:
        """Copy up to the next BEGIN; enter a private-key block there. None: wait for more."""
        i = data.find(_BEGIN, pos)
        if i == -1:
            rest = data[pos:]
            keep = _prefix_tail(rest, _BEGIN)
            out.append(rest[: len(rest) - keep])
            self.buf = rest[len(rest) - keep:] if keep else b""
            return None
        out.append(data[pos:i])
        start = i + len(_BEGIN)
        close = data.find(_DASHES, start, start + _LABEL_MAX)
        if close == -1:
            if len(data) - start < _LABEL_MAX and b"\n" not in data[start:]:
                self.buf = data[i:]  # the header may go on in the next chunk
                return None
            out.append(data[i:start])  # not a PEM header
            return start
        label = data[start:close]
        if b"\n" in label or b"PRIVATE KEY" not in label:
            out.append(data[i:close])
            return close
        what = label.decode("utf-8", "replace").strip()
        out.append(PEM_REMOVED.format(f"BEGIN {what}").encode() + b"\n")
        self.inside = self.header_line = True
        return close + len(_DASHES)

    def _inside(self, data: bytes, pos: int) -> int | None:
        """Drop the block's lines up to its END marker (or a line that is not the block's)."""
        nl = data.find(b"\n", pos)
        line_end = len(data) if nl == -1 else nl
        end = data.find(_END, pos, line_end)
        if end != -1:
            close = data.find(_DASHES, end + len(_END), line_end)
            if close == -1 and nl == -1 and len(data) - end < _LABEL_MAX:
                self.buf = data[pos:]
                return None
            self.inside = False
            after = line_end if close == -1 else close + len(_DASHES)
            self.eat_newline = after == len(data)
            return after + 1 if data[after:after + 1] == b"\n" else after
        if nl == -1:
            if len(data) - pos <= _LINE_MAX:
                self.buf = data[pos:]  # a line not yet complete: judged when it is
                return None
            if self.header_line or _PEM_BODY_B.match(data[pos:]):
                return len(data)
            self.inside = False
            return pos
        if self.header_line or _PEM_BODY_B.match(data[pos:nl]):
            self.header_line = False
            return nl + 1
        self.inside = False  # a line that cannot be part of the block: kept
        return pos


def scrub_pem(text: str) -> str:
    """`text` without PEM private-key blocks (PemFilter over the whole text)."""
    if "-----BEGIN " not in text:
        return text
    f = PemFilter()
    data = text.encode("utf-8", "surrogateescape")
    return (f.feed(data) + f.flush()).decode("utf-8", "surrogateescape")


class Masker:
    """Masks secrets in a stream of chunks, and removes PEM private-key blocks (PemFilter).
    The tail of a chunk that could be the start of a secret is held back until the next
    chunk (or `flush`) says what it is."""

    def __init__(self, secrets: Iterable[str]) -> None:
        found: set[bytes] = set()
        for s in secrets:
            if len(s) >= _MIN_SECRET:
                found |= {f.encode() for f in forms(s)}
        self.forms = sorted(found, key=len, reverse=True)
        self.held = b""
        self.pem = PemFilter()

    def feed(self, chunk: bytes) -> bytes:
        chunk = self.pem.feed(chunk)
        if not self.forms:
            return chunk
        data = self._replace(self.held + chunk)
        keep = self._partial_tail(data)
        self.held = data[len(data) - keep:] if keep else b""
        return data[: len(data) - keep]

    def flush(self) -> bytes:
        out, self.held = self._replace(self.held + self.pem.flush()), b""
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
    "PemFilter",
    "aws_profile_secrets",
    "environment_secrets",
    "forms",
    "mask",
    "mask_env",
    "safe_url",
    "scrub_pem",
    "scrub_staged",
    "secret_values",
]
