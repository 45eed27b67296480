"""[project], the root and recipes paths, [matrix] and [selectors]: what is built."""

from __future__ import annotations

import re
from pathlib import Path

from nightly.config.reader import Ctx, Table, resolve_path, unique
from nightly.config.recipes import installed_recipes
from nightly.config.schema import BuildSettings, Machine, Project
from nightly.core.axes import AxisError
from nightly.core.limited import collapse, normalize_limited_api
from nightly.core.manylinux import parse_policy
from nightly.core.matrix import (
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
    normalize_accelerator,
    normalize_arch,
    normalize_python,
    select,
)
from nightly.core.spec import SpecError
from nightly.core.specparse import parse_toolchain


def parse_project(top: Table, ctx: Ctx) -> Project:
    proj = top.table("project")
    project = Project(
        name=proj.str("name", required=True),
        source=proj.str("source", required=True),
        branch=proj.str("branch"),
        ref=proj.str("ref"),
        base_version=proj.str("base_version", required=True),
        build_number=proj.int("build_number", minimum=0),
        version_from=proj.choice("version_from", VERSION_FROM),
        extra_names=tuple(proj.str_list("extra_names")),
        limited_api=proj.str("limited_api", item=_limited_api),
    )
    proj.finish()
    if not re.match(r"^\d+(\.\d+)*$", project.base_version):
        ctx.fail(
            f"'{project.base_version}' is not a base version: write digits and dots, e.g. 1.0.0",
            "project.base_version",
        )
    return project


def _limited_api(text: str) -> str:
    try:
        return normalize_limited_api(text)
    except AxisError as e:
        raise SpellingError(str(e)) from e


VERSION_FROM = ("auto", "env", "setuptools-scm", "rewrite", "keep")


def parse_build(top: Table, ctx: Ctx) -> BuildSettings:
    bu = top.table("build")
    settings = BuildSettings(
        isolation=bu.bool("isolation"),
        index_url=bu.str("index_url"),
        extra_index_urls=tuple(bu.str_list("extra_index_urls")),
        find_links=tuple(bu.str_list("find_links")),
        wheelhouse=bu.bool("wheelhouse"),
        check_reproducible=bu.choice("check_reproducible", ("none", "sample", "all")),
        reuse_env=bu.bool("reuse_env"),
        installer=bu.choice("installer", ("auto", "pip")),
    )
    bu.finish()
    if settings.wheelhouse and not settings.isolation:
        # Without isolation builds use the interpreter's own packages: a wheelhouse of
        # build requirements would never be read.
        ctx.fail(
            "wheelhouse = true needs isolated builds (isolation = false builds with the "
            "image's own packages)",
            "build.wheelhouse",
            hint="set [build] isolation = true, or wheelhouse = false",
        )
    return settings


def parse_paths(top: Table, base: Path, root_override: str | None) -> tuple[Path, Path]:
    """The root of the day folders and the recipes folder, relative to the config file."""
    root = Path(root_override).resolve() if root_override else resolve_path(top.str("root"), base)
    if root_override:
        top.str("root")
    recipes_s = top.str("recipes")
    if recipes_s:
        recipes = resolve_path(recipes_s, base)
    else:
        # Empty: a `recipes/` beside the config that holds recipes (<package>/build.sh), a
        # project's own; else the recipes installed with nightly.
        beside = base / "recipes"
        own = any((beside / p / "build.sh").is_file() for p in PACKAGES)
        recipes = beside if own else installed_recipes()
    return root, recipes


def parse_selectors(top: Table) -> tuple[tuple[str, ...], tuple[str, ...]]:
    sel = top.table("selectors")
    include = tuple(sel.str_list("include"))
    exclude = tuple(sel.str_list("exclude"))
    sel.finish()
    return include, exclude


def parse_matrix(top: Table, ctx: Ctx) -> list[PackageMatrix]:
    # A new matrix key must also be listed in keys._EXTRA (defaults.toml has no matrix).
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
            cudas = _accelerators(t, key, ctx)
            archs = tuple(unique(t.str_list("archs", default=[],
                                            item=lambda a, p=plat: normalize_arch(a, p)),
                                 ctx, f"{key}.archs"))
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
                _one_zip_per_name(variants, f"{key}.variants", ctx)
                out.append(
                    PackageMatrix(
                        package=pkg,
                        platform=plat,
                        pythons=(),
                        cudas=cudas,
                        variants=variants,
                        python=python,
                        devtoolset=devtoolset,
                        manylinux=_manylinux(t, pkg, key, ctx),
                        archs=archs,
                    )
                )
            else:
                pythons = tuple(
                    unique(t.str_list("pythons", required=True, item=normalize_python), ctx, key)
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
                        manylinux=_manylinux(t, pkg, key, ctx),
                        toolchain=_toolchain(t, pkg, key, ctx),
                        archs=archs,
                    )
                )
            t.finish()
        pt.finish(valid=PACKAGES)
    mx.finish(valid=PLATFORMS)
    if not out:
        ctx.fail("the matrix is empty: add e.g. [matrix.linux.manywheel]", "matrix")
    return out


def _accelerators(t: Table, key: str, ctx: Ctx) -> tuple[str, ...]:
    """`accelerators` (cpu, cuXYZ, rocmX.Y, xpu), or `cudas` as configs wrote it before."""
    if t.get("accelerators", default=None) is not None:
        if t.get("cudas", default=None) is not None:
            ctx.fail("cudas and accelerators say the same: keep one", f"{key}.cudas",
                     hint="accelerators takes cpu, CUDA, ROCm and XPU spellings")
        name = "accelerators"
    else:
        name = "cudas"
    items = t.str_list(name, required=True, item=normalize_accelerator)
    return tuple(unique(items, ctx, key))


def _manylinux(t: Table, pkg: str, key: str, ctx: Ctx) -> str:
    """[matrix.linux.manywheel] manylinux: the policy of builds whose builder declares none;
    [matrix.linux.libtorch] manylinux: the glibc policy its zips are built and checked under."""
    text = t.str("manylinux", default="")
    if text and pkg not in ("manywheel", "libtorch"):
        ctx.fail("manylinux applies to manywheel and libtorch builds only", f"{key}.manylinux")
    try:
        return parse_policy(text)
    except ValueError as e:
        ctx.fail(str(e), f"{key}.manylinux")
        return ""  # not reached: fail raises


def _toolchain(t: Table, pkg: str, key: str, ctx: Ctx) -> str:
    """[matrix.linux.manywheel] toolchain: how builds meet the policy (host builds, and
    builders that choose none)."""
    text = t.str("toolchain", default="")
    if text and pkg != "manywheel":
        ctx.fail("toolchain applies to manywheel builds only", f"{key}.toolchain")
    try:
        return parse_toolchain(text, f"{key}.toolchain")
    except SpecError as e:
        ctx.fail(str(e), e.key, hint=e.hint)
        return ""  # not reached: fail raises


def _python_or_default(s: str) -> str:
    return s if s == "3" else normalize_python(s)


def select_builds(
    matrices: list[PackageMatrix],
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    machines: list[Machine],
    ctx: Ctx,
    limited_api: str = "",
) -> list[Build]:
    """The matrix after the selectors, a limited-API project's wheel builds made one per
    floor (nightly.core.limited); every selector must match and every platform built must
    have a machine."""
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
    builds = collapse(builds, limited_api)
    check_routes(builds, machines, ctx)
    return builds


def check_routes(builds: list[Build], machines: list[Machine], ctx: Ctx) -> None:
    """Every build has a machine that can build it (its platform, architecture and
    accelerator), or the config is refused naming the build and the machines considered."""
    platforms_needed = sorted({b.platform for b in builds})
    have = {m.platform for m in machines}
    for plat in platforms_needed:
        if plat not in have:
            ctx.fail(
                f"the matrix has {plat} builds but no machine has platform '{plat}'",
                "machines",
                hint=f"add a [[machines]] entry with platform = \"{plat}\" or remove matrix.{plat}",
            )
    routes: dict[tuple[str, str, str], bool] = {}
    for b in builds:
        route = (b.platform, b.target_arch, b.cuda)
        if route not in routes:
            routes[route] = any(m.can_build(b) for m in machines)
        if not routes[route]:
            considered = [m.describe() for m in machines if m.platform == b.platform]
            ctx.fail(
                f"no machine can build {b.id} ({b.platform} {b.target_arch}, {b.cuda}); "
                f"considered: {'; '.join(considered)}",
                "machines",
                hint=f"add \"{b.target_arch}\" to a {b.platform} machine's archs and "
                f"\"{b.family}\" to its accelerators, or exclude the build in [selectors]",
            )


def _one_zip_per_name(variants: tuple[str, ...], key: str, ctx: Ctx) -> None:
    """Two libtorch builds never write one file name (one name, one set of bytes): `all`
    writes every variant's zip, so it cannot stand beside a variant."""
    if LIBTORCH_ALL in variants and len(variants) > 1:
        other = next(v for v in variants if v != LIBTORCH_ALL)
        ctx.fail(f'"all" writes every variant\'s zip, so "all" and "{other}" would write one '
                 f"file name (libtorch-{other}-<version>.zip) from two builds",
                 key, hint='list either "all" or the variants')
