"""Can another account reach a path? Answered from the file system's mode bits, without
switching to that account: the build user's preflight (nightly/builds/area/userarea.py) asks it of
every path a build needs, before the first build, so a folder out of the user's reach is one
line at plan time instead of a build failing with a shell's "Permission denied".

A path is reachable with access NEED ("r", "w", "x", or several) when every folder on the way
(from /, through the targets of symlinks on the way too) grants search (x) to the user, and
the path itself grants NEED. Which class of bits applies is the kernel's rule: the owner's when
the user owns it, else the group's when one of the user's groups owns it, else the others'
(an owner denied by its own bits is denied, whatever the others' say). uid 0 reaches
everything. POSIX ACLs are not read: a component that carries one is reported as `acl`, and
the caller may confirm it by a real test as the user.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_BITS = {"r": 4, "w": 2, "x": 1}
_WORDS = {"r": "read (r)", "w": "write (w)", "x": "search (x)"}
_ACL = "system.posix_acl_access"


@dataclass(frozen=True, kw_only=True)
class Account:
    """Who is asking: a uid and every group it has."""

    name: str
    uid: int
    gids: frozenset[int]

    @classmethod
    def of(cls, name: str) -> Account:
        entry = pwd.getpwnam(name)
        return cls(name=name, uid=entry.pw_uid,
                   gids=frozenset(os.getgrouplist(name, entry.pw_gid)))


@dataclass(frozen=True, kw_only=True)
class Denied:
    """Why `path` is out of reach: `where` (the path or a folder on its way) lacks `missing`."""

    path: Path
    where: Path
    missing: str  # "x", "r", "w", ...
    mode: str  # "drwx------ root:root"
    acl: bool = False  # `where` carries a POSIX ACL, whose entries were not read
    final: bool = False  # `where` is the path itself (or its target), not a folder on the way

    def words(self) -> str:
        return " and ".join(_WORDS[c] for c in self.missing)

    def sentence(self, user: str) -> str:
        if self.final:
            return f"{user} lacks {self.words()} on it ({self.mode})"
        return f"{self.where} is {self.mode}: {user} lacks {self.words()} on it"


def describe_mode(st: os.stat_result) -> str:
    return f"{stat.filemode(st.st_mode)} {_name(pwd.getpwuid, st.st_uid)}:{_name(grp.getgrgid, st.st_gid)}"


def _name(lookup: object, ident: int) -> str:
    try:
        return str(lookup(ident)[0])  # type: ignore[operator]
    except (KeyError, TypeError):
        return str(ident)


def missing_bits(st: os.stat_result, who: Account, need: str) -> str:
    """The letters of `need` that the mode bits of `st` deny `who`."""
    if who.uid == 0:
        return ""
    if st.st_uid == who.uid:
        granted = (st.st_mode >> 6) & 7
    elif st.st_gid in who.gids:
        granted = (st.st_mode >> 3) & 7
    else:
        granted = st.st_mode & 7
    return "".join(c for c in need if not granted & _BITS[c])


def _has_acl(path: Path) -> bool:
    try:
        return _ACL in os.listxattr(path)
    except OSError:
        return False


def _walk(path: Path) -> Iterable[Path]:
    """The folders on the way to `path` (lexical, and through the real path)."""
    lexical = Path(os.path.abspath(path))
    real = Path(os.path.realpath(lexical))
    seen: set[Path] = set()
    for p in (lexical, real):
        for folder in reversed(p.parents):
            if folder not in seen:
                seen.add(folder)
                yield folder


def denied(path: Path, who: Account, need: str) -> Denied | None:
    """Why `who` cannot reach `path` with access `need`, or None: it can, or something on the
    way does not exist (what needs it fails on its own, with its own words)."""
    target = Path(os.path.abspath(path))
    checks = [(folder, "x", False) for folder in _walk(target)]
    checks.append((Path(os.path.realpath(target)), need, True))
    for where, bits, final in checks:
        try:
            st = os.stat(where)
        except OSError:
            return None
        lacking = missing_bits(st, who, bits)
        if lacking:
            return Denied(path=target, where=where, missing=lacking, mode=describe_mode(st),
                          acl=_has_acl(where), final=final)
    return None


__all__ = ["Account", "Denied", "denied", "describe_mode", "missing_bits"]
