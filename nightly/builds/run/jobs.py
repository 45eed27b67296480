"""A build as a job for an executor: the recipe environment (docs/recipes.md), where the build's
output and scratch folders are, its timeout and image; and the context a night's builds share
(config, day, state, source, version, channel).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nightly.builds.area.userarea import BuildArea
from nightly.builds.repro.reproducible import reproducible_env
from nightly.config import Config
from nightly.config.detect import PyProjectError, VersionChoice, resolve_version_from
from nightly.core.axes import manylinux_interpreter
from nightly.core.manylinux import OFF, glibc_of, plat, platform_env
from nightly.core.matrix import Build, python_number
from nightly.executors.base import Job
from nightly.workspace import Day, State


def recipe_env(
    config: Config, build: Build, *, version: str, date: dt.date, channel: str
) -> dict[str, str]:
    """The recipe environment (docs/recipes.md), minus the path variables each executor adds."""
    env = {
        "PACKAGE_TYPE": build.package,
        "DESIRED_PYTHON": build.python,
        "DESIRED_CUDA": build.cuda,
        "CUDA_VERSION": build.cuda_version,
        "LIBTORCH_VARIANT": build.variant,
        "BUILD_VERSION": version,
        "BUILD_NUMBER": str(config.project.build_number),
        "CHANNEL": channel,
        "NIGHTLY_DATE": f"{date:%Y_%m_%d}",
        "PROJECT_NAME": config.project.name,
    }
    if build.devtoolset:
        env["DEVTOOLSET"] = build.devtoolset
    env.update(axis_env(build))
    # Aliases for recipes written for the old scripts.
    env["PYTORCH_BUILD_VERSION"] = version
    env["PYTORCH_BUILD_NUMBER"] = env["BUILD_NUMBER"]
    env["OVERRIDE_PACKAGE_VERSION"] = version
    env.update(build_env(config))
    return env


def axis_env(build: Build) -> dict[str, str]:
    """The 2026 axes for the recipe (docs/recipes.md): the accelerator family and version,
    the target architecture, the Python ABI and PyTorch's name for the build."""
    env = {
        "ACCELERATOR": build.family,  # cpu, cuda, rocm, xpu
        "DESIRED_ACCELERATOR": build.accelerator,  # = DESIRED_CUDA: cpu, cu130, rocm7.2, xpu
        "GPU_ARCH_TYPE": build.family,
        "ROCM_VERSION": build.cuda[4:] if build.family == "rocm" else "",
        "TARGET_ARCH": build.target_arch,
        "NIGHTLY_ARCH": build.target_arch,
        "NIGHTLY_LABEL": build.label,
        "NIGHTLY_LOCAL_SUFFIX": build.local_suffix,
    }
    if build.python_abi:
        env["NIGHTLY_PYTHON_ABI"] = build.python_abi  # cp314t
        env["NIGHTLY_FREE_THREADED"] = "1" if build.python_abi.endswith("t") else "0"
    if build.limited_api:  # one cp3X-abi3 wheel, tested on each of build.tests_on
        env["NIGHTLY_LIMITED_API"] = build.limited_api
    return env


def wheelhouse_env(ctx: RunContext) -> dict[str, str]:
    """NIGHTLY_WHEELHOUSE: the night's wheelhouse on this host (executors that run builds
    elsewhere map it: the container executor mounts it read-only)."""
    if not ctx.config.build.wheelhouse:
        return {}
    if ctx.area is not None:  # the build user's copy
        return {"NIGHTLY_WHEELHOUSE": str(ctx.area.wheelhouse)}
    return {"NIGHTLY_WHEELHOUSE": str(ctx.day.path / "wheelhouse")}


def build_env(config: Config) -> dict[str, str]:
    """How recipes build Python packages ([project] version_from, [build]): NIGHTLY_* for
    the recipes, PIP_* for pip's PEP 517 front end (unset: the host's pip configuration)."""
    b = config.build
    env = {
        "NIGHTLY_VERSION_FROM": config.project.version_from,
        "NIGHTLY_BUILD_ISOLATION": "1" if b.isolation else "0",
        "NIGHTLY_INSTALLER": b.installer,  # uv where found, or pip (recipes/common/envkey.py)
    }
    if b.index_url:
        env["PIP_INDEX_URL"] = b.index_url
    if b.extra_index_urls:
        env["PIP_EXTRA_INDEX_URL"] = " ".join(b.extra_index_urls)
    if b.find_links:
        env["PIP_FIND_LINKS"] = " ".join(b.find_links)
    return env


def interpreter_env(config: Config, build: Build, executor: str) -> dict[str, str]:
    """PYTHON, decided by nightly where nightly knows it: in a builder image nightly made
    from a declared spec, each interpreter is at /opt/python/cpXY-cpXY. (The local executor
    finds the host's when the build starts; in an image nightly did not make, the recipe
    looks for one itself.)"""
    if executor != "container" or not build.python:
        return {}
    spec = config.builder_for(build)
    number = python_number(build.python) if build.python != "3" else ""
    free_threaded = build.python_abi.endswith("t")
    for source in spec.pythons if spec is not None else ():
        # The interpreter of the build's ABI: a declared image's 3.14 is no 3.14t.
        if source.version == number and not free_threaded:
            return {"PYTHON": f"{source.dest}/bin/python"}
    if spec is not None and free_threaded:
        # Declared images have no free-threaded interpreter of their own (Debian ships none):
        # the manylinux layout's, if the site put one there.
        return {"PYTHON": manylinux_interpreter(build.python)}
    return {}


def manylinux_env(config: Config, build: Build, executor: str,
                  toolchains: Path | None = None) -> dict[str, str]:
    """A manywheel or libtorch build's policy for the recipe (NIGHTLY_MANYLINUX,
    AUDITWHEEL_PLAT) and, on the host, the glibc-targeting toolchain that meets it (an image
    has its own), from `toolchains` (default: nightly's images cache; a build user's: its
    build area). libtorch builds always get the sysroot's gcc: CMake projects of any kind
    build with it, and its g++ links libstdc++ statically."""
    policy = config.manylinux_for(build, executor)
    env = platform_env(policy, build.target_arch)
    if policy and policy != OFF:
        from nightly.builds.rules.policy import ENV_TOOLCHAIN, toolchain_choice

        env[ENV_TOOLCHAIN] = toolchain_choice(config, build, executor)  # recorded in state
    if policy and policy != OFF and executor == "local":
        from nightly.images import engine, sysroot, zig

        cache = toolchains or engine.default_cache()
        if sysroot.host_glibc() <= glibc_of(policy):
            from nightly.builds.rules.policy import HOST

            env[ENV_TOOLCHAIN] = HOST  # this machine's glibc is old enough: its own compilers
            return env
        # zig where chosen, except for CUDA builds: nvcc needs the sysroot's gcc.
        if host_toolchain(config) == "zig" and not build.is_cuda and build.package == "manywheel":
            env.update(zig.host_env(glibc_of(policy), cache))
        else:
            env.update(sysroot.host_env(glibc_of(policy), cache))
    return env


def cross_env(config: Config, build: Build, executor: str, arch: str) -> dict[str, str]:
    """A host build of a manywheel for another architecture than this machine's (`arch`: the
    build's, e.g. "aarch64"): nightly's cross environment (nightly.images.cross: the target's
    Python, zig for it, NIGHTLY_ARCH and a smoke test under qemu-user), laid over what
    manylinux_env gives (its toolchain and AUDITWHEEL_PLAT are this machine's). Empty for this
    machine's architecture, other package types and container builds (an image builds for its
    own architecture: such a build is routed to a machine of it)."""
    import platform

    if executor != "local" or build.package != "manywheel" or arch in ("", platform.machine()):
        return {}
    from nightly.images import cross, engine

    policy = config.manylinux_for(build, executor)
    glibc = glibc_of(policy) if policy not in ("", OFF) else (2, 17)
    env = cross.host_env(arch, python_number(build.python), glibc, engine.default_cache())
    if policy not in ("", OFF):
        env["AUDITWHEEL_PLAT"] = plat(policy, arch)
    return env


def host_toolchain(config: Config) -> str:
    """[matrix.linux.manywheel] toolchain: "sysroot" (the default) or "zig"."""
    return next((m.toolchain for m in config.matrices
                 if m.package == "manywheel" and m.platform == "linux" and m.toolchain),
                "sysroot")


def prepare_toolchain(job: Job, out: Callable[[bytes], None]) -> str | None:
    """Assemble the glibc-targeting toolchain a host build's environment names (once per
    cache; here rather than in make_job, so a dry run or a preflight downloads nothing).
    Returns why it could not be made, or None."""
    from nightly.images import cross, sysroot, zig

    def log(line: str) -> None:
        out(f"[nightly] {line}\n".encode())

    try:
        if cross.ENV_CACHE in job.env:  # a cross build (cross.host_env): zig + target root
            cross.ensure(job.env, log)
        elif zig.ENV_CACHE in job.env:
            zig.ensure(job.env, log)
        elif sysroot.ENV_CACHE in job.env:
            sysroot.ensure(job.env, log)
        else:
            return None
    except (sysroot.ToolchainError, zig.ZigError, cross.CrossError) as e:
        out(f"[nightly] {e}\n".encode())
        return f"toolchain: {e}"
    out(f"[nightly] toolchain {job.env['NIGHTLY_TOOLCHAIN']}: CC={job.env['CC']}\n".encode())
    return None


LOCAL_VERSION_PACKAGES = ("manywheel", "wheel", "libtorch")


def package_version(build: Build, version: str, version_from: str) -> str:
    """The version a package of this build carries (PACKAGE_VERSION), decided here once for
    the recipes and the smoke test: CUDA wheels and libtorch zips get `+<cuda>` (1.0.dev20261124
    +cu130); conda versions have no local part; a project that keeps its own version, or a
    version that already has a local part, is left as it is."""
    if (build.local_suffix and build.package in LOCAL_VERSION_PACKAGES
            and version_from != "keep" and "+" not in version):
        return f"{version}{build.local_suffix}"
    return version


def version_env(ctx: RunContext, build: Build) -> dict[str, str]:
    """NIGHTLY_VERSION_FROM as the build uses it ("auto" resolved from the night's source),
    NIGHTLY_VERSION_REASON, which the recipe logs, and the package's version."""
    try:
        choice = resolve_version_from(ctx.config.project.version_from, ctx.source_dir)
    except PyProjectError as e:  # the build is failed with this line before its recipe runs
        choice = VersionChoice("keep", str(e))
    return {"NIGHTLY_VERSION_FROM": choice.strategy, "NIGHTLY_VERSION_REASON": choice.reason,
            "PACKAGE_VERSION": package_version(build, ctx.version, choice.strategy)}


@dataclass(frozen=True, kw_only=True)
class RunContext:
    config: Config
    day: Day
    state: State
    source_dir: Path
    version: str
    channel: str = "nightly"
    machine: str = ""
    repro_builds: frozenset[str] = frozenset()  # built twice and compared (repro_check)
    # A build user's build area (builds/userarea.py): builds run and read their inputs there.
    area: BuildArea | None = None
    # The nightlies root's (or build area's) stable build folder this night holds
    # (builds/slot.py): builds and their source at the same paths every night.
    slot: Path | None = None


def day_work(ctx: RunContext) -> Path:
    """Where the night's builds have their folders outside a slot: the day's (or the build
    area's day's) work folder."""
    return ctx.area.work if ctx.area else ctx.day.work


def make_job(ctx: RunContext, build: Build, *, executor: str) -> Job:
    area = ctx.area
    work = (ctx.slot / "work" if ctx.slot else day_work(ctx)) / build.id
    source = ctx.slot / "source" if ctx.slot else area.source if area else ctx.source_dir
    return Job(
        build_id=build.id,
        package=build.package,
        python=build.python,
        cuda=build.cuda,
        env=recipe_env(
            ctx.config, build, version=ctx.version, date=ctx.day.date, channel=ctx.channel
        ) | wheelhouse_env(ctx) | version_env(ctx, build)
        | manylinux_env(ctx.config, build, executor, area.images if area else None)
        | cross_env(ctx.config, build, executor, build.target_arch)
        | reproducible_env(ctx.source_dir, timeouts=ctx.config.external_timeouts)
        | interpreter_env(ctx.config, build, executor)
        | (area.env(build.id) if area else {}),
        recipes_dir=area.recipes if area else ctx.config.recipes,
        source_dir=source,
        output_dir=work / "out",
        work_dir=work / "scratch",
        timeout_s=ctx.config.timeout_for(build),
        image=ctx.config.image_for(build) if executor == "container" else None,
        memory_limit=ctx.config.container.memory_limit or None,
        area=area.root if area else None,
    )


__all__ = [
    "RunContext", "axis_env", "build_env", "cross_env", "day_work", "interpreter_env", "make_job",
    "manylinux_env",
    "package_version",
    "prepare_toolchain", "recipe_env", "version_env", "wheelhouse_env",
]
