"""The table reader: TOML text -> nested dicts -> typed values, with errors that name the file,
the key path and the line.

`Table` records every key it is asked for, so whatever is left over when a section is done is
an unknown key, reported with the closest valid key (difflib, via `errors.did_you_mean`).
"""

from __future__ import annotations

import builtins
import difflib
import math
import os
import re
import stat
import string
import sys
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from nightly.core.matrix import SpellingError
from nightly.errors import ConfigError, did_you_mean

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_DURATION_RE = re.compile(r"^(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?$")
_HEADER_RE = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")


# A configuration is a few kilobytes; reading is bounded so that /dev/zero or a runaway file
# fails at once instead of filling memory.
MAX_CONFIG_BYTES = 4 << 20


def read_config_text(path: Path) -> str:
    """The file's text: a regular file (a FIFO would hang, /dev/zero never end), at most
    MAX_CONFIG_BYTES, UTF-8 without a byte order mark."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise ConfigError(f"cannot read the config file: it is {kind} (pass --config FILE)",
                              file=str(path))
        with path.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError as e:
        raise ConfigError(
            "config file not found: pass --config FILE, set NIGHTLY_CONFIG, or run where "
            "nightly.toml is",
            file=str(path),
        ) from e
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read the config file: {e}", file=str(path)) from e
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"the config file is larger than {MAX_CONFIG_BYTES >> 20} MiB: "
                          "not a nightly.toml", file=str(path))
    if raw.startswith(b"\xef\xbb\xbf"):
        raise ConfigError("the file starts with a byte order mark (BOM), which TOML does not "
                          "allow", file=str(path), line=1,
                          hint="save it as UTF-8 without BOM")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"cannot read the config file: {e}", file=str(path)) from e


def read_toml(path: Path) -> tuple[dict[str, object], str]:
    """The parsed file and its text (kept to find the line of a key in messages)."""
    text = read_config_text(path)
    try:
        return tomllib.loads(text), text
    except RecursionError as e:
        raise ConfigError("tables or arrays nested too deeply: not a nightly.toml",
                          file=str(path)) from e
    except tomllib.TOMLDecodeError as e:
        # TOMLDecodeError.lineno exists from Python 3.14; before, the line is in the message.
        line = getattr(e, "lineno", None)
        if line is None:
            m = re.search(r"at line (\d+)", str(e))
            line = int(m.group(1)) if m else None
        raise ConfigError(f"invalid TOML: {e}", file=str(path), line=line) from e


# nightly's defaults as data: every table a configuration may set, with its default values.
DEFAULTS_PATH = Path(__file__).resolve().parent.parent / "defaults.toml"


def read_defaults(path: Path) -> dict[str, object]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def defaults_table() -> Table:
    """defaults.toml read as a configuration's top table (errors name the file): what code
    that no configuration reaches parses its section from."""
    return Table(read_defaults(DEFAULTS_PATH), "", Ctx(str(DEFAULTS_PATH), ""))


def parse_duration(value: object) -> float:
    """Seconds from 4800, 4800.0, "4800", "80m", "1h30m", "4h23m20s"."""
    if isinstance(value, bool):
        raise ValueError("a duration, not a boolean")
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"'{value}' is not a duration: write a positive number of seconds")
        return float(value)
    if isinstance(value, str):
        s = value.strip().lower().replace(" ", "")
        if s.isascii() and s.isdigit() and int(s) > 0:
            return float(s)
        m = _DURATION_RE.match(s)
        if m and any(m.groups()):
            h, mi, se = (int(g) if g else 0 for g in m.groups())
            total = h * 3600 + mi * 60 + se
            if total > 0:
                return float(total)
    raise ValueError(f"'{value}' is not a duration: write seconds or e.g. \"15m\", \"1h30m\"")



class Ctx:
    """The file being read, for messages that name the file and the line."""

    def __init__(self, file: str, text: str) -> None:
        self.file, self.text = file, text

    def line_of(self, keypath: str) -> int | None:
        """Best effort: the line where the last key of the path is written.

        Looked for inside its own table (`machines[1].name` after the second `[[machines]]`
        header, not at the first `name =` of the file), or the table's header when the path
        names a table; failing that, the nearest enclosing key or table that is written (a
        missing key points at its table); failing that, the last key anywhere.
        """
        if not self.text or not keypath:
            return None
        lines = self.text.splitlines()
        path = keypath
        while path:
            no = self._scan(lines, path)
            if no is not None:
                return no
            path = path.rpartition(".")[0]
        last = re.sub(r"\[\d+\]", "", keypath).split(".")[-1]
        pats = [
            re.compile(rf"^\s*[\"']?{re.escape(last)}[\"']?\s*="),
            re.compile(rf"[{{,]\s*[\"']?{re.escape(last)}[\"']?\s*="),
        ]
        for pat in pats:
            for no, line in enumerate(lines, 1):
                if pat.search(line):
                    return no
        return None

    @staticmethod
    def _scan(lines: list[str], keypath: str) -> int | None:
        """The line of `keypath` read with TOML's tables in mind, or None."""
        table, _, last = keypath.rpartition(".")
        bare = re.sub(r"\[\d+\]$", "", last)
        key_re = re.compile(rf"^\s*[\"']?{re.escape(bare)}[\"']?\s*=")
        current = ""
        counts: dict[str, int] = {}
        for no, line in enumerate(lines, 1):
            h = _HEADER_RE.match(line)
            if h:
                name = re.sub(r"[\s\"']", "", h.group(2))
                if h.group(1) == "[[":
                    counts[name] = counts.get(name, -1) + 1
                    current = f"{name}[{counts[name]}]"
                else:
                    current = name
                if keypath in (current, name) or current.startswith(keypath + "."):
                    return no
            elif current == table and key_re.search(line):
                return no
        return None

    def fail(self, message: str, key: str, *, hint: str | None = None) -> Any:
        raise ConfigError(message, file=self.file, key=key, line=self.line_of(key), hint=hint)


def merge(defaults: Mapping[str, object], data: Mapping[str, object]) -> dict[str, object]:
    """`data` laid over `defaults`: tables merged key by key, anything else replaced."""
    out = dict(defaults)
    for k, v in data.items():
        d = defaults.get(k)
        if isinstance(d, dict) and isinstance(v, dict):
            out[k] = merge(d, v)
        else:
            out[k] = v
    return out


class Table:
    """A TOML table read key by key; finish() rejects what nobody asked for."""

    _MISSING = object()

    def __init__(
        self,
        data: Mapping[str, object],
        path: str,
        ctx: Ctx,
        *,
        parent: Table | None = None,
        name: str = "",
    ) -> None:
        self.data, self.path, self.ctx = data, path, ctx
        self.parent, self.name = parent, name
        self.used: set[str] = set()

    def _key(self, k: str) -> str:
        return f"{self.path}.{k}" if self.path else k

    def keys(self) -> list[str]:
        return list(self.data.keys())

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def get(self, k: str, *, required: bool = False, default: Any = _MISSING) -> Any:
        self.used.add(k)
        v = self.data.get(k, default)
        if v is self._MISSING or (required and (v is None or v == "" or v == [])):
            if required:
                self._misspelt(k)
                self.ctx.fail("is required", self._key(k))
            return None
        return v

    def _misspelt(self, k: str) -> None:
        """A required key is missing: a misspelling of it (`quues`) or of a table on its path
        (`[projcet]`) is the likelier mistake, so report that unknown key instead."""
        t: Table | None = self
        name = k
        while t is not None:
            stray = [x for x in t.data if x != name and x not in t.used]
            close = difflib.get_close_matches(name, stray, n=1, cutoff=0.6)
            if close:
                t.ctx.fail("unknown key", t._key(close[0]), hint=f"did you mean '{name}'?")
            name, t = t.name, t.parent

    def _type_fail(self, k: str, want: str, v: object) -> object:
        got = type(v).__name__
        return self.ctx.fail(f"must be {want}, not {got} ({v!r})", self._key(k))

    def str(
        self,
        k: builtins.str,
        *,
        required: builtins.bool = False,
        default: object = _MISSING,
        item: Any = None,
    ) -> builtins.str:
        v = self.get(k, required=required, default=default)
        if not isinstance(v, str):
            self._type_fail(k, "a string", v)
        if item is not None:
            try:
                v = item(v)
            except SpellingError as e:
                self.ctx.fail(str(e), self._key(k))
        return str(v)

    def int(
        self,
        k: builtins.str,
        *,
        required: builtins.bool = False,
        default: object = _MISSING,
        minimum: builtins.int | None = None,
    ) -> builtins.int:
        v = self.get(k, required=required, default=default)
        if isinstance(v, bool) or not isinstance(v, int):
            self._type_fail(k, "an integer", v)
        if minimum is not None and v < minimum:
            self.ctx.fail(f"must be at least {minimum}, not {v}", self._key(k))
        return int(v)

    def number(self, k: builtins.str, *, minimum: float | None = None) -> float:
        v = self.get(k)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            self._type_fail(k, "a finite number", v)
        if minimum is not None and v < minimum:
            self.ctx.fail(f"must be at least {minimum}, not {v}", self._key(k))
        return float(v)

    def bool(self, k: builtins.str) -> builtins.bool:
        v = self.get(k)
        if not isinstance(v, bool):
            self._type_fail(k, "true or false", v)
        return bool(v)

    def duration(self, k: builtins.str) -> float:
        v = self.get(k)
        if v is None:
            self.ctx.fail('is required: write seconds or e.g. "15m", "1h30m"', self._key(k))
        try:
            return parse_duration(v)
        except ValueError as e:
            return self.ctx.fail(str(e), self._key(k))  # type: ignore[no-any-return]

    def choice(
        self,
        k: builtins.str,
        choices: Sequence[builtins.str],
        *,
        required: builtins.bool = False,
        default: object = _MISSING,
    ) -> builtins.str:
        v = self.str(k, required=required, default=default)
        if v not in choices:
            hint = did_you_mean(v, choices)
            self.ctx.fail(
                f"'{v}' is not one of {', '.join(choices)}", self._key(k), hint=hint
            )
        return v

    def str_list(
        self,
        k: builtins.str,
        *,
        required: builtins.bool = False,
        default: object = _MISSING,
        item: Any = None,
        choices: Sequence[builtins.str] | None = None,
    ) -> list[builtins.str]:
        v = self.get(k, required=required, default=default)
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            self._type_fail(k, "an array of strings", v)
        out: list[str] = []
        for x in v:
            if choices is not None and x not in choices:
                hint = did_you_mean(x, choices)
                self.ctx.fail(
                    f"'{x}' is not one of {', '.join(choices)}", self._key(k), hint=hint
                )
            if item is not None:
                try:
                    x = item(x)
                except SpellingError as e:
                    self.ctx.fail(str(e), self._key(k))
            out.append(x)
        return out

    def str_map(
        self, k: builtins.str, *, key_check: Any = None
    ) -> dict[builtins.str, builtins.str]:
        v = self.get(k)
        if not isinstance(v, dict) or not all(isinstance(x, str) for x in v.values()):
            self._type_fail(k, "a table of strings", v)
        out: dict[str, str] = {}
        for mk, mv in v.items():
            if key_check is not None:
                try:
                    mk = key_check(mk)
                except SpellingError as e:
                    self.ctx.fail(str(e), f"{self._key(k)}.{mk}")
            out[mk] = mv
        return out

    def table(self, k: builtins.str, *, required: builtins.bool = False) -> Table:
        v = self.get(k, required=required, default={})
        if not isinstance(v, dict):
            self._type_fail(k, "a table", v)
        return Table(v, self._key(k), self.ctx, parent=self, name=k)

    def finish(self, valid: Sequence[builtins.str] | None = None) -> None:
        allowed = set(valid) if valid is not None else self.used
        for k in self.data:
            if k not in allowed:
                hint = did_you_mean(k, sorted(allowed))
                self.ctx.fail("unknown key", self._key(k), hint=hint)


def placeholders(template: str) -> list[str]:
    """The replacement fields of a str.format template (ValueError when malformed)."""
    return [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]


def check_template(image: str, ctx: Ctx, key: str) -> None:
    # Exactly these names: no attribute or index ({cuda.x} raised AttributeError here;
    # {cuda_digits[0]} passed here and raised IndexError at night for cpu builds).
    known = ("cuda", "cuda_version", "cuda_digits", "accelerator", "rocm_version", "arch")
    try:
        bad = next((f for f in placeholders(image) if f not in known), None)
        if bad is None:
            image.format(cuda="cu100", cuda_version="10.0", cuda_digits="100",
                         accelerator="cuda10.0", rocm_version="", arch="x86_64")
    except (KeyError, IndexError, ValueError, AttributeError, TypeError) as e:
        bad = str(e)
    if bad is not None:
        ctx.fail(
            f"'{image}' has an unknown placeholder {{{bad}}}",
            key,
            hint="use {cuda}, {cuda_version}, {cuda_digits}, {accelerator}, {rocm_version} "
            "or {arch}",
        )


def unique(items: list[str], ctx: Ctx, key: str) -> list[str]:
    seen: list[str] = []
    for i in items:
        if i in seen:
            ctx.fail(f"'{i}' is listed twice", key)
        seen.append(i)
    return seen


def resolve_path(value: str, base: Path) -> Path:
    p = Path(os.path.expanduser(value))
    return p if p.is_absolute() else (base / p)


def store_url(value: str, key: str, base: Path, ctx: Ctx, *, what: str, path_hint: str) -> str:
    """A store location as written in the config -> s3://… or file:///abs ("" stays "").

    A plain path is relative to the config file; other schemes and credentials in the URL
    are refused (credentials come from the profile or the standard AWS chain)."""
    if not value:
        return ""
    if "://" not in value:
        return resolve_path(value, base).resolve().as_uri()
    if not value.startswith(("s3://", "file://")):
        ctx.fail(
            f"'{value.split('://')[0]}://' {what} are not supported",
            key,
            hint=f"use s3://BUCKET/PREFIX, file:///PATH or {path_hint}",
        )
    if "@" in urllib.parse.urlsplit(value).netloc:
        section = key.split(".")[0]
        ctx.fail(f"credentials in {key} are not allowed", key,
                 hint=f"use {section}.profile or the standard AWS variables")
    return value
