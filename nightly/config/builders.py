"""[builders.NAME] (declared builder images) and the `@NAME` references of [images].

The spec itself (fields, validation, content hash) lives in `nightly.core.spec`; this module
turns its errors into located configuration errors and checks that every build whose image
is `@NAME` names a declared builder that has an image for the build's CUDA.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from nightly.config.reader import Ctx, Table
from nightly.config.schema import image_entry
from nightly.core.matrix import Build, PackageMatrix
from nightly.core.spec import BuilderSpec, SpecError
from nightly.core.specparse import parse_spec
from nightly.errors import did_you_mean


def parse_builders(top: Table, ctx: Ctx) -> dict[str, BuilderSpec]:
    t = top.table("builders")
    out: dict[str, BuilderSpec] = {}
    for name in t:
        v = t.get(name)
        if not isinstance(v, dict):
            ctx.fail("must be a table describing a builder image", f"builders.{name}")
        try:
            out[name] = parse_spec(name, v)
        except SpecError as e:
            ctx.fail(str(e), e.key or f"builders.{name}", hint=e.hint)
    return out


def inherit_policy(
    builders: Mapping[str, BuilderSpec], matrices: Sequence[PackageMatrix]
) -> dict[str, BuilderSpec]:
    """A builder that declares no manylinux policy (or toolchain) takes the manywheel
    matrix's (the matrix-level default), so its image gets the toolchain that policy needs."""
    matrix = next((m for m in matrices if m.package == "manywheel" and m.platform == "linux"),
                  None)
    if matrix is None:
        return dict(builders)
    return {name: dataclasses.replace(
        spec, manylinux=spec.manylinux or matrix.manylinux,
        toolchain_choice=spec.toolchain_choice or matrix.toolchain,
    ) for name, spec in builders.items()}


def check_references(
    images: Mapping[str, Mapping[str, str]],
    builders: Mapping[str, BuilderSpec],
    builds: Sequence[Build],
    ctx: Ctx,
) -> None:
    """Every `@NAME` image names a builder; every build using one has its CUDA image."""
    for package, table in images.items():
        for cuda, image in table.items():
            if image.startswith("@") and image[1:] not in builders:
                key = f"images.{package}" + ("" if cuda == "default" and package == "default"
                                             else f".{cuda.replace('/', '.')}")
                hint = did_you_mean(image[1:], builders) or (
                    f"declare it as [builders.{image[1:]}]" if not builders
                    else f"declared builders: {', '.join(builders)}")
                ctx.fail(f"'{image}' names no declared builder", key, hint=hint)
    for b in builds:
        image = image_entry(images, b)
        if b.platform == "linux" and image.startswith("@"):
            spec = builders[image[1:]]
            if b.cuda not in spec.accelerators:
                ctx.fail(
                    f"build {b.id} runs in {image}, which has no {b.cuda} image",
                    f"builders.{spec.name}.cudas",
                    hint=f"add \"{b.cuda_version}\" to builders.{spec.name}.cudas",
                )
