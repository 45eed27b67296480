"""`nightly bisect`'s search: which commit of GOOD..BAD first fails the way the night failed.

The candidates are `git rev-list --first-parent GOOD..BAD`, oldest first; BAD (the last) is
known bad, GOOD known good. Each step builds the commit in the middle of what is left and
judges it: *bad* (fails with the night's signature), *good* (succeeds), *skip* (fails another
way: the commit does not build for another reason; the next try is the closest untried commit
to the middle, as `git bisect skip`).

The search is a pure function of the verdicts: `next_commit` picks the same commit for the
same verdicts, so a bisect killed at any moment and run again replays the verdicts it recorded
(steps.jsonl, one line per finished step, appended and fsynced) and builds only what is left.
Running a step (a build in its own folder) is nightly.bisect.run's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nightly.jsonvalues import json_object

GOOD, BAD, SKIP = "good", "bad", "skip"
STEPS_FILE = "steps.jsonl"


@dataclass(frozen=True, kw_only=True)
class Step:
    """One finished build of a bisect."""

    commit: str
    verdict: str  # good | bad | skip
    signature: str = ""
    log: str = ""  # relative to the day folder
    duration_s: float = 0.0

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Step:
        return cls(commit=str(data["commit"]), verdict=str(data["verdict"]),
                   signature=str(data.get("signature") or ""), log=str(data.get("log") or ""),
                   duration_s=float(data.get("duration_s") or 0.0))


@dataclass(frozen=True, kw_only=True)
class Narrowed:
    """Where a search stands: the last known good and first known bad indexes, and the
    candidates between them that were skipped."""

    good: int  # -1: GOOD itself
    bad: int
    skipped: tuple[int, ...] = ()

    @property
    def found(self) -> bool:
        return self.bad - self.good == 1


@dataclass(kw_only=True)
class BisectResult:
    """What `nightly bisect` ends with; recorded in the history (History.record_bisect)."""

    build_id: str
    day: str
    good: str
    bad: str
    signature: str
    status: str = "running"  # found | narrowed | budget spent
    first_bad: str | None = None
    subject: str = ""
    author: str = ""
    date: str = ""
    range: list[str] = field(default_factory=list)  # the smallest range, when not found
    steps: list[Step] = field(default_factory=list)
    builds: int = 0  # steps built by this run (not replayed)

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data["steps"] = [s.to_json() for s in self.steps]
        return data

    def line(self) -> str:
        if self.first_bad:
            return (f"first bad commit {self.first_bad[:12]} {self.subject!r} by {self.author}, "
                    f"{self.date} ({len(self.steps)} builds)")
        return (f"{self.status}: narrowed to {len(self.range)} commits "
                f"{self.range[0][:12]}..{self.range[-1][:12]} ({len(self.steps)} builds)"
                if self.range else f"{self.status} ({len(self.steps)} builds)")


def narrow(candidates: Sequence[str], verdicts: Mapping[str, str]) -> Narrowed:
    """The good/bad bounds the verdicts give over the candidates (oldest first, the last one
    known bad)."""
    good, bad = -1, len(candidates) - 1
    for i, c in enumerate(candidates[:-1]):
        v = verdicts.get(c)
        if v == GOOD:
            good = max(good, i)
    for i, c in enumerate(candidates[:-1]):
        if verdicts.get(c) == BAD and good < i < bad:
            bad = i
    skipped = tuple(i for i in range(good + 1, bad) if verdicts.get(candidates[i]) == SKIP)
    return Narrowed(good=good, bad=bad, skipped=skipped)


def next_commit(candidates: Sequence[str], verdicts: Mapping[str, str]) -> str | None:
    """The commit to build next (the middle of what is left, or the untried commit closest to
    it when the middle was skipped), or None when the search is over."""
    n = narrow(candidates, verdicts)
    left = [i for i in range(n.good + 1, n.bad) if candidates[i] not in verdicts]
    if not left:
        return None
    mid = (n.good + n.bad) // 2
    return candidates[min(left, key=lambda i: (abs(i - mid), i))]


def most_builds(n_candidates: int) -> int:
    """Builds a search needs at most without skips: ceil(log2(n)) over n candidates whose last
    is known bad."""
    return max(n_candidates - 1, 0).bit_length()


# ---------------------------------------------------------------------------- the steps file


def read_steps(folder: Path) -> list[Step]:
    """The finished steps of a bisect folder (a line cut short by kill -9 is left out)."""
    path = folder / STEPS_FILE
    try:
        text = path.read_text()
    except OSError:
        return []
    steps = []
    for line in text.splitlines():
        try:
            steps.append(Step.from_json(json_object(line) or {}))
        except (ValueError, KeyError, TypeError):
            continue
    return steps


def append_step(folder: Path, step: Step) -> None:
    """Record a finished step: one line, written and fsynced before the next step starts."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / STEPS_FILE).open("a", encoding="utf-8") as f:
        # A line kill -9 cut short has no newline: start a fresh one so this one parses.
        if f.tell() and not (folder / STEPS_FILE).read_bytes().endswith(b"\n"):
            f.write("\n")
        f.write(json.dumps(step.to_json(), sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


__all__ = [
    "BAD",
    "GOOD",
    "SKIP",
    "BisectResult",
    "Narrowed",
    "Step",
    "append_step",
    "most_builds",
    "narrow",
    "next_commit",
    "read_steps",
]
