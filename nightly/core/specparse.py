"""A builder spec read from its `[builders.NAME]` table: every key checked, with a one-line
error naming the key and the fix (SpecError). The spec itself and its hashes are
`nightly.core.spec`; config's builders and project tables call `parse_spec` and
`parse_toolchain`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from nightly.core.manylinux import parse_policy
from nightly.core.matrix import SpellingError, cuda_version, normalize_cuda
from nightly.core.spec import (
    DEBIAN_TOOLS,
    PYTHON_SOURCES,
    TOOLCHAINS,
    BuilderSpec,
    PythonSource,
    SpecError,
)
from nightly.core.suites import (
    DEBIAN_NVCC,
    DEBIAN_ROCM,
    ROCM_TARGETS,
    SUITE_GLIBC,
    SUITE_OTHER_PYTHONS,
    SUITE_PYTHON,
)

_PACKAGE_RE = re.compile(r"^[a-z0-9][a-z0-9.+-]*$")
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")

SPEC_KEYS = ("repository", "suite", "mirror", "packages", "compilers", "pythons", "tools", "cudas",
             "manylinux", "base_image", "runtime_image", "toolchain", "rocms", "rocm_targets")


def parse_spec(name: str, table: Mapping[str, object]) -> BuilderSpec:
    """A BuilderSpec from the `[builders.NAME]` table (already a plain mapping)."""
    key = f"builders.{name}"
    if not _NAME_RE.match(name):
        raise SpecError(f"builder name '{name}' must be lower-case letters, digits, . _ -", key=key)
    unknown = sorted(set(table) - set(SPEC_KEYS))
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], SPEC_KEYS, n=1)
        raise SpecError(
            f"unknown key '{unknown[0]}' in {key}",
            key=f"{key}.{unknown[0]}",
            hint=f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(SPEC_KEYS)}",
        )
    repository = _str(table, "repository", key) or f"nightly-{name}"
    if not _NAME_RE.match(repository):
        raise SpecError(f"repository '{repository}' is not an image name", key=f"{key}.repository")
    suite = _str(table, "suite", key) or "bookworm"
    if suite not in SUITE_GLIBC:
        raise SpecError(
            f"suite '{suite}' is not a Debian suite nightly knows",
            key=f"{key}.suite", hint=f"use one of {', '.join(SUITE_GLIBC)}",
        )
    packages = _debs(table, "packages", key)
    compilers = _debs(table, "compilers", key)
    tools = tuple(_strs(table, "tools", key))
    for tool in tools:
        if tool not in DEBIAN_TOOLS:
            _check_requirement(tool, f"{key}.tools")
    cudas = _cudas(table, key)
    pythons = _pythons(table.get("pythons", {}), f"{key}.pythons")
    try:
        manylinux = parse_policy(_str(table, "manylinux", key))
    except ValueError as e:
        raise SpecError(str(e), key=f"{key}.manylinux") from e
    base_image = _image_ref(table, "base_image", key, "quay.io/pypa/manylinux_2_28_x86_64")
    runtime_image = _image_ref(table, "runtime_image", key, "python:3.12-slim-bookworm")
    spec = BuilderSpec(
        name=name, repository=repository, suite=suite, mirror=_str(table, "mirror", key),
        packages=packages, compilers=compilers, pythons=pythons, tools=tools, cudas=cudas,
        manylinux=manylinux, base_image=base_image, runtime_image=runtime_image,
        toolchain_choice=parse_toolchain(_str(table, "toolchain", key), f"{key}.toolchain"),
        rocms=_rocms(table, key, suite),
        rocm_targets=tuple(_strs(table, "rocm_targets", key)) or ROCM_TARGETS,
    )
    _check_cudas(spec, key)
    for target in spec.rocm_targets:
        if not re.match(r"^gfx[0-9a-f]{2,4}$", target):
            raise SpecError(f"'{target}' in {key}.rocm_targets is not an AMD GPU target",
                            key=f"{key}.rocm_targets", hint='write e.g. "gfx90a", "gfx1100"')
    for p in pythons:
        packaged = (SUITE_PYTHON[suite], *SUITE_OTHER_PYTHONS.get(suite, ()))
        if p.kind == "distro" and p.version not in packaged:
            raise SpecError(
                f"{key}.pythons.\"{p.version}\" = distro, but {suite}'s python3 is "
                f"{packaged[0]}" + (f" (and it packages {', '.join(packaged[1:])})"
                                    if packaged[1:] else ""), key=f"{key}.pythons",
                hint="copy an interpreter in with host:/PATH or archive:/PATH instead (Python "
                "3.14 and 3.15 are packaged by sid: suite = \"sid\")",
            )
    return spec


def _rocms(table: Mapping[str, Any], key: str, suite: str) -> tuple[str, ...]:
    """`rocms = ["5.7"]`: releases Debian packages, each in the builder's suite."""
    out = tuple(dict.fromkeys(r.removeprefix("rocm") for r in _strs(table, "rocms", key)))
    for rocm in out:
        where = DEBIAN_ROCM.get(rocm)
        if where is None:
            raise SpecError(
                f"ROCm {rocm} cannot be had on these machines: Debian packages HIP "
                f"{', '.join(f'{v} ({s})' for v, s in DEBIAN_ROCM.items())}", key=f"{key}.rocms",
                hint="use a site's ROCm image as a literal [images] entry for other releases")
        if where != suite:
            raise SpecError(f"ROCm {rocm} is Debian {where}'s: the builder's suite is {suite}",
                            key=f"{key}.suite", hint=f'set suite = "{where}"')
    return out


def parse_toolchain(text: str, key: str) -> str:
    """`toolchain = "sysroot" | "zig"` ("" when not given)."""
    if text and text not in TOOLCHAINS:
        raise SpecError(
            f"toolchain '{text}' is not one nightly has", key=key,
            hint='write "sysroot" (gcc with a glibc 2.31 sysroot) or "zig" (zig cc, glibc 2.17)',
        )
    return text


def _str(table: Mapping[str, object], k: str, key: str) -> str:
    v = table.get(k, "")
    if not isinstance(v, str):
        raise SpecError(f"{key}.{k} must be a string, got {type(v).__name__}", key=f"{key}.{k}")
    return v.strip()


def _image_ref(table: Mapping[str, object], k: str, key: str, example: str) -> str:
    ref = _str(table, k, key)
    if ref and (" " in ref or ref.startswith("@")):
        raise SpecError(f"{k} '{ref}' is not an image reference", key=f"{key}.{k}",
                        hint=f'write e.g. "{example}"')
    return ref


def _strs(table: Mapping[str, object], k: str, key: str) -> list[str]:
    v = table.get(k, [])
    if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
        raise SpecError(f"{key}.{k} must be a list of non-empty strings", key=f"{key}.{k}")
    return [x.strip() for x in v]


def _debs(table: Mapping[str, object], k: str, key: str) -> tuple[str, ...]:
    names = _strs(table, k, key)
    for n in names:
        if not _PACKAGE_RE.match(n):
            raise SpecError(f"'{n}' in {key}.{k} is not a Debian package name", key=f"{key}.{k}")
    return tuple(names)




def _check_requirement(text: str, key: str) -> None:
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        Requirement(text)
    except InvalidRequirement as e:
        raise SpecError(
            f"tool '{text}' is neither a Debian tool ({', '.join(sorted(DEBIAN_TOOLS))}) "
            f"nor a pip requirement: {e}", key=key,
        ) from e


def _cudas(table: Mapping[str, object], key: str) -> tuple[str, ...]:
    out: list[str] = []
    for text in _strs(table, "cudas", key) or ["cpu"]:
        try:
            cuda = normalize_cuda(text)
        except SpellingError as e:
            raise SpecError(str(e), key=f"{key}.cudas") from e
        if cuda not in out:
            out.append(cuda)
    return tuple(out)


def _check_cudas(spec: BuilderSpec, key: str) -> None:
    for cuda in spec.cudas:
        if cuda == "cpu":
            continue
        version = cuda_version(cuda)
        major = int(version.split(".")[0])
        if major < 13 and version not in DEBIAN_NVCC:
            raise SpecError(
                f"CUDA {version} cannot be assembled on these machines: PyPI's CUDA "
                f"{major} wheels carry no nvcc, and Debian packages nvcc only for "
                f"{', '.join(DEBIAN_NVCC)}",
                key=f"{key}.cudas",
                hint="use 11.8, 12.4 or 13.x, or mount a site toolkit with "
                "[executor.container] cuda_mounts",
            )
        gcc = spec.host_gcc_for(cuda)
        if gcc and f"g++-{gcc}" not in spec.compilers:
            raise SpecError(
                f"CUDA {version} needs gcc {gcc} as nvcc's host compiler",
                key=f"{key}.compilers", hint=f"add \"gcc-{gcc}\" and \"g++-{gcc}\" to compilers",
            )


def _pythons(value: object, key: str) -> tuple[PythonSource, ...]:
    if not isinstance(value, Mapping):
        raise SpecError(f"{key} must be a table of X.Y = source", key=key)
    out = []
    for version, source in value.items():
        if not re.match(r"^3\.[0-9]{1,2}$", str(version)):
            raise SpecError(f"'{version}' in {key} is not a Python X.Y version", key=key)
        if not isinstance(source, str):
            raise SpecError(f"{key}.\"{version}\" must be a string", key=key)
        kind, _, path = source.partition(":")
        kind, path = kind.strip(), path.strip()
        if kind not in PYTHON_SOURCES:
            raise SpecError(
                f"{key}.\"{version}\" = '{source}': unknown source '{kind}'",
                key=key, hint="write host:/PATH (a folder copied in), archive:/PATH.tar.gz "
                "(an install_only archive) or distro (the suite's own python3)",
            )
        if kind in ("host", "archive") and not path.startswith("/"):
            raise SpecError(
                f"{key}.\"{version}\" = '{source}': {kind} needs an absolute path", key=key
            )
        if kind == "distro" and path:
            raise SpecError(f"{key}.\"{version}\": distro takes no path", key=key)
        out.append(PythonSource(version=str(version), kind=kind, path=path))
    return tuple(sorted(out, key=lambda p: tuple(int(x) for x in p.version.split("."))))

