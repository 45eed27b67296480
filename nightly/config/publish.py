"""[publish], [publish.conda] and [publish.pypi]: where packages and index pages go."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from nightly.config.reader import Ctx, Table, placeholders, resolve_path, store_url
from nightly.config.schema import Publish
from nightly.files import confined

FIND_LINKS_FIELDS = ("project", "channel")
ATOMIC = ("build", "folder", "night")  # [publish] atomic


def _folder(folder: str, ctx: Ctx) -> str:
    """A folder of the bucket layout (whl/nightly), without slashes at either end."""
    clean = folder.strip("/")
    if confined(clean) is None or clean.split("/")[0] not in ("whl", "libtorch"):
        ctx.fail(f"'{folder}' is not a folder of the bucket layout", "publish.index_shared",
                 hint="write a channel's folder such as \"whl/nightly\", \"whl/test\" or \"whl\"")
    return clean


def parse_publish(top: Table, ctx: Ctx, base: Path, project: str) -> Publish:
    pt = top.table("publish")
    url = store_url(
        pt.str("url"), "publish.url", base, ctx,
        what="destinations", path_hint="a folder path",
    )
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "s3" and not parts.netloc:
        ctx.fail(f"no bucket in '{url}'", "publish.url", hint="write s3://BUCKET/PREFIX")
    if parts.scheme == "file" and parts.netloc not in ("", "localhost"):
        ctx.fail(f"'{url}' is not on this machine", "publish.url",
                 hint="write file:///ABSOLUTE/PATH (or mount the share and use its path)")
    find_links = _find_links(pt.str("find_links"), ctx, project)
    co = pt.table("conda")
    channel = co.str("channel")
    if channel.startswith("file://"):
        channel = channel[len("file://"):]
    py = pt.table("pypi")
    p = Publish(
        url=url,
        endpoint_url=pt.str("endpoint_url"),
        region=pt.str("region"),
        profile=pt.str("profile"),
        acl=pt.str("acl"),
        find_links=find_links,
        index=pt.bool("index"),
        index_shared=tuple(pt.str_list("index_shared", item=lambda f: _folder(f, ctx))),
        index_aggregate=pt.bool("index_aggregate"),
        index_workers=_workers(pt, ctx),
        conda_channel=str(resolve_path(channel, base).resolve()) if channel else "",
        anaconda_user=co.str("anaconda_user"),
        anaconda_label=co.str("anaconda_label"),
        anaconda_test_label=co.str("anaconda_test_label"),
        anaconda_site=co.str("anaconda_site"),
        token_env=co.str("token_env"),
        token_file=co.str("token_file"),
        pypi_url=py.str("repository_url"),
        pypi_username=py.str("username"),
        pypi_password_env=py.str("password_env"),
        project=project,
        public_url=_public_url(pt.str("public_url"), ctx),
        validate=pt.bool("validate"),
        atomic=pt.choice("atomic", ATOMIC),
    )
    co.finish()
    py.finish()
    pt.finish()
    return p


MAX_INDEX_WORKERS = 256  # more threads than this only queue on the HTTP connection pool


def _workers(pt: Table, ctx: Ctx) -> int:
    workers = pt.int("index_workers", minimum=1)
    if workers > MAX_INDEX_WORKERS:
        ctx.fail(f"must be at most {MAX_INDEX_WORKERS}, not {workers}", "publish.index_workers",
                 hint="32 suits S3; use 1 to read one object after another")
    return workers


def _find_links(template: str, ctx: Ctx, project: str) -> str:
    """The flat page's name template, checked now so a typo fails the config, not the upload."""
    name = ""
    try:
        ok = all(f in FIND_LINKS_FIELDS for f in placeholders(template))
        name = template.format(project=project, channel="nightly")
    except (KeyError, IndexError, ValueError, AttributeError, TypeError):
        ok = False
    if not ok:
        ctx.fail(f"'{template}' has an unknown placeholder", "publish.find_links",
                 hint="only {project} and {channel} are known")
    if not name or "/" in name:
        ctx.fail(f"'{template}' does not name a file in the folder", "publish.find_links",
                 hint='write e.g. "{project}_{channel}.html"')
    return template


def _public_url(text: str, ctx: Ctx) -> str:
    """An http(s):// or file:// base without credentials (it is printed and logged)."""
    if not text:
        return ""
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https", "file"):
        ctx.fail(f"'{text}' is not an http(s):// or file:// URL", "publish.public_url",
                 hint="write the URL users download from, e.g. https://download.example.com/")
    if parts.username or parts.password:
        ctx.fail("a public URL carries no credentials", "publish.public_url")
    return text.rstrip("/")
