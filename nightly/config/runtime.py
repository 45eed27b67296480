"""[notify], [run], [smoke], [cluster] and [cache]: what happens around the builds of a night."""

from __future__ import annotations

import os
import re
import urllib.parse
from pathlib import Path

from nightly.config.reader import Ctx, Table, resolve_path, store_url
from nightly.config.schema import (
    EXECUTORS,
    CacheConfig,
    ClusterConfig,
    Notify,
    ProvenanceConfig,
    Publish,
    Smoke,
)

# sccache's SCCACHE_CACHE_SIZE: a number of bytes with an optional K, M, G or T.
_SIZE = re.compile(r"^[0-9]+[KMGT]?$")


def parse_notify(top: Table) -> Notify:
    no = top.table("notify")
    notify = Notify(
        command=no.str("command"),
        always=no.bool("always"),
        smtp_host=no.str("smtp_host"),
        smtp_port=no.int("smtp_port", minimum=1),
        smtp_from=no.str("smtp_from"),
        smtp_to=tuple(no.str_list("smtp_to")),
        smtp_user=no.str("smtp_user"),
        smtp_password_env=no.str("smtp_password_env"),
        bisect=no.bool("bisect"),
        bisect_budget_s=no.duration("bisect_budget"),
    )
    no.finish()
    return notify


def parse_min_free_gb(top: Table) -> float:
    rn = top.table("run")
    min_free_gb = rn.number("min_free_gb", minimum=0)
    rn.finish()
    return min_free_gb


def parse_smoke(top: Table, project_name: str) -> Smoke:
    sm = top.table("smoke")
    smoke = Smoke(
        enabled=sm.bool("enabled"),
        import_name=sm.str("import_name") or project_name.replace("-", "_"),
        command=sm.str("command"),
        cuda_check=sm.str("cuda_check"),
        gpu_check=sm.str("gpu_check"),
        gpu=sm.bool("gpu"),
        libtorch_program=sm.str("libtorch_program"),
        libtorch_libs=tuple(sm.str_list("libtorch_libs")),
        image=sm.str("image"),
        timeout_s=sm.duration("timeout"),
        gpu_command=sm.str("gpu_command"),
        gpu_timeout_s=sm.duration("gpu_timeout"),
        gpu_retries=sm.int("gpu_retries", minimum=0),
        require_gpu=sm.bool("require_gpu"),
        dependencies=sm.choice("dependencies", ("none", "index")),
        index_url=sm.str("index_url"),
        extra_index_urls=tuple(sm.str_list("extra_index_urls")),
    )
    if (smoke.image.startswith("@") and smoke.image != "@build") or " " in smoke.image:
        sm.ctx.fail(f"'{smoke.image}' is not an image", "smoke.image",
                    hint='write an image name, "@build" (the build\'s own image) or "" (a '
                    "declared builder's runtime image, else the build's)")
    sm.finish()
    return smoke


def parse_cluster(top: Table, ctx: Ctx, base: Path) -> ClusterConfig:
    ct = top.table("cluster")
    staging = store_url(
        ct.str("staging"), "cluster.staging", base, ctx,
        what="staging stores", path_hint="a folder path every host mounts",
    )
    executor = ct.str("executor")
    if executor and executor not in EXECUTORS:
        ct.choice("executor", EXECUTORS)
    c = ClusterConfig(
        address=ct.str("address"),
        staging=staging,
        endpoint_url=ct.str("endpoint_url"),
        region=ct.str("region"),
        profile=ct.str("profile"),
        executor=executor,
        gpu_smoke=ct.bool("gpu_smoke"),
        log_flush_s=ct.duration("log_flush"),
        worker_wait_s=ct.duration("worker_wait"),
        connect_timeout_s=ct.duration("connect_timeout"),
        task_retries=ct.int("task_retries", minimum=0),
        keep_staging=ct.bool("keep_staging"),
        tls_ca_file=_opt_path(ct.str("tls_ca_file"), base),
        tls_cert=_opt_path(ct.str("tls_cert"), base),
        tls_key=_opt_path(ct.str("tls_key"), base),
        require_encryption=ct.bool("require_encryption"),
        insecure=ct.bool("insecure"),
    )
    ct.finish()
    return c


def _opt_path(value: str, base: Path) -> Path | None:
    """A file named in the config, relative to the config file ("" = not set)."""
    return resolve_path(value, base) if value else None


def parse_cache(top: Table, ctx: Ctx, base: Path, publish: Publish) -> CacheConfig:
    ca = top.table("cache")
    size = ca.str("size")
    if not _SIZE.match(size):
        ctx.fail(f"cache size '{size}' is not a size", "cache.size",
                 hint='write a number of bytes with K, M, G or T, e.g. "10G"')
    url = ca.str("url")
    parts = urllib.parse.urlsplit(url)
    if url and (parts.scheme != "s3" or not parts.netloc):
        ctx.fail(f"'{url}' is not an S3 location", "cache.url",
                 hint="write s3://BUCKET/PREFIX for a shared cache, or set cache.dir for a "
                      "folder on this machine")
    folder = ca.str("dir") or os.path.join("~", ".cache", "nightly", "sccache")
    c = CacheConfig(
        enabled=ca.bool("enabled"),
        dir=resolve_path(os.path.expanduser(folder), base),
        size=size,
        url=url,
        # A shared cache is reached like the publishing store unless told otherwise.
        endpoint_url=ca.str("endpoint_url") or publish.endpoint_url,
        region=ca.str("region") or publish.region,
        profile=ca.str("profile") or publish.profile,
    )
    ca.finish()
    return c


def parse_provenance(top: Table, base: Path) -> ProvenanceConfig:
    pr = top.table("provenance")
    key = pr.str("key")
    pr.finish()
    return ProvenanceConfig(key=resolve_path(os.path.expanduser(key), base) if key else None)
