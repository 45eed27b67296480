"""The manylinux policy of manywheel builds: declared, met, checked.

A policy is `"X_Y"` (a manylinux_X_Y tag: the wheel installs where glibc is X.Y or newer),
`"off"` (the builds opt out: whatever they produce is shipped) or empty (none declared:
auditwheel's own choice where the build has auditwheel; a plain `linux_*` wheel is shipped
with a note in the footer, as before policies existed). It is declared per builder
image (`[builders.NAME] manylinux`) and for the matrix (`[matrix.linux.manywheel]
manylinux`, the default for builds whose builder declares none and for host builds); the
recipe repairs with `auditwheel repair --plat manylinux_<policy>_<arch>` and fails with
auditwheel's reason when the wheel cannot meet it, and nightly checks every wheel a
manywheel build with a policy produced before it is filed (`check_packages`): a plain
`linux_*` wheel, or one tagged newer than the policy, fails the build and is never
published.

libtorch zips are no wheels but need a glibc too: `zip_glibc` reads the newest GLIBC_
symbol version their ELF files need, recorded beside the build like a wheel's tag; under a
declared policy (`[matrix.linux.libtorch] manylinux`) a zip needing a newer glibc fails
the build and is never published.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from nightly.jsonvalues import as_str, str_map

OFF = "off"
# Legacy aliases (PEP 600): what glibc each stands for.
LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
_POLICY = re.compile(r"^(?:manylinux_?)?(\d+)[._](\d+)$")
_TAG = re.compile(r"^manylinux_(\d+)_(\d+)_(\w+)$")
ENV_POLICY = "NIGHTLY_MANYLINUX"  # the recipe environment's copy of the policy


def parse_policy(text: str) -> str:
    """'2_28' from '2_28', '2.28', 'manylinux_2_28'; 'off'; '' (none). ValueError else."""
    t = text.strip().lower()
    if t in ("", OFF):
        return t
    if t in LEGACY:
        major, minor = LEGACY[t]
        return f"{major}_{minor}"
    m = _POLICY.match(t)
    if not m or int(m.group(1)) != 2 or not 5 <= int(m.group(2)) <= 99:
        raise ValueError(
            f"'{text}' is not a manylinux policy: write \"2_28\" (manylinux_2_28: glibc 2.28 "
            "or newer), \"2_17\" (manylinux2014), or \"off\""
        )
    return f"{int(m.group(1))}_{int(m.group(2))}"


def glibc_of(policy: str) -> tuple[int, int]:
    major, minor = policy.split("_")
    return int(major), int(minor)


ENV_PLATFORM = "MANYLINUX_PLATFORM"  # the recipe environment's platform tag to reach
# Build architectures -> the machine names manylinux tags use (macOS's arm64 is aarch64).
_TAG_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64",
             "ppc64le": "ppc64le", "s390x": "s390x", "i686": "i686", "armv7l": "armv7l"}


def plat(policy: str, arch: str) -> str:
    """auditwheel's --plat for a policy and a build's architecture: manylinux_2_28_x86_64,
    manylinux_2_28_aarch64. The one rule for the platform tag: the architecture always comes
    from the build (Build.target_arch), never from the machine that runs nightly."""
    tag_arch = _TAG_ARCH.get(arch)
    if tag_arch is None:
        raise ValueError(f"'{arch}' is not an architecture manylinux knows")
    return f"manylinux_{policy}_{tag_arch}"


def platform_env(policy: str, arch: str) -> dict[str, str]:
    """What a manywheel recipe receives: the policy (NIGHTLY_MANYLINUX) and, unless it is
    "off", the platform tag to repair to (MANYLINUX_PLATFORM; AUDITWHEEL_PLAT, auditwheel's
    own name, the same)."""
    if not policy:
        return {}
    env = {ENV_POLICY: policy}
    if policy != OFF:
        env[ENV_PLATFORM] = env["AUDITWHEEL_PLAT"] = plat(policy, arch)
    return env


def tag_glibc(platform_tag: str) -> tuple[int, int] | None:
    """The glibc a platform tag needs (manylinux2014_x86_64 -> 2.17), None if not manylinux."""
    m = _TAG.match(platform_tag)
    if m:
        return int(m.group(1)), int(m.group(2))
    for legacy, glibc in LEGACY.items():
        if platform_tag.startswith(legacy + "_"):
            return glibc
    return None


def wheel_platforms(name: str) -> list[str]:
    """The platform tags of a wheel file name (a compressed tag set has several)."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        parse_wheel_filename(name)
    except InvalidWheelFilename:
        return []
    # As written (auditwheel puts the PEP 600 tag first), not as a set.
    return name[: -len(".whl")].split("-")[-1].split(".")


_RECORD_KEYS = ("policy", "tags", "glibc", "zips", "toolchain")


@dataclass(frozen=True, kw_only=True)
class ManylinuxRecord:
    """A build's manylinux record (state.json's `manylinux`): a manywheel's policy and the
    platform tags its wheels reached (`tags`, None for a libtorch build), the newest glibc
    they (or a libtorch build's zips) need, each zip's glibc, and the toolchain it was built
    with. Read leniently: a value of the wrong type reads as unset, unknown keys are kept."""

    policy: str = ""
    tags: tuple[str, ...] | None = None  # one per wheel, its platform tags joined by "."
    glibc: str = ""
    zips: Mapping[str, str] | None = None  # zip name -> the glibc it needs ("": none)
    toolchain: str = ""
    extra: Mapping[str, object] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = dict(self.extra)
        if self.tags is not None or self.policy:
            out["policy"] = self.policy
        if self.tags is not None:
            out["tags"] = list(self.tags)
        if self.glibc:
            out["glibc"] = self.glibc
        if self.zips is not None:
            out["zips"] = dict(self.zips)
        if self.toolchain:
            out["toolchain"] = self.toolchain
        return out

    @classmethod
    def from_json(cls, data: object) -> ManylinuxRecord | None:
        if not isinstance(data, Mapping):
            return None
        tags, zips = data.get("tags"), data.get("zips")
        return cls(policy=as_str(data.get("policy")),
                   tags=tuple(str(t) for t in tags) if isinstance(tags, list) else None,
                   glibc=as_str(data.get("glibc")),
                   zips=str_map(zips) if isinstance(zips, Mapping) else None,
                   toolchain=as_str(data.get("toolchain")),
                   extra={str(k): v for k, v in data.items() if k not in _RECORD_KEYS})


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """What the check found: `reason` fails the build; `record` goes into its state entry
    (policy, tags reached, glibc needed; None: nothing to record); `notes` into its log
    footer."""

    reason: str | None = None
    record: ManylinuxRecord | None = None
    notes: tuple[str, ...] = ()


def check_packages(
    package: str, policy: str, files: Sequence[Path], toolchain: str = "", arch: str = "",
    cuda: bool = False,
) -> Verdict:
    """The policy check of a build's packages, before they are filed (both build phases).
    `toolchain`: the build's NIGHTLY_TOOLCHAIN when known, for the fix a failure names. With
    the build's architecture (`arch`), a manywheel tagged for another one fails too."""
    if package == "manywheel":
        wheels = [f for f in files if f.name.endswith(".whl")]
        verdict = _check_wheels(policy, wheels, toolchain, cuda)
        wrong = _wrong_arch(wheels, arch) if arch else []
        if wrong:
            reason = (f"{', '.join(wrong)}, not {arch}, the build's architecture (a wheel "
                      "of another architecture is never published)")
            if verdict.reason:
                reason = f"{verdict.reason}; {reason}"
            return Verdict(reason=reason, record=verdict.record, notes=verdict.notes)
        return verdict
    if package == "libtorch":
        return _check_zips(policy, [f for f in files if f.suffix == ".zip"])
    return Verdict()


def tag_arch(platform_tag: str) -> str:
    """The architecture a Linux platform tag names (manylinux_2_28_aarch64 -> aarch64,
    linux_x86_64 -> x86_64); "" for `any` and tags of no Linux architecture."""
    for prefix in ("linux_", *(f"{legacy}_" for legacy in LEGACY)):
        if platform_tag.startswith(prefix):
            return _TAG_ARCH.get(platform_tag[len(prefix):], "")
    m = _TAG.match(platform_tag)
    return _TAG_ARCH.get(m.group(3), "") if m else ""


def _wrong_arch(wheels: Sequence[Path], arch: str) -> list[str]:
    want = _TAG_ARCH.get(arch, arch)
    wrong = []
    for w in wheels:
        archs = {a for a in (tag_arch(p) for p in wheel_platforms(w.name)) if a}
        if archs and want not in archs:
            wrong.append(f"{w.name} is for {'/'.join(sorted(archs))}")
    return wrong


def fix_for_glibc(toolchain: str, cuda: bool = False) -> str:
    """What to change when a wheel needs a glibc newer than its policy."""
    if cuda:  # zig builds no CUDA: the builder image's sysroot is what reaches the policy
        return ("build it in the declared builder image ([images], `nightly images build`), "
                "whose sysroot reaches the policy: the engine's own image with the host's "
                "toolkit (cuda_mounts) links this host's glibc")
    if toolchain.startswith("zig"):
        return ("the zig toolchain targets glibc 2.17: a library the wheel links is newer "
                "(auditwheel show in the log)")
    return 'toolchain = "zig" (C/C++, not CUDA) reaches manylinux_2_17'


def _check_wheels(policy: str, wheels: Sequence[Path], toolchain: str = "",
                  cuda: bool = False) -> Verdict:
    shown = policy or "none declared"
    tags: list[str] = []
    newest: tuple[int, int] = (0, 0)
    problems: list[str] = []
    warnings: list[str] = []
    for w in wheels:
        platforms = wheel_platforms(w.name)
        tags.append(".".join(platforms))
        needs = [g for g in (tag_glibc(p) for p in platforms) if g is not None]
        if not needs:
            if policy and platforms:
                problems.append(f"{w.name} is tagged {'.'.join(platforms)}, not manylinux: "
                                "pip installs it from no index and PyPI refuses it")
            elif platforms:
                warnings.append(f"{w.name} is no manylinux wheel (no policy declared: shipped; "
                                "pip installs it from no index)")
            continue
        need = min(needs)  # a compressed tag set installs where its oldest tag does
        newest = max(newest, need)
        if policy not in ("", OFF) and need > glibc_of(policy):
            problems.append(f"{w.name} needs glibc {need[0]}.{need[1]}, newer than the "
                            f"policy manylinux_{policy} ({fix_for_glibc(toolchain, cuda)})")
    record = ManylinuxRecord(policy=policy or "", tags=tuple(tags),
                             glibc=f"{newest[0]}.{newest[1]}" if newest != (0, 0) else "")
    notes = (f"manylinux: policy {shown}; reached {', '.join(tags) or '-'}", *warnings)
    if policy == OFF or not problems:
        return Verdict(record=record, notes=notes)
    return Verdict(
        reason="manylinux policy not met: " + "; ".join(problems) + " (nothing of it is "
        "published; see the log for auditwheel's report)",
        record=record, notes=notes,
    )


def _check_zips(policy: str, zips: Sequence[Path]) -> Verdict:
    """A libtorch build's zips: their glibc recorded and, under a policy ([matrix.linux.
    libtorch] manylinux), checked: a zip that needs a newer glibc fails the build."""
    needs = {z.name: zip_glibc(z) for z in zips}
    verdict = _record_zips(needs)
    if policy in ("", OFF) or not needs:
        return verdict
    too_new = sorted(
        f"{name} needs glibc {need}" for name, need in needs.items()
        if need and tuple(int(x) for x in need.split(".")) > glibc_of(policy))
    record = replace(verdict.record or ManylinuxRecord(), policy=policy)
    notes = (f"glibc: policy {policy} (its libraries may need glibc "
             f"{policy.replace('_', '.')} at most)", *verdict.notes)
    if not too_new:
        return Verdict(record=record, notes=notes)
    return Verdict(
        reason=f"manylinux policy {policy} not met: {'; '.join(too_new)}, newer than glibc "
        f"{policy.replace('_', '.')} (build it with the policy's toolchain: on the host "
        "nightly's glibc sysroot, in an image one whose glibc is that old; nothing of it is "
        "published)",
        record=record, notes=notes)


def _record_zips(needs: dict[str, str]) -> Verdict:
    """zip name -> the glibc it needs ("": none) as the build's record and footer notes."""
    if not needs:
        return Verdict()
    notes = tuple(
        f"glibc: {name} needs glibc {need} (newest GLIBC_ symbol version of its libraries)"
        if need else f"glibc: {name} needs no particular glibc (no versioned GLIBC_ symbol in "
        "it: static archives leave that to the program that links them)"
        for name, need in sorted(needs.items()))
    known = [n for n in needs.values() if n]
    if not known:
        return Verdict(record=ManylinuxRecord(zips=needs), notes=notes)
    newest = max(known, key=lambda v: tuple(int(x) for x in v.split(".")))
    return Verdict(record=ManylinuxRecord(glibc=newest, zips=needs), notes=notes)


def zip_glibc(path: Path) -> str:
    """The newest GLIBC_X.Y symbol version the ELF files of a zip need ('' when none)."""
    newest = (0, 0)
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if info.is_dir() or info.file_size < 64:
                    continue
                with zf.open(info) as f:
                    if f.read(4) != b"\x7fELF":
                        continue
                with zf.open(info) as f:
                    newest = max(newest, elf_glibc(f))
    except (OSError, zipfile.BadZipFile):
        return ""
    return f"{newest[0]}.{newest[1]}" if newest != (0, 0) else ""


def elf_glibc(stream: IO[bytes]) -> tuple[int, int]:
    """The newest GLIBC_X.Y an ELF file's version needs name ((0, 0): none, or not readable
    without pyelftools, which auditwheel brings)."""
    import io

    try:
        from elftools.common.exceptions import ELFError
        from elftools.elf.elffile import ELFFile
        from elftools.elf.gnuversions import GNUVerNeedSection
    except ImportError:
        return (0, 0)
    newest = (0, 0)
    try:
        elf = ELFFile(io.BytesIO(stream.read()))
        for section in elf.iter_sections():
            if not isinstance(section, GNUVerNeedSection):
                continue
            for _, auxes in section.iter_versions():
                for aux in auxes:
                    m = re.match(r"^GLIBC_(\d+)\.(\d+)", str(aux.name))
                    if m:
                        newest = max(newest, (int(m.group(1)), int(m.group(2))))
    except (ELFError, ValueError):
        return (0, 0)
    return newest


def describe(record: ManylinuxRecord | None) -> str:
    """One line for status and the report: 'policy 2_28: manylinux_2_17' (the oldest glibc
    the night's wheels install on), 'policy 2_28: linux_x86_64' when one missed it, then
    the toolchain recorded (', toolchain image': the builder image's own compilers)."""
    if record is None:
        return ""
    if record.tags is not None:
        policy = record.policy or "none"
        tags = [t for tag in record.tags for t in tag.split(".")]
        plain = sorted({t for t in tags if tag_glibc(t) is None})
        reached = (", ".join(plain) if plain or not record.glibc
                   else f"manylinux_{record.glibc.replace('.', '_')}")
        toolchain = f", toolchain {record.toolchain}" if record.toolchain else ""
        return f"policy {policy}: {reached or '-'}{toolchain}"
    if record.glibc:
        return f"needs glibc {record.glibc}"
    return ""
