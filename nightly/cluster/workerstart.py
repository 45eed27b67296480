"""`nightly cluster worker ADDRESS [OPTIONS]`: `dask worker` with the same arguments, its
address and TLS options checked first.

`dask worker tls://...` without `--tls-ca-file`/`--tls-cert`/`--tls-key` ends in Dask's
own tracebacks (about 80 lines, "TLS expects a `ssl_context` argument"), and a `tcp://`
address with them listens in plain text. Checked here, each mistake is one line naming the
fix (UsageError: exit 2); then this process becomes `dask worker` (exec), so signals, the
nanny and the exit status are Dask's own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from nightly.errors import UsageError, require

TLS_OPTIONS = ("--tls-ca-file", "--tls-cert", "--tls-key")
_FIX = ("the CA's ca.pem and this host's HOST.pem and HOST-key.pem, made by `nightly cluster "
        "certs`; see docs/cluster.md, \"A worker on each build host\"")


def _options(args: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """(the scheduler addresses, the TLS options' values) among dask worker's arguments."""
    addresses, tls = [], {}
    it = iter(enumerate(args))
    for i, a in it:
        name, eq, value = a.partition("=")
        if name in TLS_OPTIONS:
            if not eq:
                value = args[i + 1] if i + 1 < len(args) else ""
                next(it, None)
            tls[name] = value
        elif "://" in a and not a.startswith("-"):
            addresses.append(a)
    return addresses, tls


def check_worker_args(args: Sequence[str]) -> None:
    """UsageError, naming the fix, for a worker that could not join its scheduler as asked:
    a tls:// address without all three TLS options (or with a file that is not there), or
    TLS options for a plain tcp:// address."""
    addresses, tls = _options(args)
    for address in addresses:
        scheme = address.split("://", 1)[0].lower()
        if scheme == "tls":
            missing = [o for o in TLS_OPTIONS if not tls.get(o)]
            if missing:
                raise UsageError(
                    f"the scheduler {address} speaks TLS, but {', '.join(missing)} "
                    f"{'is' if len(missing) == 1 else 'are'} not given: pass "
                    f"{' '.join(f'{o} FILE' for o in TLS_OPTIONS)} ({_FIX})")
        elif scheme == "tcp" and tls:
            raise UsageError(
                f"{', '.join(tls)} given for the plain address {address}: the worker would "
                f"not use them; use tls://{address.split('://', 1)[1]} (a scheduler started "
                "with --protocol tls)")
    for option, path in tls.items():
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            raise UsageError(f"{option} {path}: no such readable file ({_FIX})")


def exec_worker(args: Sequence[str]) -> None:
    """Check the arguments, then become `dask worker ARGS` (never returns)."""
    require("distributed", what="a cluster worker")
    check_worker_args(args)
    argv = [sys.executable, "-m", "distributed.cli.dask_worker", *args]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)


__all__ = ["TLS_OPTIONS", "check_worker_args", "exec_worker"]
