"""nightly.toml -> frozen dataclasses.

The package, top-down: `loader` (load/parse: sequences the sections) -> one parser module per
group of sections (`project`: project, paths, matrix, selectors; `scheduling`: schedule,
estimates, timeouts, retries, retention; `machines`: machines, images, executors; `publish`;
`runtime`: notify, run, smoke, cluster) -> `reader` (TOML, the key-recording `Table`, error
context) and `schema` (the dataclasses). Defaults live in `nightly/defaults.toml` only.

Everything public is re-exported here: `from nightly.config import Config, Machine, load`.
"""

from nightly.config.loader import find_config_path, load, parse
from nightly.config.reader import DEFAULTS_PATH, parse_duration
from nightly.config.schema import (
    EXECUTORS,
    SCHEDULE_MODES,
    CacheConfig,
    ClusterConfig,
    Config,
    ContainerConfig,
    Estimate,
    LocalSettings,
    Machine,
    Notify,
    Project,
    ProvenanceConfig,
    Publish,
    Retention,
    Smoke,
)

__all__ = [
    "DEFAULTS_PATH",
    "EXECUTORS",
    "SCHEDULE_MODES",
    "CacheConfig",
    "ClusterConfig",
    "Config",
    "ContainerConfig",
    "Estimate",
    "LocalSettings",
    "Machine",
    "Notify",
    "Project",
    "ProvenanceConfig",
    "Publish",
    "Retention",
    "Smoke",
    "find_config_path",
    "load",
    "parse",
    "parse_duration",
]
