"""Secret masking, in one place: nothing nightly prints or writes carries a credential.

- `mask_env`: an environment shown in a build log's header, with the values of variables
  whose names look secret replaced by `****`;
- `safe_url`: any text with every `scheme://user:password@` reduced to `scheme://***@`;
- `mask`: a text with every occurrence of the given secrets (also URL-quoted) as `***`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import quote

SECRET_RE = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_KEY|ACCESS_KEY|AUTH)", re.I)
_USERINFO = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://)[^/@\s]+@")


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


__all__ = ["SECRET_RE", "mask", "mask_env", "safe_url"]
