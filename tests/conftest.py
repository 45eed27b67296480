"""Registers tests/support's fixtures for every test folder (unit, integration, reliability).

The helpers themselves are in tests/support/ and imported as `tests.support.<module>`
(pyproject's pytest `pythonpath` puts the repository on sys.path).
"""

from tests.support.accounts import account, home  # noqa: F401  (the build-user tests' fixtures)
from tests.support.fixtures import *  # noqa: F403
from tests.support.markers import pytest_collection_modifyitems  # noqa: F401
