"""Registers tests/support's fixtures for every test folder (unit, integration, reliability).

The helpers themselves are in tests/support/ and imported as `tests.support.<module>`
(pyproject's pytest `pythonpath` puts the repository on sys.path). tests/support/schedule.py
orders the tests and groups them for xdist's workers.
"""

import pytest

from tests.support import schedule
from tests.support.accounts import account, home  # noqa: F401  (the build-user tests' fixtures)
from tests.support.fixtures import *  # noqa: F403
from tests.support.markers import pytest_collection_modifyitems  # noqa: F401


def pytest_configure(config: pytest.Config) -> None:
    # A plugin of its own: a conftest has one pytest_collection_modifyitems (markers.py's).
    config.pluginmanager.register(schedule, "nightly-schedule")
