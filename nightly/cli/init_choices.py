"""What `nightly init` chooses beyond the project's identity: the manylinux policy and the
toolchain that meets it, the smoke test's runtime dependencies, and the command that
installs a night's wheel (nightly.cli.scaffold writes them)."""

from __future__ import annotations

import configparser
import re
from email.parser import HeaderParser
from pathlib import Path

from packaging.utils import canonicalize_name

from nightly.config.abi3 import LimitedApi


def _text(path: Path) -> str:
    try:
        with path.open("rb") as f:
            return f.read(4 * 1024 * 1024).decode("utf-8", errors="replace")
    except OSError:
        return ""


def dependencies(source: Path, declared: tuple[str, ...], cfg_text: str,
                 setup_py: str) -> tuple[str, ...]:
    """The runtime requirements a project declares (those of no extra): static pyproject
    (`declared`: its [project] dependencies), PKG-INFO's Requires-Dist, setup.cfg's
    install_requires, a setup.py literal list."""
    found: list[str] = list(declared)
    if not found:
        msg = HeaderParser().parsestr(_text(source / "PKG-INFO"))
        found = [str(d) for d in msg.get_all("Requires-Dist") or []]
    if not found:
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(cfg_text)
            raw = parser.get("options", "install_requires", fallback="")
        except configparser.Error:
            raw = ""
        found = [line.strip() for line in raw.splitlines() if line.strip()]
    if not found:
        m = re.search(r"install_requires\s*=\s*\[([^\]]*)\]", setup_py)
        found = re.findall(r"""['"]([^'"]+)['"]""", m.group(1)) if m else []
    return tuple(d for d in found if "extra" not in d.partition(";")[2])


_LIBM_229 = re.compile(rb"\b(?:exp|exp2|log|log2|pow)f?\s*\(")


def zig_why(files: list[Path]) -> str:
    """Why nightly's zig toolchain (glibc 2.17) is the one that meets manylinux_2_28 for
    this project, or "" (the default sysroot toolchain then). The sysroot links against
    glibc 2.31, whose libm `exp`, `log`, `pow` (2.29 symbols) break 2_28, and C++ code
    pulls them in through libstdc++; zig is for C/C++ only (not Rust, Fortran, CUDA)."""
    if any(f.suffix in (".rs", ".f90", ".f", ".cu") for f in files):
        return ""
    cxx = sorted(f.name for f in files if f.suffix in (".cc", ".cpp", ".cxx"))
    if cxx:
        return f"C++ ({', '.join(cxx[:2])})"
    for f in [f for f in files if f.suffix in (".c", ".h")][:200]:
        try:
            with f.open("rb") as fh:
                if _LIBM_229.search(fh.read(512 * 1024)):
                    return f"{f.name} calls libm's exp/log/pow"
        except OSError:
            continue
    return ""


def policy_lines(zig_reason: str) -> list[str]:
    """The manylinux policy (PyTorch's) and the toolchain that meets it, commented."""
    if zig_reason:
        tool = [f"# {zig_reason}: nightly's glibc 2.31 sysroot would link libm symbols of",
                "# glibc 2.29 (exp, log, pow), which break 2_28; zig targets glibc 2.17.",
                'toolchain = "zig"']
    else:
        tool = ['# "sysroot" (gcc against glibc 2.31); a policy miss names "zig" (glibc 2.17,',
                "# C/C++ only) when it would meet it.",
                'toolchain = "sysroot"']
    return ["# Wheels that install where glibc is 2.28 or newer (PyTorch's policy): auditwheel",
            "# (pip install 'nightly-builds[manylinux]') repairs each wheel to it, and one that",
            "# cannot meet it fails its build, never published.",
            'manylinux = "2_28"', *tool]


def smoke_dependency_lines(name: str, requirements: tuple[str, ...]) -> list[str]:
    """[smoke] dependencies: from the index when the project has runtime dependencies."""
    if not requirements:
        return [f"# {name} declares no runtime dependencies: the wheel is installed alone.",
                'dependencies = "none"']
    names = ", ".join(_names(requirements)[:4]) + (" ..." if len(requirements) > 4 else "")
    return [f"# {name} needs {names} at run time: pip installs them into the smoke venv",
            "# from [build] index_url (else this machine's pip configuration), or from",
            "# index_url here; the wheel itself only from the night's packages.",
            'dependencies = "index"']


def _names(requirements: tuple[str, ...]) -> list[str]:
    """The projects a list of requirements names, without versions or markers (a comment
    says who is needed; the metadata keeps the rest)."""
    from packaging.requirements import InvalidRequirement, Requirement

    out = []
    for r in requirements:
        try:
            name = Requirement(r).name
        except InvalidRequirement:
            name = r.split(";", 1)[0].strip()
        if name not in out:
            out.append(name)
    return out


def install_command(project: str, base_version: str, requirements: tuple[str, ...],
                    index: str, version: str = "") -> str:
    """How a user installs a nightly of the project from the mirror: its dependencies, when
    it has any, from PyPI, the project itself pinned to the night's version (`version`,
    else <base_version>.devYYYYMMDD); without dependencies, pinned to `version` when given,
    else the mirror's newest pre-release."""
    name = canonicalize_name(project)
    if not requirements:
        # Pinned when the night is known (init prints tonight's, as the README says); the
        # config's comment serves every night: the newest pre-release of the mirror alone.
        if version:
            return f'pip install --index-url {index} "{name}=={version}"'
        return f"pip install --pre --index-url {index} {name}"
    version = version or f"{base_version or '0.0.0'}.devYYYYMMDD"
    return (f'pip install --index-url {index} --extra-index-url https://pypi.org/simple '
            f'"{name}=={version}"')


def tonight(base_version: str, version_from: str) -> str:
    """The version tonight's night gives the project."""
    import datetime as dt

    from nightly.core.matrix import nightly_version

    return nightly_version(base_version or "0.0.0", dt.date.today(), version_from)


def pip_notes(name: str, pythons: dict[str, str]) -> list[str]:
    """Each Python whose new venv's pip refuses a wheel whose metadata spells its name with
    capitals (pip before 23.1), with the pip it needs."""
    from nightly.report.install import FIXED_PIP, bundled_pip

    if name == canonicalize_name(name):
        return []
    out = []
    for xy, python in pythons.items():
        pip = bundled_pip(python)
        if pip is not None and pip < FIXED_PIP:
            out.append(f"Python {xy}: a new venv's pip {pip} refuses a wheel whose metadata "
                       f"spells the name {name!r}: first `python -m pip install "
                       f"'pip>={FIXED_PIP}'` in the venv")
    return out


def current_branch(source: Path) -> str:
    """The branch a git folder has checked out ("" for a plain folder, a detached HEAD, or
    no git): what its nights build ([project] branch), not git's default name."""
    import subprocess

    from nightly import procs
    from nightly.config.timeouts import default_timeouts

    if not (source / ".git").exists():
        return ""
    try:
        p = procs.call(["git", "-C", str(source), "symbolic-ref", "--quiet", "--short", "HEAD"],
                       timeout=default_timeouts().git_branch)
    except (OSError, subprocess.SubprocessError):
        return ""
    name = p.stdout.strip()
    return name if p.returncode == 0 and name.isprintable() else ""


def wheels_per_python(found: LimitedApi | None) -> str:
    """What the matrix of a compiled project builds, for init's comment above it."""
    if found is not None and found.tagged and found.floor:
        return "one abi3 wheel for them all (limited_api above)"
    return "one wheel per Python"


def limited_api_lines(found: LimitedApi | None) -> list[str]:
    """[project] limited_api for a project that uses the limited API (nightly.config.abi3):
    set when its wheel is declared abi3 with a floor, else a comment saying why not."""
    if found is None:
        return []
    said = "; ".join(found.evidence)
    if found.tagged and found.floor:
        xy = f"3.{found.floor[3:]}"
        return [f"# Limited API ({said}): one {found.floor}-abi3 wheel serves Python {xy} and",
                "# newer: built once, with the lowest of the matrix's Pythons from there, and",
                "# tested on each of them (docs/building.md, \"Limited-API wheels\").",
                f'limited_api = "{found.floor}"']
    why = ("its wheel is not declared abi3" if not found.tagged
           else "no floor found (meson.build limited_api: '3.X')")
    return [f"# It uses the limited API ({said}), but {why}: one wheel per",
            "# Python. To build one wheel for all of them, declare its tag (setup.cfg",
            "# [bdist_wheel] py_limited_api = cp3X) and set limited_api = \"cp3X\"."]


__all__ = ["current_branch", "dependencies", "install_command", "limited_api_lines", "pip_notes",
           "policy_lines", "smoke_dependency_lines", "tonight", "wheels_per_python", "zig_why"]
