"""The environment the publishing clients (anaconda-client, twine) run with.

Only what a client needs to find programs, reach its server (TLS bundles, proxies) and read
the user's own client settings; never the caller's credentials of other services. Each
caller adds the one secret its client needs through that client's own variable.
"""

from __future__ import annotations

import os

PASSTHROUGH = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "SYSTEMROOT",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
)


def child_env() -> dict[str, str]:
    """The allowlisted variables, Python output as unbuffered UTF-8, and loopback exempt
    from any proxy (a server on this machine is never reached through one)."""
    env = {k: v for k, v in os.environ.items() if k in PASSTHROUGH}
    env.update(PYTHONIOENCODING="utf-8", PYTHONUNBUFFERED="1")
    for name in ("NO_PROXY", "no_proxy"):
        if name in env:
            env[name] = ",".join(x for x in (env[name], "127.0.0.1", "localhost", "::1") if x)
    return env
