"""nightly.toml -> Config: the file laid over `defaults.toml`, then read section by section.

Each section has its parser in a sibling module; this one only sequences them. Errors name
the file, the key path and (where it can be found) the line.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from nightly.config.builders import check_references, inherit_policy, parse_builders
from nightly.config.keys import check_keys, check_strings, check_url_credentials, shape_of
from nightly.config.machines import parse_executors, parse_images, parse_machines
from nightly.config.project import (
    parse_build,
    parse_matrix,
    parse_paths,
    parse_project,
    parse_selectors,
    select_builds,
)
from nightly.config.publish import parse_publish
from nightly.config.reader import DEFAULTS_PATH, Ctx, Table, merge, read_defaults, read_toml
from nightly.config.retry import parse_backoff
from nightly.config.runtime import (
    parse_cache,
    parse_cluster,
    parse_min_free_gb,
    parse_notify,
    parse_provenance,
    parse_smoke,
)
from nightly.config.scheduling import (
    parse_estimates,
    parse_retention,
    parse_retries,
    parse_schedule,
    parse_timeouts,
)
from nightly.config.schema import Config
from nightly.config.timeouts import parse_external_timeouts
from nightly.errors import UsageError

# The single source of defaults; package data (pyproject's [tool.setuptools.package-data]).


def find_config_path(explicit: str | None) -> Path:
    if explicit is not None:
        if not explicit.strip() or "\0" in explicit:
            raise UsageError(f"--config {explicit!r} is not a file name: pass --config FILE")
        return Path(explicit)
    env = os.environ.get("NIGHTLY_CONFIG")
    if env:
        return Path(env)
    return Path("nightly.toml")


def load(path: Path, *, root_override: str | None = None) -> Config:
    data, text = read_toml(path)
    return parse(data, path=path, text=text, root_override=root_override)


def parse(
    data: Mapping[str, object], *, path: Path, text: str = "", root_override: str | None = None
) -> Config:
    ctx = Ctx(str(path), text)
    defaults = read_defaults(DEFAULTS_PATH)
    # Every unknown key, at every level, before any value is judged: a misspelt table must be
    # named as such, not reported as whatever its absence breaks ("the matrix is empty").
    # Checked on the user's data (not the merge) so defaults never mask them.
    check_keys(data, shape_of(defaults), ctx)
    check_url_credentials(data, ctx)
    check_strings(data, ctx)
    top = Table(merge(defaults, data), "", ctx)
    base = path.resolve().parent
    # Sections are read in this order so that, of several mistakes, the same one is reported.
    project = parse_project(top, ctx)
    root, recipes = parse_paths(top, base, root_override)
    matrices = parse_matrix(top, ctx)
    include, exclude = parse_selectors(top)
    mode, history_estimates = parse_schedule(top)
    machines = parse_machines(top, ctx)
    images = parse_images(top, ctx)
    builders = inherit_policy(parse_builders(top, ctx), matrices)
    timeouts = parse_timeouts(top)
    estimates = parse_estimates(top)
    retries_infra, retries_recipe = parse_retries(top)
    retention = parse_retention(top)
    backoff = parse_backoff(top)
    external_timeouts = parse_external_timeouts(top)
    local, container = parse_executors(top)
    notify = parse_notify(top)
    min_free_gb = parse_min_free_gb(top)
    publish = parse_publish(top, ctx, base, project.name)
    smoke = parse_smoke(top, project.name)
    cluster = parse_cluster(top, ctx, base)
    build = parse_build(top, ctx)
    cache = parse_cache(top, ctx, base, publish)
    provenance = parse_provenance(top, base)
    top.finish()
    builds = select_builds(matrices, include, exclude, machines, ctx, project.limited_api)
    check_references(images, builders, builds, ctx)
    return Config(
        path=path,
        root=root,
        recipes=recipes,
        project=project,
        matrices=tuple(matrices),
        include=include,
        exclude=exclude,
        schedule_mode=mode,
        history_estimates=history_estimates,
        machines=tuple(machines),
        images=images,
        timeouts=timeouts,
        estimates=estimates,
        retries_infra=retries_infra,
        retries_recipe=retries_recipe,
        retention=retention,
        local=local,
        container=container,
        notify=notify,
        min_free_gb=min_free_gb,
        publish=publish,
        smoke=smoke,
        cluster=cluster,
        build=build,
        cache=cache,
        provenance=provenance,
        builds=tuple(builds),
        builders=builders,
        backoff=backoff,
        external_timeouts=external_timeouts,
    )
