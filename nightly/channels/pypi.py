"""PyPI-style uploads (release channel) with twine.

`twine_upload` runs `python -m twine upload --repository-url URL --non-interactive --verbose
...` as a child process. The credentials never go on the command line: they travel in the child's
environment as TWINE_USERNAME / TWINE_PASSWORD (twine reads them before ~/.pypirc and keyring),
in an environment otherwise minimal (PATH, HOME, locale, TLS bundles, proxies), with keyring
disabled and an empty twine config file so nothing of the user's ~/.pypirc is mixed in.
Errors carry twine's output with the password (and any `user:password@` in a URL) masked.
"""

from __future__ import annotations

import html
import importlib.util
import logging
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from nightly.channels.childenv import child_env, run_client
from nightly.config.timeouts import default_timeouts
from nightly.errors import PublishError
from nightly.files import tail
from nightly.redact import mask, safe_url

__all__ = ["safe_url", "twine_upload"]

log = logging.getLogger(__name__)

_WAREHOUSES = ("https://upload.pypi.org/", "https://test.pypi.org/")
_HTTP_ERROR = re.compile(r"HTTPError: (\d{3})\b")


def _is_pypi(url: str) -> bool:
    return url.startswith(_WAREHOUSES)


def twine_upload(
    files: Sequence[Path],
    *,
    repository_url: str,
    username: str,
    password: str,
    skip_existing: bool = True,
    timeout: float | None = None,
) -> list[str]:
    """Upload distributions (wheels, sdists) to a PyPI-style repository with twine.

    With `skip_existing`, files the repository already has are a success, so uploading twice
    is harmless. Twine's own --skip-existing is only accepted for PyPI and TestPyPI (twine
    >= 6); for any other repository each file goes in its own twine call and a refusal that
    twine's rule recognises as "already exists" (HTTP 409, or 400 saying "already exist(s)",
    as pypiserver, devpi and Artifactory-like servers answer) counts as skipped.

    Returns the names of the files skipped as already present (only known for non-PyPI
    repositories; twine does not report them for PyPI).
    """
    wait = timeout or default_timeouts().twine_upload
    paths = [Path(f) for f in files]
    for p in paths:
        if not p.is_file():
            raise PublishError(f"cannot upload {p}: no such file")
    if not paths:
        return []
    if importlib.util.find_spec("twine") is None:
        raise PublishError("twine is not installed (pip install 'nightly-builds[pypi]')")
    if not skip_existing or _is_pypi(repository_url):
        _twine(paths, repository_url, username, password, skip_existing, wait)
        return []
    skipped = []
    for p in paths:
        try:
            _twine([p], repository_url, username, password, False, wait)
        except _AlreadyExists:
            log.info("%s is already in %s; skipped", p.name, safe_url(repository_url))
            skipped.append(p.name)
    return skipped


class _AlreadyExists(PublishError):
    pass


def _twine(
    paths: list[Path], repository_url: str, username: str, password: str, skip_existing: bool, timeout: float
) -> None:
    names = ", ".join(p.name for p in paths)
    what = f"twine upload of {names} to {safe_url(repository_url)}"
    with tempfile.TemporaryDirectory(prefix="nightly-twine-") as tmp:
        config = Path(tmp) / "pypirc"
        config.write_text("", encoding="utf-8")
        cmd = [
            sys.executable,
            "-m",
            "twine",
            "upload",
            "--non-interactive",
            "--disable-progress-bar",
            "--verbose",
            "--config-file",
            str(config),
            "--repository-url",
            repository_url,
        ]
        if skip_existing:
            cmd.append("--skip-existing")
        cmd += ["--", *(str(p.resolve()) for p in paths)]
        env = child_env()
        env.update(
            {
                "TWINE_USERNAME": username,
                "TWINE_PASSWORD": password,
                "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring",
                "NO_COLOR": "1",
                "TERM": "dumb",
            }
        )
        exit_status, out = run_client(
            cmd, env=env, cwd=Path(tmp), timeout=timeout, what=what,
            clean=lambda text: _clean(text, password, repository_url),
        )
    if exit_status == 0:
        return
    status = _HTTP_ERROR.search(out)
    code = int(status.group(1)) if status else None
    if code == 409 or (code == 400 and "already exist" in " ".join(out.lower().split())):
        raise _AlreadyExists(f"{what}: the repository already has this file (HTTP {code})")
    raise PublishError(f"{what}: twine exited with status {exit_status}{tail(_summary(out))}")


_CRASH = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception)\b.*$", re.M)


def _summary(out: str) -> str:
    """twine's --verbose output made short: its error lines, then what the server said.
    When twine itself crashed (an index that refuses connections), what it printed before
    and the exception it died of: its stack is twine's business, not the user's."""
    if _CRASH in out:
        before = out.split(_CRASH, 1)[0].strip()
        died_of = _EXCEPTION_LINE.findall(out)
        return "\n".join(x for x in (before, died_of[-1] if died_of else "twine crashed") if x)
    lines = out.splitlines()
    first_error = next((i for i, line in enumerate(lines) if line.startswith("ERROR")), None)
    if first_error is None:
        return out
    errors = "\n".join(lines[first_error:]).strip()
    start = next((i for i, line in enumerate(lines) if "Response from" in line), None)
    if start is None:
        return errors
    body = "\n".join(lines[start + 1 : first_error])
    body = html.unescape(re.sub(r"<(style|head)\b.*?</\1>|<[^>]+>", " ", body, flags=re.S | re.I))
    body = " ".join(body.replace("INFO", " ").split())
    if len(body) > 600:
        body = body[:600] + "..."
    return f"{errors}\nserver said: {body}" if body else errors


def _clean(text: str, password: str, url: str) -> str:
    text = text.replace(url, safe_url(url))
    text = "\n".join(line.rstrip() for line in text.splitlines())  # rich pads lines with blanks
    return mask(safe_url(text), password)


