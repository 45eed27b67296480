"""`nightly run --cluster`'s options and what the orchestrator (nightly.cluster.orchestrator)
decides before it connects: the scheduler's address, the estimates, the config workers get."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from nightly.config import Config
from nightly.config.schema import ProvenanceConfig
from nightly.core.matrix import Build
from nightly.errors import ConfigError, UsageError
from nightly.history.db import History, history_path
from nightly.history.feeds import estimator as history_estimator


@dataclasses.dataclass(kw_only=True)
class ClusterOptions:
    address: str = ""  # --cluster; "" = [cluster] address
    machine: str | None = None  # --machine (an error together with a cluster)
    dry_run: bool = False
    no_upload: bool = False
    rebuild: tuple[str, ...] = ()
    selects: tuple[str, ...] = ()
    keep_container: bool = False
    live: bool | None = None
    notify: bool = True


def estimator(config: Config) -> Callable[[Build], float]:
    """One process plans the whole cluster, so the history's estimates are always
    consistent here (unless history_estimates = "never")."""
    path = history_path(config.root)
    if config.history_estimates == "never" or not path.exists():
        return config.estimate_for
    return history_estimator(config, History(path))


def estimate_source(config: Config, estimates: dict[str, float]) -> str:
    """Where a cluster night's estimates come from, in the live view's words: "history" (some
    build's estimate differs from the config's guess), "fixed" (history_estimates = "never")
    or "config" (no history yet: a guess)."""
    if config.history_estimates == "never":
        return "fixed"
    by_id = {b.id: b for b in config.builds}
    learned = any(bid in by_id and est != config.estimate_for(by_id[bid])
                  for bid, est in estimates.items())
    return "history" if learned else "config"


def check_options(config: Config, opts: ClusterOptions) -> str:
    """The scheduler's address, once the options make sense for a cluster night."""
    if opts.machine is not None:
        raise UsageError(
            "--machine and a cluster exclude each other: a cluster night runs every machine's "
            "builds (drop --machine, or run without --cluster and [cluster] address)"
        )
    address = opts.address or config.cluster.address
    if not address:
        raise UsageError("no cluster: pass --cluster ADDRESS or set [cluster] address")
    if not config.cluster.staging:
        raise ConfigError(
            "is required in cluster mode: where workers put packages and logs",
            file=str(config.path), key="cluster.staging",
            hint="a folder every host mounts, or s3://BUCKET/PREFIX (docs/cluster.md)",
        )
    return address


def config_for_workers(config: Config) -> Config:
    """The config a task carries: without the expanded matrix (size), and without the
    provenance key's path: signing is the orchestrator's alone (nightly.provenance.attest)."""
    return dataclasses.replace(config, builds=(), provenance=ProvenanceConfig())


__all__ = ["ClusterOptions", "check_options", "config_for_workers", "estimate_source",
           "estimator"]
