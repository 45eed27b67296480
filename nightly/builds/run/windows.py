"""Windows builds: the recipe contract (docs/recipes.md, "Windows recipes") and the check
that keeps them off machines that cannot run them.

A Windows build (`[matrix.windows.wheel]`, `[matrix.windows.libtorch]`) is planned and routed
like any other, to a `platform = "windows"` machine only. Its recipe is a Python script,
`<recipes>/<package>/build_windows.py` (Python, not PowerShell: every Windows builder has the
interpreters the wheels are for, and one language keeps the quoting rules of cmd, PowerShell
and MSBuild out of nightly), run by nightly's own interpreter with the environment
`windows_env` returns. It must leave in OUTPUT_DIR:

- wheel: the project's `*-cpXY-cpXY-win_amd64.whl` (`cp314t` for 3.14t) at PACKAGE_VERSION;
- libtorch: the zip named NIGHTLY_LIBTORCH_ZIP, `libtorch-win-<variant>-<PACKAGE_VERSION>.zip`
  (the name PyTorch publishes, beside its `libtorch-win-<variant>-latest.zip` alias, which the
  generator's install line names).

Windows recipes need a Windows host: this Linux and macOS tool refuses to run one, in one
line (exit 2), before anything of the night is created.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Sequence

from nightly.builds.run.jobs import package_version, recipe_env
from nightly.config import Config
from nightly.core.axes import libtorch_zip as pytorch_zip
from nightly.core.matrix import Build
from nightly.errors import UsageError

RECIPE = "build_windows.py"
# PyTorch's Windows builds are release builds (its build names end in `-release`).
LIBTORCH_CONFIG = "release"
WHEEL_PLATFORMS = {"x86_64": "win_amd64", "arm64": "win_arm64"}


def libtorch_zip(build: Build, version: str) -> str:
    """`libtorch-win-shared-with-deps-2.15.0.dev20260108+cu126.zip`; version `latest` gives
    the alias PyTorch's install line names."""
    return pytorch_zip(variant=build.variant, platform=build.platform, arch=build.target_arch,
                       version=version)


def wheel_platform(build: Build) -> str:
    """The platform tag a Windows wheel carries: win_amd64."""
    return WHEEL_PLATFORMS[build.target_arch]


def windows_env(config: Config, build: Build, *, version: str, date: dt.date,
                channel: str) -> dict[str, str]:
    """What a Windows recipe receives besides SOURCE_DIR, OUTPUT_DIR and WORK_DIR (the
    folders, as on Linux): the recipe environment of every build, the package's version,
    and the Windows names it must deliver."""
    if build.platform != "windows":
        raise ValueError(f"{build.id} is not a Windows build")
    pkg_version = package_version(build, version, config.project.version_from)
    env = recipe_env(config, build, version=version, date=date, channel=channel)
    env |= {
        "PACKAGE_VERSION": pkg_version,
        "NIGHTLY_PLATFORM": "windows",
        "NIGHTLY_RECIPE": f"{build.package}/{RECIPE}",
    }
    if build.package == "libtorch":
        env |= {"NIGHTLY_LIBTORCH_ZIP": libtorch_zip(build, pkg_version),
                "NIGHTLY_LIBTORCH_CONFIG": LIBTORCH_CONFIG}
    else:
        env |= {"NIGHTLY_WHEEL_PLATFORM": wheel_platform(build)}
    return env


def refuse_here(builds: Sequence[Build], host: str = sys.platform) -> None:
    """Windows builds run only on a Windows machine: on any other host, one line (exit 2)
    naming the build and where to run it."""
    found = [b for b in builds if b.platform == "windows"]
    if not found or host == "win32":
        return
    more = f" (and {len(found) - 1} more Windows builds)" if len(found) > 1 else ""
    raise UsageError(
        f"{found[0].id} ({found[0].label}) is a Windows build{more}: it runs only on a "
        f"platform = \"windows\" machine, with the recipe {found[0].package}/{RECIPE}; this "
        f"host is {host}, so build it on the Windows machine (docs/recipes.md, "
        "\"Windows recipes\")"
    )


__all__ = ["LIBTORCH_CONFIG", "RECIPE", "libtorch_zip", "refuse_here", "wheel_platform",
           "windows_env"]
