"""The error hierarchy: one class per exit code, caught in one place (cli.main).

Expected failures raise a NightlyError subclass whose message says what was wrong and what
to do next; the CLI prints the message (no traceback unless --debug) and exits with the
class's code.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class NightlyError(Exception):
    """Base of every expected error. Exit code 1 unless a subclass says otherwise."""

    exit_code = 1


class BuildsFailed(NightlyError):
    """Some builds or uploads failed; the rest went on. `reported`: the command has already
    shown what failed (the night's summary, the upload's counts), so cli.main adds nothing."""

    exit_code = 1

    def __init__(self, message: str, *, reported: bool = False) -> None:
        super().__init__(message)
        self.reported = reported


class NotVerified(NightlyError):
    """A package whose provenance does not verify (`nightly verify`, `nightly promote`)."""

    exit_code = 1

    def __init__(self, message: str, *, reported: bool = False) -> None:
        super().__init__(message)
        self.reported = reported


class UsageError(NightlyError):
    """Bad command-line input."""

    exit_code = 2


class ConfigError(NightlyError):
    """Bad configuration: names the file, the key path, the line when known, and a hint."""

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        key: str | None = None,
        line: int | None = None,
        hint: str | None = None,
    ) -> None:
        self.file, self.key, self.line, self.hint = file, key, line, hint
        where = file or "<config>"
        if line is not None:
            where += f":{line}"
        parts = [where]
        if key:
            parts.append(f"[{key}]")
        text = " ".join(parts) + f": {message}"
        if hint:
            text += f" ({hint})"
        super().__init__(text)


class StateError(NightlyError):
    """A state.json that cannot be used: unreadable, not JSON, or not of its schema."""

    exit_code = 2


class NothingSelected(NightlyError):
    """The selection is empty."""

    exit_code = 3


class LockHeld(NightlyError):
    """Another run holds this day's lock."""

    exit_code = 4


class ExecutorError(NightlyError):
    """The executor could not run a build (engine unreachable, image missing, ...)."""

    exit_code = 1


class PublishError(NightlyError):
    """An upload or index step failed; packages stay in place for `nightly upload`."""

    exit_code = 1


class UnsafeEntry(PublishError):
    """A folder store (staging, a file:// mirror) holds a symlink, or something that is not a
    regular file or folder, where it keeps objects: other hosts can write there, so nightly
    never follows or reads it."""


class ObjectTooLarge(PublishError):
    """An object is larger than the size it was expected to have (what its writer reported,
    or a documented limit): it is not read past that size. `size`: what it holds (at least)."""

    def __init__(self, message: str, *, size: int = 0) -> None:
        super().__init__(message)
        self.size = size


def did_you_mean(word: str, choices: Iterable[str], *, quote: bool = True) -> str | None:
    """'did you mean X?' for the closest choice, or None when nothing is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    if not close:
        return None
    return f"did you mean '{close[0]}'?" if quote else f"did you mean {close[0]}?"


# The distribution nightly is installed as (`pip install nightly-builds`; the command and the
# import package stay `nightly`), and the extra that brings each optional library.
DISTRIBUTION = "nightly-builds"
EXTRA_OF_MODULE = {
    "docker": "container", "boto3": "s3", "botocore": "s3", "s3transfer": "s3",
    "rattler": "conda", "rattler_build": "conda", "binstar_client": "conda", "twine": "pypi",
    "dask": "cluster", "distributed": "cluster", "cryptography": "cluster",
    "securesystemslib": "provenance", "diffoscope": "repro", "auditwheel": "manylinux",
}


class MissingExtra(UsageError):
    """An optional library a command needs is not installed: one line naming the extra."""

    def __init__(self, module: str, extra: str, what: str = "") -> None:
        needs = f"{what} needs" if what else "this needs"
        extras = list(dict.fromkeys(extra.split(",")))
        named = " and ".join(f"'{e}'" for e in extras) + (" extras" if len(extras) > 1 else " extra")
        missing = module.replace(",", ", ")
        super().__init__(f"{needs} the {named} ({missing} {'are' if ',' in module else 'is'} not "
                         f"installed): pip install '{DISTRIBUTION}[{','.join(extras)}]'")
        self.module, self.extra = module, extra


def missing_extra(e: ImportError, what: str = "") -> MissingExtra | None:
    """The MissingExtra for an import of an optional library that failed, else None."""
    name = (getattr(e, "name", None) or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(name)
    return MissingExtra(name, extra, what) if extra else None


def require(*modules: str, what: str = "") -> None:
    """Raise MissingExtra now, in the command's own thread, when any of `modules` (optional
    libraries of EXTRA_OF_MODULE) is not installed, naming every extra missing: before a
    night's work starts rather than as each build's failure."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtra(",".join(missing), ",".join(EXTRA_OF_MODULE[m] for m in missing), what)
