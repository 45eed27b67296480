"""The configuration as frozen keyword-only dataclasses: what every other module reads.

Nothing here reads TOML: `nightly.config.loader` builds these from nightly.toml laid over
`nightly/defaults.toml` (the single source of defaults).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import nightly.core.axes as axes
from nightly.config.retry import Backoffs, default_backoffs
from nightly.config.timeouts import ExternalTimeouts, default_timeouts
from nightly.core.matrix import Build, PackageMatrix
from nightly.core.spec import BuilderSpec, SpecError
from nightly.errors import ConfigError, did_you_mean

EXECUTORS = ("local", "container")
SCHEDULE_MODES = ("explicit", "auto")


@dataclass(frozen=True, kw_only=True)
class Project:
    name: str
    source: str
    branch: str
    ref: str
    base_version: str
    build_number: int
    # How the project's build takes the version: auto, env, setuptools-scm, rewrite or keep
    # (nightly.config.detect resolves auto from the source).
    version_from: str = "auto"
    # Other distribution names the project's builds deliver (a package is the project's when
    # its normalised name is `name` or one of these: nightly.builds.area.ownership).
    extra_names: tuple[str, ...] = ()
    # The limited-API floor of the project's wheels ("cp310"; "": none): one build per floor,
    # its wheel tested on every Python of the range (nightly.core.limited).
    limited_api: str = ""


@dataclass(frozen=True, kw_only=True)
class BuildSettings:
    """[build]: how Python packages are built (pip's PEP 517 front end)."""

    isolation: bool = True
    index_url: str = ""  # "": the host's pip configuration
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    # Prepare a wheelhouse of build requirements once per night and build from it alone.
    wheelhouse: bool = False
    # Build twice and compare (nightly.builds.repro.check): none, sample (one build per package
    # type), all.
    check_reproducible: str = "none"
    # Keep each build's environment between nights in the stable build folder, checked
    # against its key (nightly.builds.area.buildenv); false: a fresh one every build.
    reuse_env: bool = True
    # What creates environments and installs into them: "auto" (uv where found and pip's
    # configuration can be handed to it, else pip) or "pip".
    installer: str = "auto"


@dataclass(frozen=True, kw_only=True)
class Machine:
    name: str
    platform: str
    queues: int
    executor: str
    hostname: str = ""
    # Each inner tuple is one queue, as written: build ids, globs or "package pythons cudas".
    explicit_queues: tuple[tuple[str, ...], ...] = ()
    gpu: bool = False  # has a GPU: the GPU part of CUDA builds' tests runs here
    # What it can build: target architectures ((): the platform's default) and accelerators,
    # families or exact spellings ((): cpu and cuda, what every machine built before 2026).
    archs: tuple[str, ...] = ()
    accelerators: tuple[str, ...] = ()
    # (architecture, executor) where builds for an architecture run with another executor
    # than `executor`: a container machine that cross-builds aarch64 on the host
    # (`executors = { aarch64 = "local" }`).
    arch_executors: tuple[tuple[str, str], ...] = ()

    def executor_for(self, arch: str) -> str:
        """The executor of this machine's builds for `arch`."""
        return dict(self.arch_executors).get(arch, self.executor)

    @property
    def arch_list(self) -> tuple[str, ...]:
        return self.archs or (axes.default_arch(self.platform),)

    @property
    def accelerator_list(self) -> tuple[str, ...]:
        return self.accelerators or DEFAULT_ACCELERATORS

    def can_build(self, build: Build) -> bool:
        """Routing: the build's platform, one of its architectures, one of its accelerators."""
        return (build.platform == self.platform and build.target_arch in self.arch_list
                and axes.accepts(self.accelerator_list, build.cuda))

    def describe(self) -> str:
        """'lin-a (linux x86_64; cpu, cuda)': how plans and routing errors name it."""
        return (f"{self.name} ({self.platform} {', '.join(self.arch_list)}; "
                f"{', '.join(self.accelerator_list)})")


DEFAULT_ACCELERATORS = ("cpu", "cuda")


@dataclass(frozen=True, kw_only=True)
class Estimate:
    cpu_s: float
    cuda_s: float
    rocm_s: float = 0.0  # 0: as cuda_s
    xpu_s: float = 0.0  # 0: as cuda_s
    by_arch: Mapping[str, Estimate] = field(default_factory=dict)  # per target architecture

    def for_build(self, build: Build) -> float:
        est = self.by_arch.get(build.target_arch, self)
        if build.family == "cpu":
            return est.cpu_s
        extra = {"rocm": est.rocm_s, "xpu": est.xpu_s}.get(build.family, 0.0)
        return extra or est.cuda_s


@dataclass(frozen=True, kw_only=True)
class LocalSettings:
    pythons: Mapping[str, str]
    cuda: Mapping[str, str]
    user: str = ""  # run recipes as this account ("": nightly's own user); nightly/hardening.py
    # Where a build user's builds run and read their inputs ("": /var/tmp/nightly-<user>);
    # nightly/builds/area/userarea.py
    build_dir: str = ""


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
    index_versions: int  # pages show each project's newest N versions (0: all)
    history_days: int = 90  # nights of the build history kept (0: all; never under 30)


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
    bisect: bool = False  # bisect each new failure group after the night, before notifying
    bisect_budget_s: float = 7200.0


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
    # The GPU part (gpu_check, gpu_command) is a test stage of its own (nightly.builds.test.smoke).
    gpu_command: str = ""
    gpu_timeout_s: float = 600.0
    gpu_retries: int = 0
    require_gpu: bool = False  # a CUDA build whose GPU part was not run fails
    # The wheel's runtime dependencies in the smoke venv: "none" (--no-deps) or "index" (pip
    # installs them from index_url / extra_index_urls, else [build]'s, else the host's pip
    # configuration); the wheel itself always from the day's packages.
    dependencies: str = "none"
    index_url: str = ""
    extra_index_urls: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Publish:
    url: str  # normalised: s3://… or file:///abs, "" when nothing is published
    endpoint_url: str
    region: str
    profile: str
    acl: str
    find_links: str  # the template as written: {project} and {channel} are replaced
    index: bool
    index_shared: tuple[str, ...]  # folders listed in every accelerator folder of their channel
    index_aggregate: bool  # channel roots list all their accelerator folders' files
    index_workers: int  # requests a full index run makes at once (1: one after another)
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
    project: str  # [project] name, for {project} in find_links
    public_url: str = ""  # where users read the store (nightly validate); "" = the file:// url
    validate: bool = False  # validate what was published at the end of the night
    # What a failed build holds back (nightly.publish.gate): "build" (only itself), "folder"
    # (every package of the folders it was destined for), "night" (everything).
    atomic: str = "build"

    def find_links_name(self, channel: str) -> str:
        """The flat find-links page of a folder of `channel` (nightly, test, release)."""
        return self.find_links.format(project=self.project, channel=channel)

    @property
    def has_destination(self) -> bool:
        """Whether the night publishes anywhere: a store, a conda channel or anaconda.org."""
        return bool(self.url or self.conda_channel or self.anaconda_user)


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
    # Mutual TLS with the scheduler (nightly.cluster.tls, docs/cluster.md); paths resolved.
    tls_ca_file: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    require_encryption: bool = False  # refuse any unencrypted address, loopback included
    insecure: bool = False  # allow a plain tcp:// address off loopback


@dataclass(frozen=True, kw_only=True)
class CacheConfig:
    """[cache]: the compiler cache (sccache) in front of every build's compilers
    (nightly.builds.cache.wiring)."""

    enabled: bool = False  # the section's default (defaults.toml) turns it on
    dir: Path = Path()  # the local cache folder of this machine (one subfolder per toolchain)
    size: str = "10G"  # cap of each toolchain's folder
    url: str = ""  # "s3://BUCKET/PREFIX": one cache shared by a cluster's machines instead
    endpoint_url: str = ""  # as [publish] when empty
    region: str = ""
    profile: str = ""


@dataclass(frozen=True, kw_only=True)
class ProvenanceConfig:
    """[provenance]: the key that signs each package's provenance (nightly.provenance)."""

    key: Path | None = None  # a PEM private key (Ed25519 or ECDSA P-256); None: no provenance


def image_entry(images: Mapping[str, Mapping[str, str]], build: Build) -> str:
    """The [images] entry a build runs in, as written: its package's table, then the default
    table; in each, its architecture's sub-table (`aarch64/cu126`, `aarch64/default`)
    before the plain keys."""
    arch = build.target_arch
    keys = (f"{arch}/{build.cuda}", f"{arch}/default", build.cuda, "default")
    for table in (images.get(build.package, {}), images.get("default", {})):
        for key in keys:
            if table.get(key):
                return table[key]
    return ""


def image_placeholders(build: Build) -> dict[str, str]:
    """{cuda} cu126, {cuda_version} 12.6, {cuda_digits} 126, {accelerator} cuda12.6 (as
    PyTorch tags images: cpu, cuda12.6, rocm7.2, xpu), {rocm_version} 7.2, {arch} aarch64."""
    return {
        "cuda": build.cuda,
        "cuda_version": build.cuda_version,
        "cuda_digits": build.cuda[2:] if build.is_cuda else "",
        "accelerator": axes.image_tag(build.cuda),
        "rocm_version": axes.rocm_version(build.cuda),
        "arch": build.target_arch,
    }


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
    build: BuildSettings = field(default_factory=BuildSettings)
    cache: CacheConfig = field(default_factory=CacheConfig)
    provenance: ProvenanceConfig = field(default_factory=ProvenanceConfig)
    builds: tuple[Build, ...] = field(default=())  # the matrix after the config's selectors
    # Declared builder images ([builders.NAME]); an [images] entry "@NAME" uses one.
    builders: Mapping[str, BuilderSpec] = field(default_factory=dict)
    # The retry policies ([backoff.<use>]) and the waits for outside work
    # ([external_timeouts]) of this configuration, not of the process.
    backoff: Backoffs = field(default_factory=default_backoffs)
    external_timeouts: ExternalTimeouts = field(default_factory=default_timeouts)

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

    def image_entry(self, build: Build) -> str:
        return image_entry(self.images, build)

    def image_for(self, build: Build) -> str:
        image = self.image_entry(build)
        if image and image.startswith("@") and image[1:] in self.builders:
            # A declared builder: its image for this CUDA, tagged with the spec's hash.
            try:
                return self.builders[image[1:]].tag_for(build.cuda)
            except SpecError as e:
                raise ConfigError(str(e), file=str(self.path), key=e.key, hint=e.hint) from e
        if image:
            # Placeholders let one entry cover every accelerator (docs/images.md).
            return image.format(**image_placeholders(build))
        return ""

    def builder_for(self, build: Build) -> BuilderSpec | None:
        """The declared builder whose image a container build of `build` runs in, if any."""
        image = self.image_entry(build)
        return self.builders.get(image[1:]) if image.startswith("@") else None

    def manylinux_for(self, build: Build, executor: str = "container") -> str:
        """A manywheel build's manylinux policy ("2_28", "off", "": none declared): its
        builder's when it runs in a declared image that declares one, else the matrix's.
        A libtorch build's: its matrix's only (a builder's policy is its manywheels')."""
        if build.package not in ("manywheel", "libtorch") or build.platform != "linux":
            return ""
        builder = (self.builder_for(build)
                   if executor == "container" and build.package == "manywheel" else None)
        if builder is not None and builder.manylinux:
            return builder.manylinux
        for m in self.matrices:
            if m.package == build.package and m.platform == build.platform:
                return m.manylinux
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
        one = est.for_build(build)
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
