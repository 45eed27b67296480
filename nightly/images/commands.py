"""`nightly images build | list | check`: the builder images a configuration's matrix needs.

A build uses a declared builder when its `[images]` entry is `@NAME` (a `[builders.NAME]`
table); the image is then that builder's image for the build's CUDA flavour, whose tag
carries the spec's content hash. Images named literally (`pytorch/manylinux-builder:cpu`)
are the site's business: list and check report them, build leaves them alone.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Concatenate, ParamSpec, TypeVar

from nightly.core.matrix import Build, SpellingError, normalize_cuda
from nightly.core.spec import BuilderSpec, SpecError
from nightly.errors import NightlyError, UsageError
from nightly.images import rocm, runtime

if TYPE_CHECKING:
    from docker import DockerClient

    from nightly.config import Config
    from nightly.images.engine import ImageInfo

Log = Callable[[str], None]
P = ParamSpec("P")
R = TypeVar("R")


def _engine_named(fn: Callable[Concatenate[Config, P], R]) -> Callable[Concatenate[Config, P], R]:
    """The command's engine requests: a slow or absent engine (after the client's retries,
    nightly.executors.container_engine.engine_client) is one line naming it."""

    @functools.wraps(fn)
    def named(config: Config, /, *args: P.args, **kwargs: P.kwargs) -> R:
        from nightly.images import engine

        with engine.answering(config.container.base_url or None, config.external_timeouts,
                              config.backoff.engine):
            return fn(config, *args, **kwargs)

    return named


def _connect(config: Config) -> DockerClient:
    from nightly.images import engine

    return engine.connect(config.container.base_url or None, timeouts=config.external_timeouts,
                          backoff=config.backoff.engine)


class ImagesMissing(NightlyError):
    """Images the night needs are not on the engine."""

    exit_code = 1


@dataclass
class Needed:
    """One image the matrix needs, with the builds that run in it."""

    tag: str
    spec: BuilderSpec | None  # None: a literal image name (not built by nightly)
    cuda: str
    builds: list[str] = field(default_factory=list)
    runtime: bool = False  # the builder's runtime image, where these builds' wheels are tested

    @property
    def built_here(self) -> bool:
        """Whether `nightly images build` makes it (not a literal name, not a runtime_image)."""
        return self.spec is not None and not (self.runtime and self.spec.runtime_image)


def raw_image(config: Config, build: Build) -> str:
    """The `[images]` entry that applies to a build, before placeholders are filled."""
    for table in (config.images.get(build.package, {}), config.images.get("default", {})):
        image = table.get(build.cuda) or table.get("default")
        if image:
            return image
    return ""


def needed(config: Config, *, cudas: Sequence[str] = (), package: str | None = None,
           builds: Sequence[Build] | None = None) -> list[Needed]:
    """The images the builds (default: the whole matrix on Linux) run in, in matrix order."""
    out: dict[str, Needed] = {}
    for b in config.builds if builds is None else builds:
        if b.platform != "linux" or (cudas and b.cuda not in cudas):
            continue
        if package and b.package != package:
            continue
        if host_built(config, b):
            continue
        raw = raw_image(config, b)
        spec = None
        if raw.startswith("@"):
            spec = config.builders[raw[1:]]
        tag = config.image_for(b)
        if not tag:
            continue
        out.setdefault(tag, Needed(tag=tag, spec=spec, cuda=b.cuda)).builds.append(b.id)
        tested = runtime.needed_by(config, b)
        if tested is not None:
            out.setdefault(tested[1], Needed(tag=tested[1], spec=tested[0], cuda=b.cuda,
                                             runtime=True)).builds.append(b.id)
    return list(out.values())


def host_built(config: Config, build: Build) -> bool:
    """Whether every machine that can build it runs it with the local executor (a cross
    build on the host, `executors = { aarch64 = "local" }`): no image of it is needed."""
    takers = [m for m in config.machines if m.can_build(build)]
    return bool(takers) and all(m.executor_for(build.target_arch) == "local" for m in takers)


def parse_cudas(text: str | None) -> list[str]:
    """`--cuda cpu,13.0,rocm5.7`: CUDA spellings, and ROCm images as `rocmX.Y`."""
    if not text:
        return []
    try:
        return [c.strip() if c.strip().startswith("rocm") else normalize_cuda(c)
                for c in text.split(",") if c.strip()]
    except SpellingError as e:
        raise UsageError(f"--cuda: {e}") from e


@_engine_named
def build_images(config: Config, *, cudas: Sequence[str] = (), package: str | None = None,
                 client: DockerClient | None = None, cache: Path | None = None,
                 log: Log = print) -> list[str]:
    """Build every declared image the selection needs (those present are kept)."""
    from nightly.images import engine

    wanted = needed(config, cudas=cudas, package=package)
    if not wanted:
        raise UsageError(
            "nothing to build: no Linux build of the selection uses a declared builder "
            "(an [images] entry \"@NAME\" naming a [builders.NAME] table)"
        )
    client = client or _connect(config)
    cache = cache or engine.default_cache()
    tags: list[str] = []
    for n in wanted:
        if n.spec is None or not n.built_here:
            why = "a runtime_image" if n.spec else "not declared in [builders]"
            log(f"{n.tag}: {why}; nightly does not build it")
            continue
        try:
            if n.runtime:
                tags.append(runtime.ensure(client, n.spec, cache, log))
            elif n.cuda.startswith("rocm"):  # its own module: a ROCm image stands on the cpu layer
                with engine.cache_lock(cache):
                    tags.append(rocm.ensure(client, n.spec, n.cuda, cache, log))
            else:
                tags += engine.build(client, n.spec, [n.cuda], cache, log)
        except KeyboardInterrupt:
            log("interrupted: nothing half-built is tagged; run the same command again to go on")
            raise
    return tags


@dataclass(frozen=True, kw_only=True)
class Row:
    tag: str
    present: bool
    size: int
    spec_hash: str
    age: str
    manylinux: str
    pythons: str
    builds: int
    nvcc: str
    policy: str = "-"  # the declared manylinux policy of its manywheel builds
    toolchain: str = ""  # what its toolchain guarantees (the glibc it links against)
    role: str = "builder"  # or "runtime": where the builds' wheels are tested
    used_by: tuple[str, ...] = ()  # the ids of the builds that run (or are tested) in it


def build_list(ids: Sequence[str], most: int = 6) -> str:
    """`manywheel_3.13_rocm5.7, ... and 4 more`: the builds an image serves, on one line."""
    shown = ", ".join(ids[:most]) or "-"
    return shown + (f" and {len(ids) - most} more" if len(ids) > most else "")


def _age(created: dt.datetime) -> str:
    seconds = (dt.datetime.now(dt.timezone.utc) - created).total_seconds()
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= n:
            return f"{seconds / n:.0f}{unit}"
    return f"{max(seconds, 0):.0f}s"


@_engine_named
def list_images(config: Config, *, client: DockerClient | None = None) -> list[Row]:
    from nightly.images import engine

    client = client or _connect(config)
    rows = []
    for n in needed(config):
        info = engine.inspect(client, n.tag)
        labels = info.labels if info else {}
        if n.runtime and n.spec is not None:
            rows.append(_runtime_row(n, n.spec, info))
            continue
        spec_hash = n.spec.hash_for(n.cuda) if n.spec else labels.get(engine.LABEL_HASH, "-")
        pythons = (" ".join(f"{p.version}={p.describe_in(n.spec.suite)}" for p in n.spec.pythons)
                   if n.spec
                   else labels.get(engine.LABEL_PYTHONS, "?"))
        manylinux = labels.get(engine.LABEL_MANYLINUX) or (n.spec.manylinux_tag(n.cuda) if n.spec
                                                          else "?")
        rows.append(Row(
            tag=n.tag, present=info is not None, size=info.size if info else 0,
            spec_hash=spec_hash, age=_age(info.created) if info else "-",
            manylinux=manylinux, pythons=pythons, builds=len(n.builds), used_by=tuple(n.builds),
            nvcc=labels.get(engine.LABEL_NVCC, ""),
            policy=(n.spec.manylinux if n.spec else labels.get(engine.LABEL_POLICY, "")) or "-",
            toolchain=(n.spec.toolchain_text(n.cuda) if n.spec
                       else labels.get(engine.LABEL_TOOLCHAIN, "?")),
        ))
    return rows


def _runtime_row(n: Needed, spec: BuilderSpec, info: ImageInfo | None) -> Row:
    return Row(
        tag=n.tag, present=info is not None, size=info.size if info else 0,
        spec_hash="-" if spec.runtime_image else runtime.image_hash(spec),
        age=_age(info.created) if info else "-", manylinux="-",
        pythons=" ".join(f"{p.version}={p.describe_in(spec.suite)}" for p in spec.pythons),
        builds=len(n.builds), used_by=tuple(n.builds), nvcc="", role="runtime",
        toolchain=("none: the site's runtime_image" if spec.runtime_image else
                   f"none: the runtime image of {spec.name} (where its wheels are tested)"),
    )


def build_command(config: Config, missing: Sequence[Needed]) -> str:
    cudas = sorted({n.cuda for n in missing if n.built_here})
    return f"nightly images build --config {config.path} --cuda {','.join(cudas)}"


def preflight(config: Config, builds: Sequence[Build],
              client: DockerClient | None = None) -> None:
    """The night's check before its first container build: every declared builder image
    its builds need is on the engine (literal image names are the executor's preflight's)."""
    if any(n.spec is not None for n in needed(config, builds=builds)):
        check_images(config, builds=builds, client=client, declared_only=True)


@_engine_named
def check_images(config: Config, *, builds: Sequence[Build] | None = None,
                 client: DockerClient | None = None, declared_only: bool = False) -> list[Needed]:
    """Raise ImagesMissing naming the command that builds what is missing."""
    from nightly.images import engine

    client = client or _connect(config)
    wanted = needed(config, builds=builds)
    if declared_only:
        wanted = [n for n in wanted if n.spec is not None]
    missing = [n for n in wanted if engine.inspect(client, n.tag) is None]
    if not missing:
        return wanted
    lines = "\n".join(f"  - {n.tag} ({'runtime image: tests' if n.runtime else 'needed by'} "
                      f"{len(n.builds)} build(s): "
                      f"{', '.join(n.builds[:3])}{' ...' if len(n.builds) > 3 else ''})"
                      for n in missing)
    declared = [n for n in missing if n.built_here]
    fix = (f"Build them with: {build_command(config, declared)}" if declared else "")
    if any(n.spec is None for n in missing):
        fix += ("\n" if fix else "") + ("Images not declared in [builders] must be built or "
                                        "pulled by the site (or declare a builder for them).")
    for n in missing:
        if n.spec is not None and not n.built_here:
            fix += ("\n" if fix else "") + (f"{n.tag} is builder {n.spec.name}'s runtime_image: "
                                            "pull or load it (nightly never builds it).")
    raise ImagesMissing(f"{len(missing)} image(s) missing on the engine:\n{lines}\n{fix}")


def spec_error_text(e: SpecError) -> str:
    return f"{e} ({e.hint})" if e.hint else str(e)
