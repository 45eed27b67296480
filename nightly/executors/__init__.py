"""Executors run one build's recipe somewhere (the host, a container), and their registry.

`make_executor(name, config)` is the one place a name from the config or the command line
becomes an executor; a new executor is one more entry in `EXECUTORS`.
"""

from __future__ import annotations

from collections.abc import Callable

from nightly.config import Config
from nightly.errors import ConfigError, UsageError, require
from nightly.executors.base import ExecResult, Executor, Job, OutputSink
from nightly.executors.container import ContainerExecutor, ContainerSettings
from nightly.executors.local import LocalExecutor
from nightly.hardening import check_signing_key, recipe_user

# (config, keep_container) -> a fresh executor
ExecutorFactory = Callable[[Config, bool], Executor]


def _local(config: Config, keep_container: bool) -> Executor:
    user = recipe_user(config)
    check_signing_key(config, user)  # readable by no build: checked before any runs
    return LocalExecutor(pythons=config.local.pythons, cuda=config.local.cuda, user=user)


def _container(config: Config, keep_container: bool) -> Executor:
    require("docker", what="the container executor")
    check_signing_key(config, None)  # not in a mounted folder, readable by its owner only
    c = config.container
    try:
        settings = ContainerSettings(
            base_url=c.base_url or None,
            memory_limit=c.memory_limit or None,
            user=c.user or None,
            cuda_mounts=dict(c.cuda_mounts),
            gpu=c.gpu,
            keep_container=keep_container,
            pull=c.pull,
            engine_backoff=config.backoff.engine,
            read_timeout_s=config.external_timeouts.engine_read,
        )
    except ValueError as e:
        raise ConfigError(str(e), file=str(config.path), key="executor.container") from e
    return ContainerExecutor(settings)


# In the order the error message lists them.
EXECUTORS: dict[str, ExecutorFactory] = {"local": _local, "container": _container}


def require_extras(config: Config, executor: str, publish: bool) -> None:
    """Every extra a night needs (its executor's, its store's), named at once before the
    night starts rather than as each build's failure or after the builds."""
    s3 = publish and config.publish.url.startswith("s3://")
    require(*(["docker"] if executor == "container" else []), *(["boto3"] if s3 else []),
            what="this night")


def make_executor(name: str, config: Config, *, keep_container: bool = False) -> Executor:
    factory = EXECUTORS.get(name)
    if factory is None:
        raise UsageError(f"unknown executor '{name}': choose {' or '.join(EXECUTORS)}")
    return factory(config, keep_container)


__all__ = [
    "EXECUTORS",
    "ExecResult",
    "Executor",
    "ExecutorFactory",
    "Job",
    "OutputSink",
    "make_executor",
    "require_extras",
]
