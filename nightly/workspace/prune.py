"""Local retention: old day folders go (remote retention is nightly.publish.retention).

Deliberately paranoid because it runs `rm -rf` from cron: it only ever deletes real
directories directly under ROOT whose name is a real calendar date older than the retention
window, never today's or a future one, never a locked one, never through or at a symlink,
never a mount point or anything on another file system. Every condition is checked again
right before deleting.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from nightly.errors import ConfigError, StateError, UsageError
from nightly.files import remove_tree

_DAY = re.compile(r"([0-9]{4})_([0-9]{2})_([0-9]{2})")  # not \d: it matches "２"


def parse_day(name: str) -> date | None:
    """The date of a day folder name `YYYY_MM_DD`, or None (also for 2026_02_30)."""
    m = _DAY.fullmatch(name)
    if not m:
        return None
    try:
        return date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError:
        return None


@dataclass
class PruneResult:
    deleted: list[Path] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)  # (path, why)
    failed: list[tuple[Path, str]] = field(default_factory=list)  # (path, error)

    def __str__(self) -> str:
        lines = [f"deleted {len(self.deleted)} day folder(s)"
                 + (f", skipped {len(self.skipped)}" if self.skipped else "")
                 + (f", {len(self.failed)} failed" if self.failed else "")]
        lines += [f"  skipped {p} ({why})" for p, why in self.skipped]
        lines += [f"  failed {p}: {why}" for p, why in self.failed]
        return "\n".join(lines)


def _unsafe_reason(real_root: Path, root_dev: int, path: Path) -> str | None:
    """Why `path` must not be deleted, or None when it is a plain directory inside root."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot stat: {exc.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return "symlink"
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    if path.parent != real_root or path.resolve() != real_root / path.name:
        return "outside root"
    if st.st_dev != root_dev or os.path.ismount(path):
        return "another file system"
    return None


def _locked(is_locked: Callable[[Path], bool], path: Path) -> bool:
    try:
        return is_locked(path)
    except (OSError, StateError):  # StateError: a lock file that is no file (a FIFO)
        return True  # cannot tell: keep it


def plan_local_prune(
    root: Path, today: date, keep_days: int, is_locked: Callable[[Path], bool]
) -> list[Path]:
    """Day folders under `root` that are more than `keep_days` days older than `today`."""
    if keep_days < 0:
        raise ConfigError(f"keep_days must be 0 or more, not {keep_days}", key="retention")
    try:
        real_root = root.resolve(strict=True)
        root_dev = os.stat(real_root).st_dev
        entries = sorted(os.listdir(real_root))
    except FileNotFoundError:
        return []
    except OSError as e:
        raise UsageError(f"cannot list the day folders of {root}: {e.strerror or e}") from e
    plan = []
    # Counted back from the day asked for (--date), but never from later than the real
    # today: a mistyped --date 2099_01_01 must not take tonight's folder and the week before.
    today = min(today, date.today())
    for name in entries:
        day = parse_day(name)
        # (today - day) > keep_days >= 0 also rules out today and every future date.
        if day is None or (today - day).days <= keep_days:
            continue
        path = real_root / name
        if _unsafe_reason(real_root, root_dev, path) is None and not _locked(is_locked, path):
            plan.append(path)
    return plan


def apply_local_prune(root: Path, paths: Iterable[Path], is_locked: Callable[[Path], bool]) -> PruneResult:
    """Delete planned day folders, re-checking each one right before it goes."""
    result = PruneResult()
    real_root = root.resolve(strict=True)
    root_dev = os.stat(real_root).st_dev
    for path in paths:
        candidate = real_root / path.name
        if parse_day(path.name) is None:
            reason: str | None = "not a day folder"
        elif path.parent.resolve() != real_root:
            reason = "outside root"
        else:
            reason = _unsafe_reason(real_root, root_dev, candidate)
        if reason is None and _locked(is_locked, candidate):
            reason = "locked"
        if reason is not None:
            result.skipped.append((path, reason))
            continue
        try:
            remove_tree(candidate)
        except OSError as exc:
            result.failed.append((candidate, f"{type(exc).__name__}: {exc}"))
        else:
            result.deleted.append(candidate)
    return result


def prune_day_locks(root: Path, today: date, keep_days: int,
                    is_locked: Callable[[Path], bool]) -> list[Path]:
    """Remove `ROOT/<day>.lock` of every day past the window whose folder is gone (one lock
    file a night would otherwise pile up for ever): a regular file, never a symlink, never
    one that a live process holds. Returns the removed paths."""
    try:
        real_root = root.resolve(strict=True)
        names = os.listdir(real_root)
    except OSError:
        return []
    today = min(today, date.today())
    removed = []
    for name in names:
        if not name.endswith(".lock"):
            continue
        day_name = name[: -len(".lock")]
        day = parse_day(day_name)
        if day is None or (today - day).days <= keep_days:
            continue
        lock, folder = real_root / name, real_root / day_name
        try:
            if not stat.S_ISREG(os.lstat(lock).st_mode) or os.path.lexists(folder):
                continue
        except OSError:
            continue
        if _locked(is_locked, folder):
            continue
        try:
            os.unlink(lock)
        except OSError:
            continue
        removed.append(lock)
    return removed

