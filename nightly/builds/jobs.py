"""A build as a job for an executor: the recipe environment (docs/recipes.md), where the build's
output and scratch folders are, its timeout and image; and the context a night's builds share
(config, day, state, source, version, channel).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nightly.builds.reproducible import reproducible_env
from nightly.config import Config
from nightly.config.detect import resolve_version_from
from nightly.executors.base import Job
from nightly.manylinux import ENV_POLICY, OFF, glibc_of, plat
from nightly.plan.matrix import Build, python_number
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
    # Aliases for recipes written for the old scripts.
    env["PYTORCH_BUILD_VERSION"] = version
    env["PYTORCH_BUILD_NUMBER"] = env["BUILD_NUMBER"]
    env["OVERRIDE_PACKAGE_VERSION"] = version
    env.update(build_env(config))
    return env


def wheelhouse_env(ctx: RunContext) -> dict[str, str]:
    """NIGHTLY_WHEELHOUSE: the night's wheelhouse on this host (executors that run builds
    elsewhere map it: the container executor mounts it read-only)."""
    if not ctx.config.build.wheelhouse:
        return {}
    return {"NIGHTLY_WHEELHOUSE": str(ctx.day.path / "wheelhouse")}


def build_env(config: Config) -> dict[str, str]:
    """How recipes build Python packages ([project] version_from, [build]): NIGHTLY_* for
    the recipes, PIP_* for pip's PEP 517 front end (unset: the host's pip configuration)."""
    b = config.build
    env = {
        "NIGHTLY_VERSION_FROM": config.project.version_from,
        "NIGHTLY_BUILD_ISOLATION": "1" if b.isolation else "0",
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
    for source in spec.pythons if spec is not None else ():
        if source.version == number:
            return {"PYTHON": f"{source.dest}/bin/python"}
    return {}


def manylinux_env(config: Config, build: Build, executor: str) -> dict[str, str]:
    """A manywheel build's policy for the recipe (NIGHTLY_MANYLINUX, AUDITWHEEL_PLAT) and,
    on the host, the glibc-targeting toolchain that meets it (an image has its own)."""
    policy = config.manylinux_for(build, executor)
    if not policy:
        return {}
    env = {ENV_POLICY: policy}
    if policy != OFF:
        from nightly.builds.policy import ENV_TOOLCHAIN, toolchain_choice

        env["AUDITWHEEL_PLAT"] = plat(policy)
        env[ENV_TOOLCHAIN] = toolchain_choice(config, build, executor)  # recorded in state
        if executor == "local":
            from nightly.images import engine, sysroot, zig

            cache = engine.default_cache()
            if sysroot.host_glibc() <= glibc_of(policy):
                return env  # this machine's glibc is old enough
            # zig where chosen, except for CUDA builds: nvcc needs the sysroot's gcc.
            if host_toolchain(config) == "zig" and not build.is_cuda:
                env.update(zig.host_env(glibc_of(policy), cache))
            else:
                env.update(sysroot.host_env(glibc_of(policy), cache))
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
    from nightly.images import sysroot, zig

    def log(line: str) -> None:
        out(f"[nightly] {line}\n".encode())

    try:
        if zig.ENV_CACHE in job.env:
            zig.ensure(job.env, log)
        elif sysroot.ENV_CACHE in job.env:
            sysroot.ensure(job.env, log)
        else:
            return None
    except (sysroot.ToolchainError, zig.ZigError) as e:
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
    if (build.is_cuda and build.package in LOCAL_VERSION_PACKAGES and version_from != "keep"
            and "+" not in version):
        return f"{version}+{build.cuda}"
    return version


def version_env(ctx: RunContext, build: Build) -> dict[str, str]:
    """NIGHTLY_VERSION_FROM as the build uses it ("auto" resolved from the night's source),
    NIGHTLY_VERSION_REASON, which the recipe logs, and the package's version."""
    choice = resolve_version_from(ctx.config.project.version_from, ctx.source_dir)
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


def make_job(ctx: RunContext, build: Build, *, executor: str) -> Job:
    work = ctx.day.work / build.id
    return Job(
        build_id=build.id,
        package=build.package,
        python=build.python,
        cuda=build.cuda,
        env=recipe_env(
            ctx.config, build, version=ctx.version, date=ctx.day.date, channel=ctx.channel
        ) | wheelhouse_env(ctx) | version_env(ctx, build)
        | manylinux_env(ctx.config, build, executor) | reproducible_env(ctx.source_dir)
        | interpreter_env(ctx.config, build, executor),
        recipes_dir=ctx.config.recipes,
        source_dir=ctx.source_dir,
        output_dir=work / "out",
        work_dir=work / "scratch",
        timeout_s=ctx.config.timeout_for(build),
        image=ctx.config.image_for(build) if executor == "container" else None,
        memory_limit=ctx.config.container.memory_limit or None,
    )


__all__ = [
    "RunContext", "build_env", "interpreter_env", "make_job", "manylinux_env", "package_version",
    "prepare_toolchain", "recipe_env", "version_env", "wheelhouse_env",
]
