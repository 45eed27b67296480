"""Secret masking, in one place: nothing nightly prints or writes carries a credential.

- `mask_env`: an environment shown in a build log's header, with the values of variables
  whose names look secret replaced by `****`;
- `safe_url`: any text with every `scheme://user:password@` reduced to `scheme://***@`;
- `mask`: a text with every occurrence of the given secrets (also URL-quoted) as `***`;
- `scrub_staged`: text another host wrote (a build log read back from the cluster's staging
  store) made fit for logs and reports: PEM blocks and private-key lines replaced by a line
  saying so, `NAME=value` lines of secret-looking names masked as `mask_env` does, URL
  credentials and the given secrets masked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
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
PEM_REMOVED = ("[nightly] a PEM block ({}) was here: removed (key material never goes into "
               "nightly's logs or reports)")


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: ("****" if SECRET_RE.search(k) else v) for k, v in env.items()}


def safe_url(url: str) -> str:
    """`url` (or any text) with every `scheme://user:password@` reduced to `scheme://***@`."""
    return _USERINFO.sub(r"\1***@", url)


def mask(text: str, *secrets: str) -> str:
    """`text` with every occurrence of each secret (also URL-quoted) replaced by `***`."""
    for secret in secrets:
        if not secret:
            continue
        for form in {secret, quote(secret, safe=""), quote(secret)}:
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


__all__ = [
    "PEM_REMOVED",
    "SECRET_RE",
    "SECRET_WORDS",
    "environment_secrets",
    "mask",
    "mask_env",
    "safe_url",
    "scrub_staged",
]
