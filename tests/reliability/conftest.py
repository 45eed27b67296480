"""Fixtures of the fault-injection and security suite (tests/reliability/).

The small bash-recipe projects, the `nightly` subprocess runners and the process checks are
the integration suite's (tests/integration/conftest.py), imported here; the Podman engine
fixture is tests/integration/engine.py's. What only this suite needs (wheel-writing recipes,
a store and index checker, strace-driven kill points, an S3 server that can be stopped in the
middle of an upload) is in tests/reliability/support.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # `tests` is a namespace package rooted at the repository
    sys.path.append(str(REPO))

from tests.integration.conftest import (  # noqa: E402, F401
    caller_secret,
    is_alive,
    make_recipe,
    night_project,
    run_cli,
    start_cli,
    wait_until,
)
from tests.integration.engine import engine  # noqa: E402, F401
