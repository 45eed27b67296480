"""Conda publishing to anaconda.org (or any anaconda-server) through anaconda-client.

`anaconda_upload` runs `anaconda [-s SITE] upload --user USER --label LABEL --force --no-progress
PATH` as a child process (the legacy anaconda-client CLI, `python -m binstar_client.scripts.cli`,
forced with ANACONDA_CLIENT_FORCE_STANDALONE so the anaconda-cli-base plugin front end, its
telemetry and its login flows stay out of the way). The token never goes on the command line:
it is passed in the environment variable BINSTAR_API_TOKEN, which binstar_client reads first
(`binstar_client.utils.config.get_server_api`: `--token`, then BINSTAR_API_TOKEN, then
ANACONDA_API_TOKEN, then stored login tokens). The child's environment is otherwise minimal
(PATH, HOME, locale, TLS bundles, proxies). Its output is masked for the token before it goes
into any message.

`-s SITE` of anaconda-client takes a *site alias* from its config file, not a URL. Here `site`
may be either: an `http(s)://` URL is written into a private config directory
(BINSTAR_CONFIG_DIR) as a site alias that the command then selects; anything else is passed as
an alias of the user's own anaconda-client configuration.

The calls an upload makes (anaconda-client 1.16): `HEAD /`, `GET /user/<owner>`,
`GET /dist/<owner>/<pkg>/<ver>/<subdir>/<file>` (and `DELETE` of it with --force),
`GET|POST /package/<owner>/<pkg>`, `GET|POST /release/<owner>/<pkg>/<ver>`,
`POST /stage/<owner>/<pkg>/<ver>/<subdir>/<file>` (answers with a storage `post_url`), a
multipart POST of the file to that URL (without the token), then
`POST /commit/<owner>/<pkg>/<ver>/<subdir>/<file>`.

Promotion (`anaconda_copy`) is a server-side copy: `anaconda copy OWNER/PKG/VER/BASENAME
--from-label A --to-label B [--to-owner O] --update`, which calls `GET /channels/<owner>` and
`PATCH /copy/package/<owner>/<pkg>/<ver>/<basename>` with `{"from_channel", "to_channel",
"to_owner"}`. The server copies its own bytes, so exactly the tested file is promoted, and
`--update` leaves files already at the destination alone, so promoting twice is harmless.
(Re-uploading the local file with `anaconda_upload(..., label="main")` is the other way.)
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from nightly.channels.childenv import child_env, run_client
from nightly.config.timeouts import default_timeouts
from nightly.errors import PublishError
from nightly.files import tail
from nightly.redact import mask, safe_url

TOKEN_ENV = "BINSTAR_API_TOKEN"
_SITE_ALIAS = "nightly-publish-site"
# -- tokens ----------------------------------------------------------------------------------------


def read_token(env_name: str, token_file: str) -> str:
    """The token from the environment variable `env_name`, else from `token_file`.

    Either may be empty (not configured). The error names where it looked, never a value.
    """
    if env_name:
        value = os.environ.get(env_name, "").strip()
        if value:
            return value
    looked = [f"environment variable {env_name} (unset or empty)"] if env_name else []
    if token_file:
        path = Path(token_file).expanduser()
        try:
            value = path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            looked.append(f"token file {path} (does not exist)")
        except OSError as e:
            looked.append(f"token file {path} (unreadable: {e.strerror or type(e).__name__})")
        else:
            if value:
                return value
            looked.append(f"token file {path} (empty)")
    if not looked:
        raise PublishError("no token configured: set a token environment variable or a token file")
    raise PublishError("no token found; looked in " + " and ".join(looked))


# -- anaconda-client -------------------------------------------------------------------------------


def _anaconda_command() -> list[str]:
    if importlib.util.find_spec("binstar_client") is not None:
        return [sys.executable, "-m", "binstar_client.scripts.cli"]
    exe = shutil.which("anaconda")
    if exe is None:
        raise PublishError(
            "anaconda-client is not installed (pip install 'nightly-builds[conda]')"
        )
    return [exe]


def _child_env(token: str, config_dir: Path) -> dict[str, str]:
    env = child_env()
    env.update(
        {
            TOKEN_ENV: token,
            "BINSTAR_CONFIG_DIR": str(config_dir),
            "ANACONDA_CLIENT_FORCE_STANDALONE": "1",
            "ANACONDA_TELEMETRY_ENABLED": "false",
            "OTEL_SDK_DISABLED": "true",
        }
    )
    return env


def _site_args(site: str | None, config_dir: Path) -> list[str]:
    if not site:
        return []
    if site.startswith(("http://", "https://")):
        data = config_dir / "data"  # binstar_client's EnvAppDirs: user_config_dir = <dir>/data
        data.mkdir(parents=True, exist_ok=True)
        # JSON is YAML: no need to import a YAML writer for two keys.
        config = {"sites": {_SITE_ALIAS: {"url": site.rstrip("/")}}, "auto_register": True}
        (data / "config.yaml").write_text(json.dumps(config), encoding="utf-8")
        return ["-s", _SITE_ALIAS]
    return ["-s", site]


def _run_anaconda(args: Sequence[str], *, site: str | None, token: str, timeout: float, what: str) -> str:
    """Run one anaconda-client command; its combined output (token masked), or PublishError."""
    if not token:
        raise PublishError(f"{what}: no anaconda token")
    with tempfile.TemporaryDirectory(prefix="nightly-anaconda-") as tmp:
        config_dir = Path(tmp)
        cmd = [*_anaconda_command(), *_site_args(site, config_dir), *args]
        code, out = run_client(
            cmd, env=_child_env(token, config_dir), cwd=config_dir, timeout=timeout,
            what=what, clean=lambda text: safe_url(mask(text, token)),
        )
    if code != 0:
        raise PublishError(f"{what}: anaconda-client exited with status {code}{tail(out)}")
    return out


def anaconda_upload(
    path: Path,
    *,
    user: str,
    label: str,
    site: str | None,
    token: str,
    force: bool = True,
    timeout: float | None = None,
) -> None:
    """Upload one conda package to `user`'s `label` with anaconda-client.

    `force` replaces a file of the same name already there (anaconda-client `--force`);
    without it an existing file is skipped (`--skip`). The token travels in the child's
    environment only; errors carry the tool's output with the token masked.
    """
    path = Path(path)
    if not path.is_file():
        raise PublishError(f"cannot upload {path}: no such file")
    where = f"{user}/{label}" + (f" at {safe_url(site)}" if site else "")
    args = ["upload", "--user", user, "--label", label, "--no-progress"]
    args += ["--force" if force else "--skip", str(path.resolve())]
    _run_anaconda(
        args, site=site, token=token,
        timeout=timeout or default_timeouts().anaconda_upload,
        what=f"anaconda upload of {path.name} to {where}",
    )


def anaconda_copy(
    owner: str,
    package: str,
    version: str,
    basename: str | None = None,
    *,
    from_label: str,
    to_label: str,
    to_owner: str | None = None,
    site: str | None,
    token: str,
    replace: bool = False,
    timeout: float | None = None,
) -> str:
    """Promote on the server: copy `owner/package/version[/basename]` from one label (and owner)
    to another with `anaconda copy`. Returns the tool's output (token masked).

    `basename` is the file's name on the server, `<subdir>/<file>` for conda packages (see
    `channel_key`); without it every file of the version is copied. Files already at the
    destination are left alone (`--update`), or overwritten with `replace=True` (`--replace`).
    """
    spec = "/".join(x for x in (owner, package, version, basename) if x)
    args = ["copy", spec, "--from-label", from_label, "--to-label", to_label]
    if to_owner:
        args += ["--to-owner", to_owner]
    args.append("--replace" if replace else "--update")
    dest = f"{to_owner or owner}/{to_label}" + (f" at {safe_url(site)}" if site else "")
    return _run_anaconda(
        args, site=site, token=token,
        timeout=timeout or default_timeouts().anaconda_copy, what=f"anaconda copy of {spec} to {dest}"
    )
