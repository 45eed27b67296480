"""Unknown keys, all of them, before any value is looked at.

A misspelt table (`[matirx.linux.manywheel]`) otherwise surfaces as whatever its absence
breaks ("the matrix is empty"), which names neither the mistake nor the fix. So the user's
data (not the merge with the defaults, which would mask nothing but would hide nothing
either) is walked once against the shape of a configuration, in the order it is written,
and the first key that has no place in it is reported with the closest valid key.

The shape comes from `defaults.toml` (every key it has is valid; an empty inline table there,
like `pythons = {}`, is open: its keys are the user's) plus the sections whose keys are
names the defaults cannot list: the matrix, the machines, per-package images, timeouts and
estimates. Values are not checked here: the section parsers do that, with the same messages.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeAlias

from nightly.config.reader import Ctx
from nightly.core.matrix import (
    PACKAGES,
    PLATFORMS,
    SpellingError,
    normalize_accelerator,
    normalize_cuda,
    normalize_python,
)
from nightly.errors import did_you_mean


@dataclass(frozen=True)
class Open:
    """A table whose keys are the user's (Python versions, CUDA versions), each checked by
    `key_check` when one is given (it raises SpellingError)."""

    key_check: Callable[[str], str] | None = None


@dataclass(frozen=True)
class Tables:
    """An array of tables ([[machines]]), each of shape `item`."""

    item: Shape


# None: a value (its type is the parser's business); a dict: a table with exactly these keys.
Shape: TypeAlias = "Open | Tables | Mapping[str, Shape] | None"


def _image_key(key: str) -> str:
    """An [images.<package>] key: default, an accelerator, or an architecture's sub-table."""
    if key == "default" or key in ARCH_NAMES:
        return key
    return normalize_accelerator(key)


_PYTHON_KEYS = Open(normalize_python)
_CUDA_KEYS = Open(normalize_cuda)
_PACKAGE_KEYS = {"cudas": None, "accelerators": None, "archs": None, "pythons": None,
                 "devtoolset": None, "manylinux": None,
                 "toolchain": None}
_LIBTORCH_KEYS = {"cudas": None, "accelerators": None, "archs": None, "variants": None,
                  "python": None, "devtoolset": None, "manylinux": None}
_NAMES = ("default", *PACKAGES)
ARCH_NAMES = ("x86_64", "aarch64", "arm64")
_ESTIMATE_KEYS: dict[str, Shape] = {"cpu": None, "cuda": None, "rocm": None, "xpu": None}

# What defaults.toml cannot say: tables keyed by platform or package name.
_EXTRA: dict[str, Shape] = {
    "matrix": {
        plat: {pkg: (_LIBTORCH_KEYS if pkg == "libtorch" else _PACKAGE_KEYS) for pkg in PACKAGES}
        for plat in PLATFORMS
    },
    "machines": Tables(
        {k: None for k in ("name", "platform", "queues", "executor", "hostname",
                           "explicit_queues", "gpu", "archs", "accelerators", "executors")}
    ),
    "images": {name: Open(_image_key) for name in _NAMES},
    "timeouts": {
        **{name: None for name in _NAMES},
        **{plat: {name: None for name in _NAMES} for plat in PLATFORMS},
    },
    "estimates": {name: {**_ESTIMATE_KEYS, **{a: _ESTIMATE_KEYS for a in ARCH_NAMES}}
                  for name in _NAMES},
}

# Open tables of defaults.toml whose keys have a known spelling.
_OPEN_KEYS: dict[str, Open] = {
    "executor.local.pythons": _PYTHON_KEYS,
    "executor.local.cuda": _CUDA_KEYS,
    "executor.container.cuda_mounts": _CUDA_KEYS,
}


def shape_of(defaults: Mapping[str, object]) -> Shape:
    """The shape of a configuration, given the parsed defaults.toml."""
    shape = _from_defaults(defaults, "")
    assert isinstance(shape, dict)
    return {**shape, **_EXTRA}


def _from_defaults(value: object, path: str) -> Shape:
    if not isinstance(value, dict):
        return None
    if not value:
        return _OPEN_KEYS.get(path, Open())
    return {k: _from_defaults(v, f"{path}.{k}" if path else k) for k, v in value.items()}


def check_keys(data: Mapping[str, object], shape: Shape, ctx: Ctx, path: str = "") -> None:
    """Raise ConfigError on the first key of `data`, in written order, that `shape` has no
    place for (a value of the wrong kind, e.g. a string where a table goes, is left to the
    parsers' type checks)."""
    if isinstance(shape, Tables):
        return
    if isinstance(shape, Open):
        if shape.key_check is not None:
            for k in data:
                try:
                    shape.key_check(k)
                except SpellingError as e:
                    ctx.fail(str(e), _join(path, k))
        return
    if shape is None:
        return
    for k, v in data.items():
        key = _join(path, k)
        if k not in shape:
            ctx.fail("unknown key", key, hint=did_you_mean(k, sorted(shape)))
        sub = shape[k]
        if isinstance(v, dict):
            check_keys(v, sub, ctx, key)
        elif isinstance(sub, Tables) and isinstance(v, list):
            for i, item in enumerate(v):
                if isinstance(item, dict):
                    check_keys(item, sub.item, ctx, f"{key}[{i}]")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# Keys whose values are (lists of) URLs. Credentials never go in them: a URL is copied into
# logs, build environments (SCCACHE_ENDPOINT, PIP_INDEX_URL) and messages.
_URL_KEY = re.compile(r"(^|_)(url|urls|site|address|links)$")
_CREDENTIALS_GO = {
    "publish": "[publish] profile or the standard AWS variables",
    "cache": "[cache] profile or the standard AWS variables",
    "cluster": "[cluster] profile or the standard AWS variables",
    "publish.conda": "[publish.conda] token_env or token_file",
    "publish.pypi": "[publish.pypi] username and password_env",
    "build": "pip's own configuration (pip.conf, a netrc or a keyring), outside nightly.toml",
}


def check_url_credentials(data: Mapping[str, object], ctx: Ctx, prefix: str = "") -> None:
    """Every URL-valued setting without `user:password@`: an error naming the key and where
    credentials belong."""
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            check_url_credentials(value, ctx, f"{path}.")
            continue
        if not _URL_KEY.search(str(key)):
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and _has_userinfo(item):
                section = prefix.rstrip(".")
                where = _CREDENTIALS_GO.get(section, "the environment or a file the docs name")
                ctx.fail(f"credentials in {path} are not allowed", path,
                         hint=f"write the URL without user:password@; credentials go in {where}")


def _has_userinfo(text: str) -> bool:
    if "://" not in text:
        return False
    try:
        return "@" in urllib.parse.urlsplit(text.strip()).netloc
    except ValueError:
        return False


def check_strings(data: object, ctx: Ctx, path: str = "") -> None:
    """No NUL character in any string (no path or name can hold one)."""
    if isinstance(data, Mapping):
        for key, value in data.items():
            check_strings(value, ctx, f"{path}.{key}" if path else str(key))
    elif isinstance(data, list):
        for item in data:
            check_strings(item, ctx, path)
    elif isinstance(data, str) and "\0" in data:
        ctx.fail(f"{path} contains a NUL character", path, hint="remove it")
