"""Building builder images through the engine's API (the docker SDK; Docker or Podman).

Base layer: the cached debootstrap rootfs, imported as an image (POST /images/create
fromSrc). Interpreter and CUDA layers: the engine's build endpoint (POST /build) from a
context tar, each `FROM` the layer below, so the base is stored once whatever the number of
CUDA images. An image is tagged only when its build finished, so an interrupted build leaves
no tag and the next run builds it again (with the engine's layer cache and nightly's
download caches warm). An existing tag is never rebuilt: the tag carries the spec's hash.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nightly import procs
from nightly.config.retry import Backoff, default_backoffs
from nightly.config.timeouts import ExternalTimeouts, default_timeouts
from nightly.core.matrix import cuda_version
from nightly.core.spec import BuilderSpec
from nightly.errors import NightlyError, require
from nightly.executors.container_engine import (
    NVCC_LABEL,
    engine_client,
    engine_fault,
    engine_trouble,
)
from nightly.images import context, cuda, rootfs, transfer
from nightly.jsonvalues import json_object

if TYPE_CHECKING:
    from docker import DockerClient

Log = Callable[[str], None]

LABEL_SPEC = "org.nightly.builder"
LABEL_HASH = "org.nightly.spec-hash"
LABEL_CUDA = "org.nightly.cuda"
LABEL_MANYLINUX = "org.nightly.manylinux"
LABEL_PYTHONS = "org.nightly.pythons"
LABEL_NVCC = NVCC_LABEL  # read back by the container executor for each build's log header
LABEL_TOOLKIT = "org.nightly.cuda-sources"
LABEL_POLICY = "org.nightly.manylinux-policy"
LABEL_TOOLCHAIN = "org.nightly.toolchain"


class ImageBuildError(NightlyError):
    """An image could not be built (engine, download, debootstrap, a failed build step)."""


def default_cache() -> Path:
    """NIGHTLY_IMAGES_CACHE, else ~/.cache/nightly/images (rootfs, wheels, .debs, toolkits)."""
    env = os.environ.get("NIGHTLY_IMAGES_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "nightly" / "images"


def connect(base_url: str | None = None, *, timeouts: ExternalTimeouts | None = None,
            backoff: Backoff | None = None) -> DockerClient:
    """A client of the engine (engine_client: a slow answer is waited for and tried again),
    pinged: ImageBuildError in one line when the engine is not there."""
    require("docker", what="building and listing images")
    from docker.errors import DockerException

    with answering(base_url, timeouts, backoff):
        try:
            client = engine_client(base_url, read_timeout_s=(timeouts or default_timeouts())
                                   .engine_read, backoff=backoff or default_backoffs().engine)
            client.ping()
        except (DockerException, OSError) as e:
            if engine_fault(e) == "slow":
                raise ImageBuildError(engine_trouble(
                    e, _where(base_url), (timeouts or default_timeouts()).engine_read,
                    backoff or default_backoffs().engine)) from e
            raise ImageBuildError(
                f"container engine not reachable at {_where(base_url)}: "
                f"{str(e).splitlines()[0]}. Start it (on a test machine: "
                "scripts/container-engine.sh, then export the DOCKER_HOST it prints) or set "
                "[executor.container] base_url"
            ) from e
    return client


def _where(base_url: str | None) -> str:
    return base_url or os.environ.get("DOCKER_HOST") or "the default engine socket"


@contextmanager
def answering(base_url: str | None, timeouts: ExternalTimeouts | None = None,
              backoff: Backoff | None = None) -> Iterator[None]:
    """Engine requests inside: what the engine failed to do after the client's retries (no
    answer within [external_timeouts] engine_read, no connection) is an ImageBuildError of
    one line naming the engine, never a requests traceback."""
    try:
        from requests.exceptions import RequestException
    except ImportError:  # no container extra: engine_client names it (MissingExtra)
        yield
        return
    try:
        yield
    except RequestException as e:
        raise ImageBuildError(engine_trouble(
            e, _where(base_url), (timeouts or default_timeouts()).engine_read,
            backoff or default_backoffs().engine)) from e


@dataclass(frozen=True, kw_only=True)
class ImageInfo:
    tag: str
    id: str
    size: int  # bytes, the whole image (shared layers counted in each)
    created: dt.datetime
    labels: dict[str, str]


def inspect(client: DockerClient, tag: str) -> ImageInfo | None:
    from docker.errors import ImageNotFound

    try:
        image = client.images.get(tag)
    except ImageNotFound:
        return None
    created = str(image.attrs.get("Created", ""))
    try:
        when = dt.datetime.fromisoformat(created[:26].rstrip("Z") + "+00:00")
    except ValueError:
        when = dt.datetime.now(dt.timezone.utc)
    return ImageInfo(tag=tag, id=str(image.id), size=int(image.attrs.get("Size") or 0),
                     created=when, labels=dict(image.labels or {}))


@contextmanager
def cache_lock(cache: Path) -> Iterator[None]:
    """One image build at a time per cache (tests, benchmarks and CI may run together)."""
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def log_file(cache: Path, tag: str) -> Path:
    path = cache / "logs" / (tag.replace("/", "_").replace(":", "_") + ".log")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _split(tag: str) -> tuple[str, str]:
    repo, _, name = tag.rpartition(":")
    return repo, name


# A build step's line: podman's "STEP 3/12: RUN ..." or Docker's "Step 3/12 : RUN ...".
_STEP = re.compile(r"^(?:STEP|Step) (\d+)/(\d+)\s?:")


def _build(client: DockerClient, ctx: Path, tag: str, logfile: Path, log: Log) -> None:
    """POST /build from the context tar; output to the log, STEP lines to the console."""
    from docker.errors import APIError

    t0 = time.monotonic()
    label = f"{tag}: image build (context {transfer.size(ctx.stat().st_size)})"
    try:
        with ctx.open("rb") as f, logfile.open("a") as out, \
                transfer.Meter(label, None, log, unit="steps") as meter:
            stream = client.api.build(fileobj=f, custom_context=True, tag=tag, rm=True,
                                      forcerm=True, decode=True, pull=False)
            for chunk in stream:
                if "error" in chunk:
                    out.write(f"ERROR: {chunk['error']}\n")
                    raise ImageBuildError(f"building {tag} failed: {chunk['error'].strip()} "
                                          f"(log: {logfile})")
                text = str(chunk.get("stream", ""))
                out.write(text)
                out.flush()
                step = _STEP.match(text)
                if step:
                    log(f"{tag}: {text.strip()[:110]}")
                    meter.update(int(step.group(1)) - 1, int(step.group(2)))
            meter.update(meter.total)
    except APIError as e:
        raise ImageBuildError(f"building {tag} failed: {e.explanation} (log: {logfile})") from e
    if inspect(client, tag) is None:
        raise ImageBuildError(f"the engine finished building {tag} but has no such image "
                              f"(log: {logfile})")
    log(f"{tag}: built in {time.monotonic() - t0:.0f} s")


def build_from_context(
    client: DockerClient, ctx: Path, tag: str, logfile: Path, log: Log,
    write: Callable[[Path], object],
) -> str:
    """Write a build context tarball with `write`, build `tag` from it, always remove it."""
    ctx.parent.mkdir(parents=True, exist_ok=True)
    try:
        write(ctx)
        log(f"{tag}: building (context {ctx.stat().st_size / 1e6:.0f} MB)")
        _build(client, ctx, tag, logfile, log)
    finally:
        ctx.unlink(missing_ok=True)
    return tag


def write_header(logfile: Path, tag: str, spec: BuilderSpec, lines: list[str]) -> None:
    stamp = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    head = ["=" * 78, f"nightly image build {tag}", f"builder:  {spec.name}",
            f"started:  {stamp}", *lines, "=" * 78, ""]
    logfile.write_text("\n".join(head) + "\n")


def ensure_base(client: DockerClient, spec: BuilderSpec, cache: Path, log: Log) -> str:
    tag = spec.base_tag()
    if inspect(client, tag) is not None:
        log(f"{tag}: present")
        return tag
    if spec.base_image:
        # An existing image (a registry's manylinux image...): the site pulls it, nightly
        # never does (builds must not depend on a registry being reachable mid-night).
        raise ImageBuildError(
            f"builder {spec.name}: base_image {tag} is not on the engine; pull or load it "
            f"first (e.g. `podman pull {tag}`)"
        )
    mirror = spec.mirror or cuda.host_mirror()
    fs = rootfs.bootstrap(suite=spec.suite, packages=spec.base_packages, key=spec.base_hash(),
                          mirror=mirror, cache=cache, log=log)
    write_header(log_file(cache, tag), tag, spec, [f"suite:    {spec.suite} ({mirror})",
                                              f"packages: {' '.join(spec.base_packages)}"])
    return import_rootfs(client, fs, tag, {LABEL_SPEC: spec.name, LABEL_HASH: spec.base_hash()},
                         cache, log)


def import_rootfs(client: DockerClient, fs: Path, tag: str, labels: dict[str, str], cache: Path,
                  log: Log) -> str:
    """Import a cached rootfs folder as the image `tag` (POST /images/create fromSrc)."""
    changes = [
        'CMD ["/bin/bash"]',
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LABEL " + " ".join(f"{k}={v}" for k, v in labels.items()),
    ]
    tar = cache / "tmp" / f"{_split(tag)[1]}.tar"
    try:
        rootfs.tar_rootfs(fs, tar)
        log(f"{tag}: importing the rootfs ({tar.stat().st_size / 1e6:.0f} MB)")
        with tar.open("rb") as f:
            answer = client.api.import_image(src=f, changes=changes)
    finally:
        tar.unlink(missing_ok=True)
    image_id = _imported_id(answer)
    repo, name = _split(tag)
    client.images.get(image_id).tag(repo, name)
    log(f"{tag}: imported")
    return tag


def _imported_id(answer: object) -> str:
    """The image id from the import endpoint's answer (one or more JSON lines)."""
    text = answer.decode() if isinstance(answer, bytes) else str(answer)
    for line in reversed(text.strip().splitlines()):
        data = json_object(line)
        if data is None:
            continue
        for k in ("id", "status"):
            value = str(data.get(k, ""))
            if value.startswith("sha256:") or len(value) == 64:
                return value
    raise ImageBuildError(f"the engine's import answer names no image: {text[:200]}")


def ensure_cpu(client: DockerClient, spec: BuilderSpec, cache: Path, log: Log) -> str:
    tag = spec.cpu_tag()
    if inspect(client, tag) is not None:
        log(f"{tag}: present")
        return tag
    ensure_base(client, spec, cache, log)
    labels = {
        LABEL_SPEC: spec.name, LABEL_HASH: spec.cpu_hash(), LABEL_CUDA: "cpu",
        LABEL_MANYLINUX: spec.manylinux_tag(), LABEL_POLICY: spec.manylinux or "-",
        LABEL_TOOLCHAIN: spec.toolchain_text(),
        LABEL_PYTHONS: " ".join(f"{p.version}={p.describe_in(spec.suite)}" for p in spec.pythons),
    }
    logfile = log_file(cache, tag)
    write_header(logfile, tag, spec, [f"parent:   {spec.base_tag()}",
                                 *(f"python:   {p.version} <- {p.describe()} at {p.dest}"
                                   for p in spec.pythons),
                                 f"tools:    {' '.join(spec.tools)}"])
    return build_from_context(
        client, cache / "tmp" / f"ctx-{spec.cpu_hash()}.tar", tag, logfile, log,
        lambda ctx: context.write_cpu_context(spec, labels, cache, ctx, log))


def nvcc_version(prefix: Path) -> str:
    proc = procs.call([str(prefix / "bin" / "nvcc"), "--version"])
    return proc.stdout.strip() if proc.returncode == 0 else f"(nvcc failed: {proc.stderr})"


def ensure_cuda(client: DockerClient, spec: BuilderSpec, cuda_id: str, cache: Path,
                log: Log) -> str:
    if cuda_id == "cpu":
        return ensure_cpu(client, spec, cache, log)
    tag = spec.tag_for(cuda_id)
    if inspect(client, tag) is not None:
        log(f"{tag}: present")
        return tag
    parent = ensure_cpu(client, spec, cache, log)
    version = cuda_version(cuda_id)
    prefix = cuda.assemble(version, cache, mirror=spec.mirror,
                           host_gcc=spec.host_gcc_for(cuda_id), log=log)
    nvcc = nvcc_version(prefix)
    sources = (prefix / "nightly-sources.txt").read_text().split()
    labels = {
        LABEL_SPEC: spec.name, LABEL_HASH: spec.hash_for(cuda_id), LABEL_CUDA: cuda_id,
        LABEL_MANYLINUX: spec.manylinux_tag(cuda_id), LABEL_POLICY: spec.manylinux or "-",
        LABEL_TOOLCHAIN: spec.toolchain_text(cuda_id),
        LABEL_PYTHONS: " ".join(f"{p.version}={p.describe()}" for p in spec.pythons),
        LABEL_NVCC: next((line for line in nvcc.splitlines() if "release" in line), ""),
        LABEL_TOOLKIT: " ".join(sources),
    }
    logfile = log_file(cache, tag)
    write_header(logfile, tag, spec, [f"parent:   {parent}", f"CUDA:     {version} at "
                                 f"/usr/local/cuda-{version} (/usr/local/cuda -> it)",
                                 *(f"from:     {s}" for s in sources),
                                 "nvcc --version:", *(f"  {line}" for line in nvcc.splitlines())])
    return build_from_context(
        client, cache / "tmp" / f"ctx-{spec.hash_for(cuda_id)}.tar", tag, logfile, log,
        lambda ctx: context.write_cuda_context(parent, version, prefix, labels, ctx,
                                               context.cuda_toolchain_env(spec, cuda_id)))


def build(client: DockerClient, spec: BuilderSpec, cudas: list[str], cache: Path,
          log: Log) -> list[str]:
    """Build (or find) the images of `spec` for `cudas`; returns their tags."""
    with cache_lock(cache):
        return [ensure_cuda(client, spec, c, cache, log) for c in cudas]
