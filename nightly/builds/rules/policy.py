"""What a build was built under (its manylinux policy and C/C++ toolchain), and whether a
succeeded build of the day still meets the configuration: a policy or toolchain changed
since it was built makes the next run rebuild it (and say so) instead of keeping wheels
that break the declared policy. state.json's `manylinux` record carries both."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from nightly.config import Config
from nightly.core.manylinux import OFF
from nightly.core.matrix import Build
from nightly.format import say_err
from nightly.workspace import SUCCEEDED, State

ENV_TOOLCHAIN = "NIGHTLY_MANYLINUX_TOOLCHAIN"  # what compiles the build, for the state record
# The toolchains nightly provides (the configuration chooses one) and the compilers that need
# none: a declared builder image's own (its suite's glibc meets the policy: bullseye's gcc
# and gfortran for 2_31), or this machine's (its glibc is old enough).
SYSROOT, ZIG, IMAGE, HOST = "sysroot", "zig", "image", "host"


def toolchain_choice(config: Config, build: Build, executor: str) -> str:
    """What compiles a manywheel (or libtorch) build under a policy: "image" in a declared
    builder image whose own compilers meet it (the image has no wrappers then), else the
    configured "zig" or "sysroot" (CUDA and libtorch builds always the sysroot: nvcc's host
    compiler). A host build on a machine whose glibc meets the policy records "host"
    (nightly.builds.run.jobs.manylinux_env): that depends on the machine, not on this."""
    builder = config.builder_for(build) if executor == "container" else None
    if builder is not None and builder.toolchain_for(build.cuda) == "system":
        return IMAGE
    chosen = builder.toolchain_choice if builder is not None else ""
    chosen = chosen or next((m.toolchain for m in config.matrices
                             if m.package == "manywheel" and m.platform == "linux"
                             and m.toolchain), SYSROOT)
    return SYSROOT if build.is_cuda or build.package == "libtorch" else chosen


def built_under(config: Config, build: Build, executor: str) -> tuple[str, str]:
    """(policy, toolchain) a build of `build` is made under now ("" where none applies)."""
    policy = config.manylinux_for(build, executor)
    if not policy or policy == OFF:
        return policy, ""
    return policy, toolchain_choice(config, build, executor)


def stale_builds(config: Config, state: State, builds: Sequence[Build],
                 executor: str | Callable[[Build], str],
                 log: Callable[[str], None] | None = None) -> dict[str, str]:
    """Succeeded manywheel builds of the day made under another policy or toolchain than
    the configuration's now: build id -> why they are rebuilt (each said on stderr and in
    `log` when given). `executor`: the night's, or each build's (a cluster's
    `executor_for`)."""
    out: dict[str, str] = {}
    for b in builds:
        if b.package != "manywheel" or state.status(b.id) != SUCCEEDED:
            continue
        record = state.get(b.id).manylinux
        if record is None:
            continue  # nothing recorded (an older nightly): nothing to compare with
        policy, toolchain = built_under(
            config, b, (executor(b) if callable(executor) else executor) or "local")
        was_policy, was_toolchain = record.policy, record.toolchain
        if policy != was_policy:
            out[b.id] = (f"built under manylinux policy {was_policy or 'none'}, the configuration "
                         f"now declares {policy or 'none'}")
        elif toolchain and was_toolchain not in ("", HOST) and toolchain != was_toolchain:
            # (a host build whose machine met the policy used no toolchain of the choice)
            out[b.id] = f"built with toolchain {was_toolchain}, the configuration now chooses {toolchain}"
    for bid, why in sorted(out.items()):
        if log is not None:
            say_err(f"rebuilding {bid}: {why}")  # `why` quotes state.json
            log(f"rebuilding {bid}: {why}")
    return out


__all__ = ["ENV_TOOLCHAIN", "HOST", "IMAGE", "SYSROOT", "ZIG", "built_under", "stale_builds",
           "toolchain_choice"]
