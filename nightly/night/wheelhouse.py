"""The night's wheelhouse of build requirements ([build] wheelhouse = true).

Prepared once per night on the host, before any build: for each Python of the night, the
project's build requirements are resolved by pip (versions, extras and markers, for that
interpreter) and downloaded as wheels into <day>/wheelhouse/. pypa/build reads the
requirements: the static `[build-system] requires`, then what the build backend asks for on
top of them (get_requires_for_build_wheel, e.g. Cython for an in-tree backend, ninja for
meson-python), asked in a throw-away venv that has the static ones installed from the
wheelhouse. Builds then install from the wheelhouse alone (PIP_NO_INDEX), so they need no
network: the container executor mounts it read-only.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from nightly.config import Config
from nightly.config.pyproject import pyproject_problem
from nightly.errors import NightlyError
from nightly.files.copy import copy_tree
from nightly.procs import pip_download, run

MARKER = ".complete"


def pip_source_args(config: Config) -> list[str]:
    """pip options for where build requirements come from ([build]; none: pip's config)."""
    b = config.build
    args = ["--index-url", b.index_url] if b.index_url else []
    for url in b.extra_index_urls:
        args += ["--extra-index-url", url]
    for link in b.find_links:
        args += ["--find-links", link]
    return args


def _run(cmd: list[str], what: str, log: Callable[[str], None]) -> None:
    run(cmd, f"preparing the wheelhouse: {what}", tail=40, log=lambda line: log(f"wheelhouse: {line}"),
        hint="Fix [build] index_url / extra_index_urls / find_links, or set [build] wheelhouse = false")


def requirements_for(source: Path, python: str, wheelhouse: Path, config: Config,
                     log: Callable[[str], None]) -> list[str]:
    """Download the build requirements of `source` for interpreter `python` into
    `wheelhouse`; returns them (static, then dynamic)."""
    from build import ProjectBuilder
    from pyproject_hooks import quiet_subprocess_runner

    static = sorted(ProjectBuilder(source).build_system_requires)
    download = pip_download(wheelhouse, *pip_source_args(config), python=python)
    _run([*download, *static], f"pip download {' '.join(static)} for {python}", log)
    with tempfile.TemporaryDirectory(prefix="nightly-wheelhouse-") as t:
        venv = Path(t) / "venv"
        _run([python, "-m", "venv", str(venv)], f"{python} -m venv", log)
        vpy = str(venv / "bin" / "python")
        _run([vpy, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index",
              "--find-links", str(wheelhouse), *static],
             "installing the static build requirements from the wheelhouse", log)
        # The backend may write into the tree it is asked about (egg-info, build dirs).
        copy = Path(t) / "src"
        copy_tree(source, copy)  # any depth, links as links (nightly.files.copy)
        builder = ProjectBuilder(copy, python_executable=vpy, runner=quiet_subprocess_runner)
        try:
            dynamic = sorted(set(builder.get_requires_for_build("wheel")) - set(static))
        except Exception as e:  # the backend's own failure: the builds would fail alike
            raise NightlyError(
                f"preparing the wheelhouse: the build backend failed to say what it needs: {e}"
            ) from e
    if dynamic:
        _run([*download, *dynamic], f"pip download {' '.join(dynamic)} for {python}", log)
    return static + dynamic


def prepare(config: Config, source: Path, dest: Path, pythons: Iterable[str],
            log: Callable[[str], None]) -> Path:
    """The night's wheelhouse at `dest`, prepared once (a finished one is reused)."""
    from nightly.executors.local import NotFound, find_python

    if (dest / MARKER).is_file():
        return dest
    bad = pyproject_problem(source)
    if bad:  # every build of this source fails with the same line; the night goes on
        log(f"wheelhouse: not prepared: {bad}")
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    wanted: dict[str, list[str]] = {}
    for xy in sorted(set(pythons)):
        try:
            python = find_python(xy, config.local.pythons)
        except NotFound as e:
            raise NightlyError(f"preparing the wheelhouse for Python {xy}: {e}") from e
        wanted[xy] = requirements_for(source, python, dest, config, log)
    lines = [f"{xy}: {', '.join(reqs)}" for xy, reqs in wanted.items()]
    (dest / MARKER).write_text("\n".join(lines) + "\n")
    log(f"wheelhouse ready: {dest} ({len(list(dest.glob('*.whl')))} wheels)")
    return dest
