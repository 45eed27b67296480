"""How the publishing clients (anaconda-client, twine) run: their environment, and one way to
run them (a timeout, output captured and masked, errors that name what was being done).

Only what a client needs to find programs, reach its server (TLS bundles, proxies) and read
the user's own client settings; never the caller's credentials of other services. Each
caller adds the one secret its client needs through that client's own variable.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from nightly import procs
from nightly.errors import PublishError
from nightly.files import tail

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


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode("utf-8", "replace")


def run_client(
    cmd: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    timeout: float,
    what: str,
    clean: Callable[[str], str],
) -> tuple[int, str]:
    """Run a publishing client; (its exit status, its combined output passed through `clean`,
    which masks the client's secret). A timeout or a client that cannot start is a
    PublishError that says `what` was being done, with the tail of the (cleaned) output."""
    try:
        proc = procs.call(cmd, env=env, cwd=cwd, timeout=timeout, merge=True)
    except subprocess.TimeoutExpired as e:
        out = clean(_text(e.output))
        raise PublishError(f"{what}: timed out after {timeout:g}s{tail(out)}") from None
    except OSError as e:
        raise PublishError(f"{what}: could not run {Path(cmd[0]).name}: {e}") from None
    return proc.returncode, clean(proc.stdout)
