"""[[machines]], [images] and [executor.*]: where and in what builds run."""

from __future__ import annotations

import nightly.core.axes as axes
from nightly.config.reader import Ctx, Table, check_template, unique
from nightly.config.schema import EXECUTORS, ContainerConfig, LocalSettings, Machine
from nightly.core.matrix import (
    PACKAGES,
    PLATFORMS,
    SpellingError,
    normalize_accelerator,
    normalize_arch,
    normalize_cuda,
    normalize_python,
)


def parse_machines(top: Table, ctx: Ctx) -> list[Machine]:
    # A new machine key must also be listed in keys._EXTRA (defaults.toml has no machines).
    raw = top.get("machines", required=True)
    if not isinstance(raw, list) or not raw:
        ctx.fail("machines must be a non-empty array of tables ([[machines]])", "machines")
    machines: list[Machine] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        key = f"machines[{i}]"
        if not isinstance(item, dict):
            ctx.fail("each machine must be a table ([[machines]])", key)
        t = Table(item, key, ctx)
        name = t.str("name", required=True)
        if name in seen:
            ctx.fail(f"duplicate machine name '{name}'", f"{key}.name", hint="names must be unique")
        seen.add(name)
        platform = t.choice("platform", PLATFORMS, required=True)
        queues = t.int("queues", required=True)
        if queues < 1:
            ctx.fail(
                f"machine '{name}' has {queues} queues", f"{key}.queues", hint="at least 1"
            )
        executor = t.choice("executor", EXECUTORS, default="local")
        if platform == "windows" and executor != "local":
            ctx.fail(f"machine '{name}' is a Windows machine with executor = \"{executor}\"",
                     f"{key}.executor", hint='Windows builds run on the host: executor = "local"')
        hostname = t.str("hostname", default="")
        gpu = t.bool("gpu") if t.get("gpu", default=None) is not None else False
        archs = tuple(unique(t.str_list("archs", default=[],
                                        item=lambda a, p=platform: normalize_arch(a, p)),
                             ctx, f"{key}.archs"))
        accelerators = tuple(unique(t.str_list("accelerators", default=[], item=_accelerator),
                                    ctx, f"{key}.accelerators"))
        arch_executors = _arch_executors(t, platform, archs, ctx, key)
        explicit_raw = t.get("explicit_queues", default=[])
        if not isinstance(explicit_raw, list) or not all(
            isinstance(q, list) and all(isinstance(s, str) for s in q) for q in explicit_raw
        ):
            ctx.fail(
                "explicit_queues must be an array of arrays of strings",
                f"{key}.explicit_queues",
            )
        if len(explicit_raw) > queues:
            ctx.fail(
                f"machine '{name}' lists {len(explicit_raw)} explicit queues but has {queues}",
                f"{key}.explicit_queues",
                hint=f"set queues = {len(explicit_raw)}",
            )
        t.finish()
        machines.append(
            Machine(
                name=name,
                platform=platform,
                queues=queues,
                executor=executor,
                hostname=hostname,
                explicit_queues=tuple(tuple(q) for q in explicit_raw),
                gpu=gpu,
                archs=archs,
                accelerators=accelerators,
                arch_executors=arch_executors,
            )
        )
    return machines


def _arch_executors(t: Table, platform: str, archs: tuple[str, ...], ctx: Ctx,
                    key: str) -> tuple[tuple[str, str], ...]:
    """`executors = { aarch64 = "local" }`: the executor of the builds for an architecture
    where it is not the machine's (the architecture must be one the machine declares)."""
    if t.get("executors", default=None) is None:
        return ()
    table = t.str_map("executors", key_check=lambda a: normalize_arch(a, platform))
    declared = archs or (axes.default_arch(platform),)
    for arch, executor in table.items():
        if arch not in declared:
            ctx.fail(f"executors names {arch}, which the machine does not build",
                     f"{key}.executors.{arch}",
                     hint=f"add \"{arch}\" to its archs, or remove it here")
        if executor not in EXECUTORS:
            ctx.fail(f"'{executor}' is not one of {', '.join(EXECUTORS)}",
                     f"{key}.executors.{arch}")
    return tuple(sorted(table.items()))


def _accelerator(text: str) -> str:
    """A machine's accelerator: a family (cpu, cuda, rocm, xpu) or an exact spelling."""
    s = str(text).strip().lower()
    return s if s in axes.FAMILIES else normalize_accelerator(text)


def parse_images(top: Table, ctx: Ctx) -> dict[str, dict[str, str]]:
    t = top.table("images")
    out: dict[str, dict[str, str]] = {"default": {}}
    for k in t:
        v = t.get(k)
        if not isinstance(v, (str, dict)):
            ctx.fail(
                f"images.{k} must be an image name or a table of CUDA version -> image, "
                f"not {type(v).__name__} ({v!r})",
                f"images.{k}",
            )
        if isinstance(v, str):
            if k != "default":
                ctx.fail(
                    f"images.{k} must be a table of CUDA version -> image",
                    f"images.{k}",
                    hint="only images.default may be a plain string",
                )
            check_template(v, ctx, "images.default")
            out["default"]["default"] = v
            continue
        if k not in (*PACKAGES, "default"):
            continue  # reported by finish()
        out[k] = _image_table(t.table(k), f"images.{k}", ctx, out.get(k, {}))
    t.finish(valid=(*PACKAGES, "default"))
    return out


def _image_table(sub: Table, key: str, ctx: Ctx, table: dict[str, str]) -> dict[str, str]:
    """accelerator -> image; a sub-table per architecture ([images.manywheel.aarch64]) is
    kept as `aarch64/<accelerator>` keys (Config.image_entry)."""
    for acc in sub:
        if acc in axes.ARCHS["linux"] + axes.ARCHS["macos"] and isinstance(sub.get(acc), dict):
            inner = sub.table(acc)
            for k, v in _image_table(inner, f"{key}.{acc}", ctx, {}).items():
                table[f"{acc}/{k}"] = v
            continue
        image = sub.str(acc)
        check_template(image, ctx, f"{key}.{acc}")
        if acc != "default":
            try:
                acc = normalize_accelerator(acc)
            except SpellingError as e:
                ctx.fail(str(e), f"{key}.{acc}")
        table[acc] = image
    sub.finish()
    return table


def parse_executors(top: Table) -> tuple[LocalSettings, ContainerConfig]:
    ex = top.table("executor")
    lo = ex.table("local")
    local = LocalSettings(
        pythons=lo.str_map("pythons", key_check=normalize_python),
        cuda=lo.str_map("cuda", key_check=normalize_cuda),
        user=lo.str("user"),
        build_dir=lo.str("build_dir"),
    )
    lo.finish()
    co = ex.table("container")
    container = ContainerConfig(
        base_url=co.str("base_url"),
        memory_limit=co.str("memory_limit"),
        user=co.str("user"),
        cuda_mounts=co.str_map("cuda_mounts", key_check=normalize_cuda),
        gpu=co.bool("gpu"),
        pull=co.bool("pull"),
    )
    co.finish()
    ex.finish()
    return local, container
