"""Conda publishing: anaconda.org (or any anaconda-server) through anaconda-client, and a
self-hosted channel folder indexed with py-rattler.

anaconda-client
---------------
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

Self-hosted channel
-------------------
`publish_to_channel` copies packages into `<channel>/<subdir>/` (the subdir read from the
package's own `info/index.json`), atomically (temporary file + rename), skipping files already
there with the same sha256, and re-indexes the touched subdirs with `rattler.index.index_fs`, so
`repodata.json` is current after every call. Publishers on one host are serialised with an
`fcntl` lock on `<channel>/.nightly-channel.lock`.

`publish_to_store_channel` does the same for a channel kept in a nightly `Store` (S3 or a
`file://` mirror) without downloading the channel: packages go up with `Store.ensure`, and
each subdir's `repodata.json` is merged with the new entries (made by indexing the new files
locally with py-rattler) and written back with a conditional write (If-Match/If-None-Match),
retried on conflict, which is what makes concurrent publishers safe there.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Coroutine, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from nightly.errors import PublishError
from nightly.publish.childenv import child_env

if TYPE_CHECKING:
    from nightly.publish.store import Store

T = TypeVar("T")

TOKEN_ENV = "BINSTAR_API_TOKEN"
CONDA_SUFFIXES = (".conda", ".tar.bz2")
LOCK_NAME = ".nightly-channel.lock"
_SITE_ALIAS = "nightly-publish-site"
_OUTPUT_TAIL = 4000



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


_USERINFO = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://)[^/@\s]+@")


def safe_url(url: str) -> str:
    """`url` (or any text) with every `scheme://user:password@` reduced to `scheme://***@`."""
    return _USERINFO.sub(r"\1***@", url)


def mask(text: str, *secrets: str) -> str:
    """`text` with every occurrence of each secret (also URL-quoted) replaced by `***`."""
    for secret in secrets:
        if not secret:
            continue
        for form in {secret, quote(secret, safe=""), quote(secret)}:
            text = text.replace(form, "***")
    return text


# -- anaconda-client -------------------------------------------------------------------------------


def _anaconda_command() -> list[str]:
    if importlib.util.find_spec("binstar_client") is not None:
        return [sys.executable, "-m", "binstar_client.scripts.cli"]
    exe = shutil.which("anaconda")
    if exe is None:
        raise PublishError(
            "anaconda-client is not installed (pip install anaconda-client, or install nightly[conda])"
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
        try:
            proc = subprocess.run(
                cmd,
                env=_child_env(token, config_dir),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=tmp,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            out = safe_url(mask(_decode(e.output), token))
            raise PublishError(f"{what}: timed out after {timeout:g}s{_tail(out)}") from None
        except OSError as e:
            raise PublishError(f"{what}: could not run anaconda-client: {e}") from None
    out = safe_url(mask(_decode(proc.stdout), token))
    if proc.returncode != 0:
        raise PublishError(f"{what}: anaconda-client exited with status {proc.returncode}{_tail(out)}")
    return out


def _decode(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode("utf-8", "replace")


def _tail(out: str) -> str:
    out = out.strip()
    if not out:
        return ""
    if len(out) > _OUTPUT_TAIL:
        out = "..." + out[-_OUTPUT_TAIL:]
    return ":\n" + out


def anaconda_upload(
    path: Path,
    *,
    user: str,
    label: str,
    site: str | None,
    token: str,
    force: bool = True,
    timeout: float = 1800,
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
        args, site=site, token=token, timeout=timeout, what=f"anaconda upload of {path.name} to {where}"
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
    timeout: float = 600,
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
        args, site=site, token=token, timeout=timeout, what=f"anaconda copy of {spec} to {dest}"
    )


# -- package metadata ------------------------------------------------------------------------------


def _check_conda_name(path: Path) -> None:
    if not path.name.endswith(CONDA_SUFFIXES):
        raise PublishError(f"{path}: not a conda package (expected .conda or .tar.bz2)")


def package_subdir(path: Path) -> str:
    """The subdir (linux-64, noarch, ...) recorded in the package's own info/index.json."""
    path = Path(path)
    _check_conda_name(path)
    from rattler import IndexJson

    try:
        index = IndexJson.from_package_archive(path)
    except Exception as e:  # rattler raises its own exception types
        raise PublishError(f"{path}: cannot read info/index.json: {e}") from None
    subdir = index.subdir
    if not subdir:
        subdir = "noarch" if index.noarch else None
    if not subdir or "/" in subdir or subdir.startswith("."):
        raise PublishError(f"{path}: no usable subdir in info/index.json ({subdir!r})")
    return str(subdir)


def channel_key(path: Path) -> str:
    """Where a package goes in a channel: `<subdir>/<file name>`."""
    return f"{package_subdir(path)}/{Path(path).name}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# -- self-hosted channel ---------------------------------------------------------------------------


@contextlib.contextmanager
def channel_lock(channel: Path) -> Iterator[None]:
    """Exclusive lock of a channel folder (fcntl; serialises publishers on one host)."""
    fd = os.open(channel / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _atomic_copy(src: Path, dest: Path) -> None:
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".partial", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            shutil.copyfileobj(inp, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)  # build outputs may be 0600; a channel is served to others
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _run_coro(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run, also from inside a running event loop (in a worker thread then)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _repodata_lists(subdir_path: Path, files: dict[str, str]) -> bool:
    """True when the subdir's repodata.json exists and lists each file with this sha256."""
    try:
        data = json.loads((subdir_path / "repodata.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    entries: dict[str, Any] = {}
    for section in ("packages", "packages.conda"):
        part = data.get(section) if isinstance(data, dict) else None
        if isinstance(part, dict):
            entries.update(part)
    for name, sha in files.items():
        entry = entries.get(name)
        if not isinstance(entry, dict) or entry.get("sha256") != sha:
            return False
    return True


def _index(channel: Path, subdir: str, *, force: bool) -> None:
    from rattler import Subdir
    from rattler.index import index_fs

    try:
        _run_coro(index_fs(channel, target_platform=Subdir(subdir), force=force))
    except Exception as e:  # rattler raises its own exception types
        raise PublishError(f"indexing {channel / subdir} failed: {e}") from None


def publish_to_channel(channel: Path, files: Sequence[Path]) -> list[str]:
    """Copy conda packages into the channel folder and re-index it.

    Returns the keys (`<subdir>/<file>`) of the files written by this call; a file already
    there with the same sha256 is skipped (so publishing again returns [] and changes
    nothing), one with other content is replaced. Afterwards `repodata.json` of every subdir
    involved lists each file with its current sha256 (a subdir is re-indexed when something
    was written or when its repodata does not match, e.g. after an interrupted publish).
    """
    channel = Path(channel)
    items: list[tuple[Path, str, str]] = []
    for f in files:
        f = Path(f)
        if not f.is_file():
            raise PublishError(f"cannot publish {f}: no such file")
        items.append((f, package_subdir(f), _sha256(f)))
    try:
        channel.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PublishError(f"cannot create channel folder {channel}: {e}") from None

    written: list[str] = []
    with channel_lock(channel):
        subdirs = {"noarch"} | {subdir for _, subdir, _ in items}
        for subdir in sorted(subdirs):
            (channel / subdir).mkdir(exist_ok=True)
        replaced: set[str] = set()
        for src, subdir, sha in items:
            dest = channel / subdir / src.name
            if dest.is_symlink() or (dest.exists() and not dest.is_file()):
                raise PublishError(f"refusing to overwrite {dest}: not a regular file")
            if dest.is_file():
                if _sha256(dest) == sha:
                    continue
                replaced.add(subdir)
            try:
                _atomic_copy(src, dest)
            except OSError as e:
                raise PublishError(f"copying {src.name} into {channel / subdir} failed: {e}") from None
            written.append(f"{subdir}/{src.name}")

        wanted: dict[str, dict[str, str]] = {}
        for src, subdir, sha in items:
            wanted.setdefault(subdir, {})[src.name] = sha
        touched = {key.split("/", 1)[0] for key in written}
        for subdir in sorted(subdirs):
            listed = wanted.get(subdir, {})
            if subdir in touched or not _repodata_lists(channel / subdir, listed):
                _index(channel, subdir, force=subdir in replaced)
                if not _repodata_lists(channel / subdir, listed):
                    # An incremental index trusts older entries of a file name; rebuild fully.
                    _index(channel, subdir, force=True)
                    if not _repodata_lists(channel / subdir, listed):
                        raise PublishError(
                            f"{channel / subdir}/repodata.json does not list the published files"
                        )
    return written


def _scratch_records(items: Sequence[tuple[Path, str, str]]) -> dict[str, dict[str, dict[str, Any]]]:
    """repodata entries of the given packages: {subdir: {section: {file name: entry}}}.

    Made by indexing a scratch channel holding only these files (hard links when possible).
    """
    from rattler import Subdir
    from rattler.index import index_fs

    out: dict[str, dict[str, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="nightly-conda-index-") as tmp:
        scratch = Path(tmp)
        subdirs = {"noarch"} | {subdir for _, subdir, _ in items}
        for subdir in subdirs:
            (scratch / subdir).mkdir()
        for src, subdir, _ in items:
            dest = scratch / subdir / src.name
            try:
                os.link(src, dest)
            except OSError:
                shutil.copyfile(src, dest)
        for subdir in sorted(subdirs):
            try:
                _run_coro(
                    index_fs(
                        scratch,
                        target_platform=Subdir(subdir),
                        write_zst=False,
                        write_shards=False,
                        force=True,
                    )
                )
            except Exception as e:  # rattler raises its own exception types
                raise PublishError(f"indexing packages for {subdir} failed: {e}") from None
            data = json.loads((scratch / subdir / "repodata.json").read_text(encoding="utf-8"))
            out[subdir] = {
                section: dict(data.get(section) or {}) for section in ("packages", "packages.conda")
            }
    for src, subdir, sha in items:
        section = "packages.conda" if src.name.endswith(".conda") else "packages"
        entry = out.get(subdir, {}).get(section, {}).get(src.name)
        if not isinstance(entry, dict) or entry.get("sha256") != sha:
            raise PublishError(f"indexing {src.name} gave no repodata entry with its sha256")
    return out


def publish_to_store_channel(
    store: Store, prefix: str, files: Sequence[Path], *, attempts: int = 30
) -> list[str]:
    """Publish conda packages into a channel kept in a nightly Store (S3 or file://) under
    `prefix` (`""` for the store's root): `<prefix>/<subdir>/<file>` plus
    `<prefix>/<subdir>/repodata.json`.

    Packages go up with `Store.ensure` (skipped when the object already has this sha256).
    Each subdir's repodata.json is then updated by read-merge-write with a conditional write
    (If-Match on its ETag, If-None-Match when creating it), retried when another publisher
    won the race, so concurrent publishers never lose each other's entries and nothing is
    downloaded but repodata.json. Entries are made by py-rattler indexing the new files
    locally. Only repodata.json is written (no .zst, no shards), and entries of files deleted
    from the store are not removed here (that is retention's job). Returns the keys (relative
    to `prefix`) of the package files uploaded by this call.
    """
    import random
    import time

    from nightly.publish.store import PreconditionFailed

    base = prefix.strip("/")
    items: list[tuple[Path, str, str]] = []
    for f in files:
        f = Path(f)
        if not f.is_file():
            raise PublishError(f"cannot publish {f}: no such file")
        items.append((f, package_subdir(f), _sha256(f)))
    if not items:
        return []
    records = _scratch_records(items)

    def key(rel: str) -> str:
        return f"{base}/{rel}" if base else rel

    written: list[str] = []
    for src, subdir, sha in items:
        if store.ensure(key(f"{subdir}/{src.name}"), src, sha):
            written.append(f"{subdir}/{src.name}")

    for subdir in sorted(records):
        repodata_key = key(f"{subdir}/repodata.json")
        for attempt in range(attempts):
            current = store.get_bytes(repodata_key)
            if current is None:
                doc: dict[str, Any] = {"info": {"subdir": subdir}, "packages": {}, "packages.conda": {}}
                doc["repodata_version"] = 1
            else:
                try:
                    doc = json.loads(current[0])
                    if not isinstance(doc, dict):
                        raise ValueError("not an object")
                except ValueError as e:
                    raise PublishError(
                        f"{store.url}/{repodata_key} is not valid JSON ({e}); not touching it"
                    ) from None
            changed = current is None
            for section, entries in records[subdir].items():
                have = doc.setdefault(section, {})
                for name, entry in entries.items():
                    old = have.get(name)
                    if not isinstance(old, dict) or old.get("sha256") != entry["sha256"]:
                        have[name] = entry
                        changed = True
            if not changed:
                break
            data = json.dumps(doc, indent=2, sort_keys=True).encode() + b"\n"
            try:
                if current is None:
                    store.put_bytes(repodata_key, data, "application/json", if_none_match=True)
                else:
                    store.put_bytes(repodata_key, data, "application/json", if_match=current[1])
                break
            except PreconditionFailed:
                time.sleep(random.uniform(0, min(2.0, 0.05 * 2**attempt)))
        else:
            raise PublishError(f"{store.url}/{repodata_key}: gave up after {attempts} conflicting updates")
    return written


def install_from_channel(
    channel: Path,
    spec: str,
    prefix: Path,
    *,
    platform: str | None = None,
    cache_dir: Path | None = None,
) -> list[str]:
    """Solve `spec` against the channel folder alone and install it into `prefix` with py-rattler.

    Returns the names of the installed packages, sorted. Virtual packages (__glibc, __cuda, ...)
    are those of this machine. `cache_dir` holds the repodata and package caches (a temporary
    directory, removed afterwards, when not given).
    """
    from rattler import Channel, Gateway, Subdir, VirtualPackage, install, solve

    channel = Path(channel).resolve()
    if not (channel / "noarch" / "repodata.json").is_file():
        raise PublishError(f"{channel} is not an indexed conda channel (no noarch/repodata.json)")
    with contextlib.ExitStack() as stack:
        if cache_dir is None:
            cache_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="nightly-rattler-")))
        cache_dir = Path(cache_dir)
        target = Subdir(platform) if platform else Subdir.current()

        async def run() -> list[str]:
            gateway = Gateway(cache_dir=cache_dir / "repodata")
            records = await solve(
                [Channel(channel.as_uri())],
                [spec],
                gateway=gateway,
                platforms=[target, Subdir("noarch")],
                virtual_packages=VirtualPackage.detect(),
            )
            await install(
                records,
                target_prefix=Path(prefix),
                cache_dir=cache_dir / "pkgs",
                platform=target,
                show_progress=False,
            )
            return sorted(r.name.normalized for r in records)

        try:
            return _run_coro(run())
        except PublishError:
            raise
        except Exception as e:  # rattler's solve/install errors
            raise PublishError(f"cannot install {spec!r} from {channel}: {e}") from None
