"""nightly.toml -> frozen dataclasses.

The file is laid over `defaults.toml`, then read through `_Table`, which records every key it
is asked for: whatever is left over is an unknown key, reported with the closest valid key.
Every error names the file, the key path and (where it can be found) the line.
"""

from __future__ import annotations

import builtins
import difflib
import math
import os
import re
import sys
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nightly.errors import ConfigError, did_you_mean
from nightly.matrix import (
    LIBTORCH_ALL,
    LIBTORCH_VARIANTS,
    PACKAGE_PLATFORMS,
    PACKAGES,
    PLATFORMS,
    Build,
    PackageMatrix,
    SpellingError,
    expand,
    near_misses,
    normalize_cuda,
    normalize_python,
    select,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULTS_PATH = Path(__file__).with_name("defaults.toml")
EXECUTORS = ("local", "container")
SCHEDULE_MODES = ("explicit", "auto")

_DURATION_RE = re.compile(r"^(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?$")
_HEADER_RE = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")


# ---------------------------------------------------------------------------- dataclasses


@dataclass(frozen=True, kw_only=True)
class Project:
    name: str
    source: str
    branch: str
    ref: str
    base_version: str
    build_number: int


@dataclass(frozen=True, kw_only=True)
class Machine:
    name: str
    platform: str
    queues: int
    executor: str
    hostname: str = ""
    # Each inner tuple is one queue, as written: build ids, globs or "package pythons cudas".
    explicit_queues: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True, kw_only=True)
class Estimate:
    cpu_s: float
    cuda_s: float


@dataclass(frozen=True, kw_only=True)
class LocalSettings:
    pythons: Mapping[str, str]
    cuda: Mapping[str, str]


@dataclass(frozen=True, kw_only=True)
class ContainerConfig:
    base_url: str
    memory_limit: str
    user: str
    cuda_mounts: Mapping[str, str]
    gpu: bool
    pull: bool


@dataclass(frozen=True, kw_only=True)
class Retention:
    local_days: int
    remote_versions: int
    remote_days: int


@dataclass(frozen=True, kw_only=True)
class Notify:
    command: str
    always: bool
    smtp_host: str
    smtp_port: int
    smtp_from: str
    smtp_to: tuple[str, ...]
    smtp_user: str
    smtp_password_env: str


@dataclass(frozen=True, kw_only=True)
class Smoke:
    enabled: bool
    import_name: str
    command: str
    cuda_check: str
    gpu_check: str
    gpu: bool
    libtorch_program: str
    libtorch_libs: tuple[str, ...]
    image: str
    timeout_s: float


@dataclass(frozen=True, kw_only=True)
class Publish:
    url: str  # normalised: s3://… or file:///abs, "" when nothing is published
    endpoint_url: str
    region: str
    profile: str
    acl: str
    find_links: str
    index: bool
    conda_channel: str  # an absolute folder path, "" for none
    anaconda_user: str
    anaconda_label: str
    anaconda_test_label: str
    anaconda_site: str
    token_env: str
    token_file: str
    pypi_url: str
    pypi_username: str
    pypi_password_env: str

    def find_links_name(self, channel: str) -> str:
        return self.find_links.format(channel=channel)


@dataclass(frozen=True, kw_only=True)
class ClusterConfig:
    """[cluster]: `nightly run --cluster` (nightly.cluster, docs/cluster.md)."""

    address: str = ""
    staging: str = ""  # normalised: s3://… or file:///abs, "" when not configured
    endpoint_url: str = ""
    region: str = ""
    profile: str = ""
    executor: str = ""  # "" = each platform's first machine's executor
    gpu_smoke: bool = False
    log_flush_s: float = 5.0
    worker_wait_s: float = 600.0
    connect_timeout_s: float = 30.0
    task_retries: int = 1
    keep_staging: bool = False


@dataclass(frozen=True, kw_only=True)
class Config:
    path: Path
    root: Path
    recipes: Path
    project: Project
    matrices: tuple[PackageMatrix, ...]
    include: tuple[str, ...]
    exclude: tuple[str, ...]
    schedule_mode: str
    history_estimates: str
    machines: tuple[Machine, ...]
    # images[package][cuda or "default"], images["default"]["default"] the fallback
    images: Mapping[str, Mapping[str, str]]
    # timeouts[platform or ""][package or "default"] in seconds
    timeouts: Mapping[str, Mapping[str, float]]
    estimates: Mapping[str, Estimate]
    retries_infra: int
    retries_recipe: int
    retention: Retention
    local: LocalSettings
    container: ContainerConfig
    notify: Notify
    min_free_gb: float
    publish: Publish
    smoke: Smoke
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    builds: tuple[Build, ...] = field(default=())  # the matrix after the config's selectors

    # ------------------------------------------------------------------ lookups

    def machine(self, key: str) -> Machine:
        """A machine by name, or by index when no name matches."""
        for m in self.machines:
            if m.name == key:
                return m
        if key.isdigit() and int(key) < len(self.machines):
            return self.machines[int(key)]
        names = [m.name for m in self.machines]
        hint = did_you_mean(key, names)
        raise ConfigError(
            f"no machine '{key}': the machines are {', '.join(names)}"
            + (f"; {hint}" if hint else "")
            + f" (or an index 0-{len(names) - 1})",
            file=str(self.path),
            key="machines",
        )

    def image_for(self, build: Build) -> str:
        for table in (self.images.get(build.package, {}), self.images.get("default", {})):
            image = table.get(build.cuda) or table.get("default")
            if image:
                # Placeholders let one entry cover every CUDA version:
                # {cuda} cu126, {cuda_version} 12.6, {cuda_digits} 126.
                return image.format(
                    cuda=build.cuda,
                    cuda_version=build.cuda_version,
                    cuda_digits=build.cuda[2:] if build.is_cuda else "",
                )
        return ""

    def timeout_for(self, build: Build) -> float:
        for plat in (build.platform, ""):
            table = self.timeouts.get(plat, {})
            for key in (build.package, "default"):
                if key in table:
                    return table[key]
        return 4800.0

    def estimate_for(self, build: Build) -> float:
        est = self.estimates.get(build.package) or self.estimates["default"]
        one = est.cuda_s if build.is_cuda else est.cpu_s
        return one * len(build.variants) if build.package == "libtorch" else one

    def uses_history_estimates(self) -> bool:
        if self.history_estimates == "auto":
            platforms = [m.platform for m in self.machines]
            return len(platforms) == len(set(platforms))
        return self.history_estimates == "always"

    def libtorch_matrix(self, platform: str) -> PackageMatrix | None:
        for m in self.matrices:
            if m.package == "libtorch" and m.platform == platform:
                return m
        return None


# ---------------------------------------------------------------------------- loading


def find_config_path(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit)
    env = os.environ.get("NIGHTLY_CONFIG")
    if env:
        return Path(env)
    return Path("nightly.toml")


def load(path: Path, *, root_override: str | None = None) -> Config:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise ConfigError(
            "config file not found: pass --config FILE, set NIGHTLY_CONFIG, or run where "
            "nightly.toml is",
            file=str(path),
        ) from e
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the config file: {e}", file=str(path)) from e
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        # TOMLDecodeError.lineno exists from Python 3.14; before, the line is in the message.
        line = getattr(e, "lineno", None)
        if line is None:
            m = re.search(r"at line (\d+)", str(e))
            line = int(m.group(1)) if m else None
        raise ConfigError(f"invalid TOML: {e}", file=str(path), line=line) from e
    return parse(data, path=path, text=text, root_override=root_override)


def parse(
    data: Mapping[str, Any], *, path: Path, text: str = "", root_override: str | None = None
) -> Config:
    defaults = tomllib.loads(DEFAULTS_PATH.read_text(encoding="utf-8"))
    # Unknown keys are checked on the user's data (not the merge) so defaults never mask them.
    ctx = _Ctx(str(path), text)
    merged = _merge(defaults, data, ctx, "")
    top = _Table(merged, "", ctx)
    base = path.resolve().parent

    proj = top.table("project")
    project = Project(
        name=proj.str("name", required=True),
        source=proj.str("source", required=True),
        branch=proj.str("branch"),
        ref=proj.str("ref"),
        base_version=proj.str("base_version", required=True),
        build_number=proj.int("build_number", minimum=0),
    )
    proj.finish()
    if not re.match(r"^\d+(\.\d+)*$", project.base_version):
        ctx.fail(
            f"'{project.base_version}' is not a base version: write digits and dots, e.g. 1.0.0",
            "project.base_version",
        )

    root = Path(root_override).resolve() if root_override else _path(top.str("root"), base)
    if root_override:
        top.str("root")
    recipes_s = top.str("recipes")
    recipes = _path(recipes_s, base) if recipes_s else base / "recipes"

    matrices = _parse_matrix(top, ctx)

    sel = top.table("selectors")
    include = tuple(sel.str_list("include"))
    exclude = tuple(sel.str_list("exclude"))
    sel.finish()

    sched = top.table("schedule")
    mode = sched.choice("mode", SCHEDULE_MODES)
    history_estimates = sched.choice("history_estimates", ("auto", "always", "never"))
    sched.finish()

    machines = _parse_machines(top, ctx)
    images = _parse_images(top, ctx)
    timeouts = _parse_timeouts(top, ctx)
    estimates = _parse_estimates(top, ctx)

    ret = top.table("retries")
    retries_infra = ret.int("infra", minimum=0)
    retries_recipe = ret.int("recipe", minimum=0)
    ret.finish()

    rt = top.table("retention")
    retention = Retention(
        local_days=rt.int("local_days", minimum=1),
        remote_versions=rt.int("remote_versions", minimum=0),
        remote_days=rt.int("remote_days", minimum=0),
    )
    rt.finish()

    ex = top.table("executor")
    lo = ex.table("local")
    local = LocalSettings(
        pythons=lo.str_map("pythons", key_check=normalize_python),
        cuda=lo.str_map("cuda", key_check=normalize_cuda),
    )
    lo.finish()
    co = ex.table("container")
    container = ContainerConfig(
        base_url=co.str("base_url"),
        memory_limit=co.str("memory_limit"),
        user=co.str("user"),
        cuda_mounts=co.str_map("cuda_mounts", key_check=normalize_cuda),
        gpu=co.bool("gpu"),
        pull=co.bool("pull"),
    )
    co.finish()
    ex.finish()

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
    )
    no.finish()

    rn = top.table("run")
    min_free_gb = rn.number("min_free_gb", minimum=0)
    rn.finish()
    publish = _parse_publish(top, ctx, base)
    sm = top.table("smoke")
    smoke = Smoke(
        enabled=sm.bool("enabled"),
        import_name=sm.str("import_name") or project.name.replace("-", "_"),
        command=sm.str("command"),
        cuda_check=sm.str("cuda_check"),
        gpu_check=sm.str("gpu_check"),
        gpu=sm.bool("gpu"),
        libtorch_program=sm.str("libtorch_program"),
        libtorch_libs=tuple(sm.str_list("libtorch_libs")),
        image=sm.str("image"),
        timeout_s=sm.duration("timeout"),
    )
    sm.finish()
    cluster = _parse_cluster(top, ctx, base)
    top.finish()

    all_builds = expand(matrices)
    builds, unmatched = select(all_builds, include, exclude)
    if unmatched:
        pattern = unmatched[0]
        key = "selectors.include" if pattern in include else "selectors.exclude"
        close = near_misses(pattern, [b.id for b in all_builds])
        ctx.fail(
            f"selector '{pattern}' matches no build of the matrix",
            key,
            hint=("near misses: " + ", ".join(close)) if close else None,
        )
    if not builds:
        ctx.fail(
            "the matrix is empty after the selectors: include and exclude leave no build",
            "selectors",
        )
    platforms_needed = sorted({b.platform for b in builds})
    have = {m.platform for m in machines}
    for plat in platforms_needed:
        if plat not in have:
            ctx.fail(
                f"the matrix has {plat} builds but no machine has platform '{plat}'",
                "machines",
                hint=f"add a [[machines]] entry with platform = \"{plat}\" or remove matrix.{plat}",
            )

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
        builds=tuple(builds),
    )


def parse_duration(value: object) -> float:
    """Seconds from 4800, 4800.0, "4800", "80m", "1h30m", "4h23m20s"."""
    if isinstance(value, bool):
        raise ValueError("a duration, not a boolean")
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"'{value}' is not a duration: write a positive number of seconds")
        return float(value)
    if isinstance(value, str):
        s = value.strip().lower().replace(" ", "")
        if s.isascii() and s.isdigit() and int(s) > 0:
            return float(s)
        m = _DURATION_RE.match(s)
        if m and any(m.groups()):
            h, mi, se = (int(g) if g else 0 for g in m.groups())
            total = h * 3600 + mi * 60 + se
            if total > 0:
                return float(total)
    raise ValueError(f"'{value}' is not a duration: write seconds or e.g. \"15m\", \"1h30m\"")


# ---------------------------------------------------------------------------- sections


def _parse_matrix(top: _Table, ctx: _Ctx) -> list[PackageMatrix]:
    mx = top.table("matrix", required=True)
    out: list[PackageMatrix] = []
    for plat in mx:
        if plat not in PLATFORMS:
            continue  # reported by finish() with a suggestion
        pt = mx.table(plat)
        for pkg in pt:
            if pkg not in PACKAGES:
                continue
            key = f"matrix.{plat}.{pkg}"
            if plat not in PACKAGE_PLATFORMS[pkg]:
                other = "manywheel" if pkg == "wheel" else "wheel"
                ctx.fail(
                    f"{pkg} is not a {plat} package type",
                    key,
                    hint=f"on {plat} use {other}",
                )
            t = pt.table(pkg)
            cudas = tuple(
                _unique(t.str_list("cudas", required=True, item=normalize_cuda), ctx, key)
            )
            devtoolset = t.str("devtoolset", default="")
            if pkg == "libtorch":
                variants = tuple(
                    t.str_list(
                        "variants",
                        default=list(LIBTORCH_VARIANTS),
                        choices=(*LIBTORCH_VARIANTS, LIBTORCH_ALL),
                    )
                )
                python = t.str("python", default="3", item=_python_or_default)
                if not cudas or not variants:
                    ctx.fail("cudas and variants must not be empty", key)
                out.append(
                    PackageMatrix(
                        package=pkg,
                        platform=plat,
                        pythons=(),
                        cudas=cudas,
                        variants=variants,
                        python=python,
                        devtoolset=devtoolset,
                    )
                )
            else:
                pythons = tuple(
                    _unique(t.str_list("pythons", required=True, item=normalize_python), ctx, key)
                )
                if not pythons or not cudas:
                    ctx.fail("pythons and cudas must not be empty", key)
                out.append(
                    PackageMatrix(
                        package=pkg,
                        platform=plat,
                        pythons=pythons,
                        cudas=cudas,
                        devtoolset=devtoolset,
                    )
                )
            t.finish()
        pt.finish(valid=PACKAGES)
    mx.finish(valid=PLATFORMS)
    if not out:
        ctx.fail("the matrix is empty: add e.g. [matrix.linux.manywheel]", "matrix")
    return out


def _store_url(value: str, key: str, base: Path, ctx: _Ctx, *, what: str, path_hint: str) -> str:
    """A store location as written in the config -> s3://… or file:///abs ("" stays "").

    A plain path is relative to the config file; other schemes and credentials in the URL
    are refused (credentials come from the profile or the standard AWS chain)."""
    if not value:
        return ""
    if "://" not in value:
        return _path(value, base).resolve().as_uri()
    if not value.startswith(("s3://", "file://")):
        ctx.fail(
            f"'{value.split('://')[0]}://' {what} are not supported",
            key,
            hint=f"use s3://BUCKET/PREFIX, file:///PATH or {path_hint}",
        )
    if "@" in urllib.parse.urlsplit(value).netloc:
        section = key.split(".")[0]
        ctx.fail(f"credentials in {key} are not allowed", key,
                 hint=f"use {section}.profile or the standard AWS variables")
    return value


def _parse_publish(top: _Table, ctx: _Ctx, base: Path) -> Publish:
    pt = top.table("publish")
    url = _store_url(
        pt.str("url"), "publish.url", base, ctx,
        what="destinations", path_hint="a folder path",
    )
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "s3" and not parts.netloc:
        ctx.fail(f"no bucket in '{url}'", "publish.url", hint="write s3://BUCKET/PREFIX")
    if parts.scheme == "file" and parts.netloc not in ("", "localhost"):
        ctx.fail(f"'{url}' is not on this machine", "publish.url",
                 hint="write file:///ABSOLUTE/PATH (or mount the share and use its path)")
    find_links = pt.str("find_links")
    try:
        ok = all(f == "channel" for f in _placeholders(find_links))
        find_links.format(channel="nightly")
    except (KeyError, IndexError, ValueError, AttributeError, TypeError):
        ok = False
    if not ok:
        ctx.fail(f"'{find_links}' has an unknown placeholder", "publish.find_links",
                 hint="only {channel} is known")
    co = pt.table("conda")
    channel = co.str("channel")
    if channel.startswith("file://"):
        channel = channel[len("file://"):]
    py = pt.table("pypi")
    p = Publish(
        url=url,
        endpoint_url=pt.str("endpoint_url"),
        region=pt.str("region"),
        profile=pt.str("profile"),
        acl=pt.str("acl"),
        find_links=find_links,
        index=pt.bool("index"),
        conda_channel=str(_path(channel, base).resolve()) if channel else "",
        anaconda_user=co.str("anaconda_user"),
        anaconda_label=co.str("anaconda_label"),
        anaconda_test_label=co.str("anaconda_test_label"),
        anaconda_site=co.str("anaconda_site"),
        token_env=co.str("token_env"),
        token_file=co.str("token_file"),
        pypi_url=py.str("repository_url"),
        pypi_username=py.str("username"),
        pypi_password_env=py.str("password_env"),
    )
    co.finish()
    py.finish()
    pt.finish()
    return p


def _parse_cluster(top: _Table, ctx: _Ctx, base: Path) -> ClusterConfig:
    ct = top.table("cluster")
    staging = _store_url(
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
    )
    ct.finish()
    return c


def _python_or_default(s: str) -> str:
    return s if s == "3" else normalize_python(s)


def _parse_machines(top: _Table, ctx: _Ctx) -> list[Machine]:
    raw = top.get("machines", required=True)
    if not isinstance(raw, list) or not raw:
        ctx.fail("machines must be a non-empty array of tables ([[machines]])", "machines")
    machines: list[Machine] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        key = f"machines[{i}]"
        if not isinstance(item, dict):
            ctx.fail("each machine must be a table ([[machines]])", key)
        t = _Table(item, key, ctx)
        name = t.str("name", required=True)
        if name in seen:
            ctx.fail(f"duplicate machine name '{name}'", f"{key}.name", hint="names must be unique")
        seen.add(name)
        platform = t.choice("platform", PLATFORMS, required=True)
        queues = t.int("queues", required=True)
        if queues < 1:
            ctx.fail(
                f"machine '{name}' has {queues} queues", f"{key}.queues", hint="at least 1"
            )
        executor = t.choice("executor", EXECUTORS, default="local")
        hostname = t.str("hostname", default="")
        explicit_raw = t.get("explicit_queues", default=[])
        if not isinstance(explicit_raw, list) or not all(
            isinstance(q, list) and all(isinstance(s, str) for s in q) for q in explicit_raw
        ):
            ctx.fail(
                "explicit_queues must be an array of arrays of strings",
                f"{key}.explicit_queues",
            )
        if len(explicit_raw) > queues:
            ctx.fail(
                f"machine '{name}' lists {len(explicit_raw)} explicit queues but has {queues}",
                f"{key}.explicit_queues",
                hint=f"set queues = {len(explicit_raw)}",
            )
        t.finish()
        machines.append(
            Machine(
                name=name,
                platform=platform,
                queues=queues,
                executor=executor,
                hostname=hostname,
                explicit_queues=tuple(tuple(q) for q in explicit_raw),
            )
        )
    return machines


def _parse_images(top: _Table, ctx: _Ctx) -> dict[str, dict[str, str]]:
    t = top.table("images")
    out: dict[str, dict[str, str]] = {"default": {}}
    for k in t:
        v = t.get(k)
        if not isinstance(v, (str, dict)):
            ctx.fail(
                f"images.{k} must be an image name or a table of CUDA version -> image, "
                f"not {type(v).__name__} ({v!r})",
                f"images.{k}",
            )
        if isinstance(v, str):
            if k != "default":
                ctx.fail(
                    f"images.{k} must be a table of CUDA version -> image",
                    f"images.{k}",
                    hint="only images.default may be a plain string",
                )
            _check_template(v, ctx, "images.default")
            out["default"]["default"] = v
            continue
        if k not in (*PACKAGES, "default"):
            continue  # reported by finish()
        sub = t.table(k)
        table: dict[str, str] = out.get(k, {})
        for cuda in sub:
            image = sub.str(cuda)
            _check_template(image, ctx, f"images.{k}.{cuda}")
            if cuda != "default":
                try:
                    cuda = normalize_cuda(cuda)
                except SpellingError as e:
                    ctx.fail(str(e), f"images.{k}.{cuda}")
            table[cuda] = image
        out[k] = table
    t.finish(valid=(*PACKAGES, "default"))
    return out


def _parse_timeouts(top: _Table, ctx: _Ctx) -> dict[str, dict[str, float]]:
    t = top.table("timeouts")
    out: dict[str, dict[str, float]] = {"": {}}
    names = (*PACKAGES, "default")
    for k in t:
        if k in PLATFORMS:
            sub = t.table(k)
            out[k] = {p: sub.duration(p) for p in sub if p in names}
            sub.finish(valid=names)
        elif k in names:
            out[""][k] = t.duration(k)
    t.finish(valid=(*names, *PLATFORMS))
    return out


def _parse_estimates(top: _Table, ctx: _Ctx) -> dict[str, Estimate]:
    t = top.table("estimates")
    out: dict[str, Estimate] = {}
    for k in t:
        if k not in (*PACKAGES, "default"):
            continue
        sub = t.table(k)
        out[k] = Estimate(cpu_s=sub.duration("cpu"), cuda_s=sub.duration("cuda"))
        sub.finish()
    t.finish(valid=(*PACKAGES, "default"))
    return out


# ---------------------------------------------------------------------------- machinery


class _Ctx:
    """The file being read, for messages that name the file and the line."""

    def __init__(self, file: str, text: str) -> None:
        self.file, self.text = file, text

    def line_of(self, keypath: str) -> int | None:
        """Best effort: the line where the last key of the path is written.

        Looked for inside its own table (`machines[1].name` after the second `[[machines]]`
        header, not at the first `name =` of the file), or the table's header when the path
        names a table; failing that, the nearest enclosing key or table that is written (a
        missing key points at its table); failing that, the last key anywhere.
        """
        if not self.text or not keypath:
            return None
        lines = self.text.splitlines()
        path = keypath
        while path:
            no = self._scan(lines, path)
            if no is not None:
                return no
            path = path.rpartition(".")[0]
        last = re.sub(r"\[\d+\]", "", keypath).split(".")[-1]
        pats = [
            re.compile(rf"^\s*[\"']?{re.escape(last)}[\"']?\s*="),
            re.compile(rf"[{{,]\s*[\"']?{re.escape(last)}[\"']?\s*="),
        ]
        for pat in pats:
            for no, line in enumerate(lines, 1):
                if pat.search(line):
                    return no
        return None

    @staticmethod
    def _scan(lines: list[str], keypath: str) -> int | None:
        """The line of `keypath` read with TOML's tables in mind, or None."""
        table, _, last = keypath.rpartition(".")
        bare = re.sub(r"\[\d+\]$", "", last)
        key_re = re.compile(rf"^\s*[\"']?{re.escape(bare)}[\"']?\s*=")
        current = ""
        counts: dict[str, int] = {}
        for no, line in enumerate(lines, 1):
            h = _HEADER_RE.match(line)
            if h:
                name = re.sub(r"[\s\"']", "", h.group(2))
                if h.group(1) == "[[":
                    counts[name] = counts.get(name, -1) + 1
                    current = f"{name}[{counts[name]}]"
                else:
                    current = name
                if keypath in (current, name) or current.startswith(keypath + "."):
                    return no
            elif current == table and key_re.search(line):
                return no
        return None

    def fail(self, message: str, key: str, *, hint: str | None = None) -> Any:
        raise ConfigError(message, file=self.file, key=key, line=self.line_of(key), hint=hint)


def _merge(defaults: Mapping[str, Any], data: Mapping[str, Any], ctx: _Ctx, path: str) -> Any:
    out = dict(defaults)
    for k, v in data.items():
        d = defaults.get(k)
        if isinstance(d, dict) and isinstance(v, dict):
            out[k] = _merge(d, v, ctx, f"{path}{k}.")
        else:
            out[k] = v
    return out


class _Table:
    """A TOML table read key by key; finish() rejects what nobody asked for."""

    _MISSING = object()

    def __init__(
        self,
        data: Mapping[str, Any],
        path: str,
        ctx: _Ctx,
        *,
        parent: _Table | None = None,
        name: str = "",
    ) -> None:
        self.data, self.path, self.ctx = data, path, ctx
        self.parent, self.name = parent, name
        self.used: set[str] = set()

    def _key(self, k: str) -> str:
        return f"{self.path}.{k}" if self.path else k

    def keys(self) -> list[str]:
        return list(self.data.keys())

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def get(self, k: str, *, required: bool = False, default: Any = _MISSING) -> Any:
        self.used.add(k)
        v = self.data.get(k, default)
        if v is self._MISSING or (required and (v is None or v == "" or v == [])):
            if required:
                self._misspelt(k)
                self.ctx.fail("is required", self._key(k))
            return None
        return v

    def _misspelt(self, k: str) -> None:
        """A required key is missing: a misspelling of it (`quues`) or of a table on its path
        (`[projcet]`) is the likelier mistake, so report that unknown key instead."""
        t: _Table | None = self
        name = k
        while t is not None:
            stray = [x for x in t.data if x != name and x not in t.used]
            close = difflib.get_close_matches(name, stray, n=1, cutoff=0.6)
            if close:
                t.ctx.fail("unknown key", t._key(close[0]), hint=f"did you mean '{name}'?")
            name, t = t.name, t.parent

    def _type_fail(self, k: str, want: str, v: Any) -> Any:
        got = type(v).__name__
        return self.ctx.fail(f"must be {want}, not {got} ({v!r})", self._key(k))

    def str(
        self,
        k: builtins.str,
        *,
        required: builtins.bool = False,
        default: Any = _MISSING,
        item: Any = None,
    ) -> builtins.str:
        v = self.get(k, required=required, default=default)
        if not isinstance(v, str):
            self._type_fail(k, "a string", v)
        if item is not None:
            try:
                v = item(v)
            except SpellingError as e:
                self.ctx.fail(str(e), self._key(k))
        return str(v)

    def int(
        self,
        k: builtins.str,
        *,
        required: builtins.bool = False,
        default: Any = _MISSING,
        minimum: builtins.int | None = None,
    ) -> builtins.int:
        v = self.get(k, required=required, default=default)
        if isinstance(v, bool) or not isinstance(v, int):
            self._type_fail(k, "an integer", v)
        if minimum is not None and v < minimum:
            self.ctx.fail(f"must be at least {minimum}, not {v}", self._key(k))
        return int(v)

    def number(self, k: builtins.str, *, minimum: float | None = None) -> float:
        v = self.get(k)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            self._type_fail(k, "a finite number", v)
        if minimum is not None and v < minimum:
            self.ctx.fail(f"must be at least {minimum}, not {v}", self._key(k))
        return float(v)

    def bool(self, k: builtins.str) -> builtins.bool:
        v = self.get(k)
        if not isinstance(v, bool):
            self._type_fail(k, "true or false", v)
        return bool(v)

    def duration(self, k: builtins.str) -> float:
        v = self.get(k)
        if v is None:
            self.ctx.fail('is required: write seconds or e.g. "15m", "1h30m"', self._key(k))
        try:
            return parse_duration(v)
        except ValueError as e:
            return self.ctx.fail(str(e), self._key(k))  # type: ignore[no-any-return]

    def choice(
        self,
        k: builtins.str,
        choices: Sequence[builtins.str],
        *,
        required: builtins.bool = False,
        default: Any = _MISSING,
    ) -> builtins.str:
        v = self.str(k, required=required, default=default)
        if v not in choices:
            hint = did_you_mean(v, choices)
            self.ctx.fail(
                f"'{v}' is not one of {', '.join(choices)}", self._key(k), hint=hint
            )
        return v

    def str_list(
        self,
        k: builtins.str,
        *,
        required: builtins.bool = False,
        default: Any = _MISSING,
        item: Any = None,
        choices: Sequence[builtins.str] | None = None,
    ) -> list[builtins.str]:
        v = self.get(k, required=required, default=default)
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            self._type_fail(k, "an array of strings", v)
        out: list[str] = []
        for x in v:
            if choices is not None and x not in choices:
                hint = did_you_mean(x, choices)
                self.ctx.fail(
                    f"'{x}' is not one of {', '.join(choices)}", self._key(k), hint=hint
                )
            if item is not None:
                try:
                    x = item(x)
                except SpellingError as e:
                    self.ctx.fail(str(e), self._key(k))
            out.append(x)
        return out

    def str_map(
        self, k: builtins.str, *, key_check: Any = None
    ) -> dict[builtins.str, builtins.str]:
        v = self.get(k)
        if not isinstance(v, dict) or not all(isinstance(x, str) for x in v.values()):
            self._type_fail(k, "a table of strings", v)
        out: dict[str, str] = {}
        for mk, mv in v.items():
            if key_check is not None:
                try:
                    mk = key_check(mk)
                except SpellingError as e:
                    self.ctx.fail(str(e), f"{self._key(k)}.{mk}")
            out[mk] = mv
        return out

    def table(self, k: builtins.str, *, required: builtins.bool = False) -> _Table:
        v = self.get(k, required=required, default={})
        if not isinstance(v, dict):
            self._type_fail(k, "a table", v)
        return _Table(v, self._key(k), self.ctx, parent=self, name=k)

    def finish(self, valid: Sequence[builtins.str] | None = None) -> None:
        allowed = set(valid) if valid is not None else self.used
        for k in self.data:
            if k not in allowed:
                hint = did_you_mean(k, sorted(allowed))
                self.ctx.fail("unknown key", self._key(k), hint=hint)


def _placeholders(template: str) -> list[str]:
    """The replacement fields of a str.format template (ValueError when malformed)."""
    import string

    return [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]


def _check_template(image: str, ctx: _Ctx, key: str) -> None:
    # Exactly these names: no attribute or index ({cuda.x} raised AttributeError here;
    # {cuda_digits[0]} passed here and raised IndexError at night for cpu builds).
    known = ("cuda", "cuda_version", "cuda_digits")
    try:
        bad = next((f for f in _placeholders(image) if f not in known), None)
        if bad is None:
            image.format(cuda="cu100", cuda_version="10.0", cuda_digits="100")
    except (KeyError, IndexError, ValueError, AttributeError, TypeError) as e:
        bad = str(e)
    if bad is not None:
        ctx.fail(
            f"'{image}' has an unknown placeholder {{{bad}}}",
            key,
            hint="use {cuda}, {cuda_version} or {cuda_digits}",
        )


def _unique(items: list[str], ctx: _Ctx, key: str) -> list[str]:
    seen: list[str] = []
    for i in items:
        if i in seen:
            ctx.fail(f"'{i}' is listed twice", key)
        seen.append(i)
    return seen


def _path(value: str, base: Path) -> Path:
    p = Path(os.path.expanduser(value))
    return p if p.is_absolute() else (base / p)
