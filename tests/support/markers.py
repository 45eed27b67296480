"""Markers by what a test needs, so a developer can select the integration tests their machine
can run (`pytest -m "not engine and not browser"`), and a guard that keeps tests/unit fast.

A test is marked by the fixtures it uses (directly or through other fixtures): a test that
takes `engine` gets the `engine` marker without writing it. Tests that start a server
without one of these fixtures carry the marker themselves (`pytestmark`). pyproject.toml
registers every marker (`--strict-markers`); the README lists them beside the test command.
"""

from __future__ import annotations

from pathlib import Path

import pytest

# fixture name -> the marker of what it starts. Names shared by several modules (`s3`,
# `cluster`) start the same kind of server wherever they are defined.
NEEDS: dict[str, str] = {
    "engine": "engine",
    "second_engine": "engine",
    "chromium": "browser",
    "moto": "s3",
    "moto_endpoint": "s3",
    "bucket": "s3",
    "moto_s3": "s3",
    "moto_bucket": "s3",
    "s3": "s3",
    "pypiserver": "pypi",
    "dask_cluster": "cluster",
    "gpu_cluster": "cluster",
    "tls_cluster": "cluster",
    "s3_cluster": "cluster",
    "smtp_server": "smtp",
}

# What tests/unit may not need: each of these starts or installs something outside Python.
NOT_IN_UNIT = ("engine", "browser", "s3", "pypi", "cluster", "smtp", "strace", "slow")
UNIT = Path(__file__).resolve().parents[1] / "unit"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Adds the markers of the fixtures each test uses; refuses a unit test that needs a server."""
    slow_units: list[str] = []
    for item in items:
        for name in getattr(item, "fixturenames", ()):
            marker = NEEDS.get(name)
            if marker is not None and item.get_closest_marker(marker) is None:
                item.add_marker(marker)
        if UNIT in Path(str(item.path)).resolve().parents:
            needs = [m for m in NOT_IN_UNIT if item.get_closest_marker(m) is not None]
            if needs:
                slow_units.append(f"{item.nodeid} ({', '.join(needs)})")
    if slow_units:
        raise pytest.UsageError(
            "tests/unit must run without servers, engine or browser; move these to "
            "tests/integration: " + "; ".join(slow_units)
        )
