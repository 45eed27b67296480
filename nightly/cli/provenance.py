"""`nightly provenance keygen DIR` and `nightly verify FILE|URL...` (registered on the main
command group; the work is in nightly.provenance and nightly.provenance.verifying)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from nightly.errors import NotVerified, UsageError
from nightly.format import shown

if TYPE_CHECKING:
    from nightly.provenance.verifying import Checked


@click.group(name="provenance")
def provenance_group() -> None:
    """Signed provenance of the packages: the signing key."""


@provenance_group.command(name="keygen")
@click.argument("folder", metavar="DIR")
@click.option("--scheme", type=click.Choice(["ed25519", "ecdsa-p256"]), default="ed25519",
              show_default=True, help="The key type.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
def keygen_command(folder: str, scheme: str, debug: bool) -> None:
    """Make a signing key pair in DIR: provenance.key (private, mode 0600, never printed) and
    provenance.pub (give it to your users)."""
    from nightly import provenance

    private, public = provenance.keygen(Path(folder), scheme)
    click.echo(f"private key: {private} (mode 0600; set [provenance] key = {str(private)!r} on "
               "the machine that runs the night, the orchestrator in cluster mode)")
    click.echo(f"public key:  {public} (publish it; users verify with "
               f"`nightly verify --key {public.name} FILE|URL`)")


def _public_key(key_path: str | None, config_path: str | None) -> object:
    from nightly import config as cfg
    from nightly import provenance

    if key_path:
        return provenance.load_public_key(Path(key_path))
    try:
        config = cfg.load(cfg.find_config_path(config_path))
    except Exception as e:  # no usable configuration: the key must be given
        raise UsageError(f"give the public key with --key PUB ({e})") from e
    if config.provenance.key is None:
        raise UsageError("give the public key with --key PUB (the configuration has no "
                         "[provenance] key)")
    return provenance.load_public_key(config.provenance.key.with_name(provenance.PUBLIC_NAME))


def _rebuilt(results: list[Checked], config_path: str | None) -> list[Checked]:
    """Each verified package built again here; its verdict is the rebuild's."""
    import dataclasses

    from nightly import config as cfg
    from nightly import provenance
    from nightly.night import verify_rebuild

    config = cfg.load(cfg.find_config_path(config_path))
    out = []
    for r in results:
        if r.verdict.ok and r.fetched is not None and r.fetched.bundle is not None:
            stmt = provenance.payload_of(r.fetched.bundle)
            again = verify_rebuild.rebuild(config, r.fetched.name, r.fetched.sha256, stmt)
            r = dataclasses.replace(r, verdict=dataclasses.replace(
                again, summary=(*r.verdict.summary, *again.summary)))
        out.append(r)
    return out


@click.command(name="verify")
@click.argument("targets", nargs=-1, required=True, metavar="FILE|URL...")
@click.option("--key", "key_path", metavar="PUB", help="The site's public key (PEM); default: "
              "provenance.pub beside the configured [provenance] key.")
@click.option("--source-commit", metavar="C", help="Also require this commit (a prefix).")
@click.option("--rebuild", is_flag=True, help="Also rebuild each package here from its "
              "provenance (this machine's configuration, the provenance's commit) and compare.")
@click.option("--config", "config_path", metavar="FILE", help="Configuration file.")
@click.option("--max-size", "max_mb", type=click.IntRange(min=1), default=8192, show_default=True,
              metavar="MB", help="Refuse a download larger than this (MB).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.1), default=600.0,
              show_default=True, metavar="SECONDS",
              help="All downloads together must finish within this.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
def verify_command(targets: tuple[str, ...], key_path: str | None, source_commit: str | None,
                   rebuild: bool, config_path: str | None, max_mb: int, timeout_s: float,
                   debug: bool) -> None:
    """Check packages against their signed provenance (<file>.provenance.json beside each):
    the signature, the file's sha256, the commit. Exit 0 when all verify, 1 otherwise."""
    import time

    from nightly.provenance import verifying

    if source_commit is not None and not source_commit.strip():
        raise UsageError("--source-commit is empty: give the commit (or a prefix of it) the "
                         "packages must be built from, or leave the option out")
    key = _public_key(key_path, config_path)
    budget = verifying.Budget(max_bytes=max_mb << 20, deadline=time.monotonic() + timeout_s)
    results = verifying.verify_targets(targets, key, source_commit=source_commit, budget=budget)
    if rebuild:
        results = _rebuilt(results, config_path)
    for r in results:
        click.echo(f"{'OK  ' if r.verdict.ok else 'FAIL'} {r.target}")
        if not r.verdict.ok:
            click.echo(f"     {shown(r.verdict.reason)}")  # it may quote the package
        for line in r.verdict.summary:
            click.echo(f"     {shown(line)}")
    bad = [r for r in results if not r.verdict.ok]
    if bad:
        raise NotVerified(f"{len(bad)} of {len(results)} package(s) did not verify", reported=True)


__all__ = ["provenance_group", "verify_command"]
