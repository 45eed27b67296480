"""A limited-API build's test on each Python (nightly.core.limited): one typed record per
Python, kept in state.json's `tested` under "pythons" (nightly.workspace.records) and in
summary.json's build line under "tested_pythons" as a list of {"python", "result", "seconds", "reason"}.

Read leniently (a day folder written by another version, or damaged): an entry that is not
of that shape is left out, never an error.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from nightly.jsonvalues import opt_float, opt_str

KEY = "pythons"  # in state.json's `tested`
SUMMARY_KEY = "tested_pythons"  # in summary.json's build line
PASSED, FAILED, NOT_RUN = "passed", "failed", "not run"
MAX_ENTRIES = 64  # more Pythons than any matrix has: the rest of a damaged list is left out


@dataclass(frozen=True, kw_only=True)
class PythonTest:
    """The test of a limited-API build's wheel on one Python."""

    python: str  # 3.12
    result: str  # passed, failed, not run
    seconds: float = 0.0
    reason: str | None = None  # why it failed or was not run

    def to_json(self) -> dict[str, object]:
        return {"python": self.python, "result": self.result, "seconds": self.seconds,
                **({"reason": self.reason} if self.reason else {})}

    @classmethod
    def from_json(cls, data: object) -> PythonTest | None:
        if not isinstance(data, Mapping):
            return None
        python, result = data.get("python"), data.get("result")
        if not isinstance(python, str) or result not in (PASSED, FAILED, NOT_RUN):
            return None
        return cls(python=python[:16], result=str(result),
                   seconds=opt_float(data.get("seconds")) or 0.0,
                   reason=opt_str(data.get("reason")))


def read_tests(value: object) -> tuple[PythonTest, ...]:
    """A list of PythonTest records (state.json's tested["pythons"], summary.json's
    tested_pythons); () for anything else."""
    if not isinstance(value, list):
        return ()
    found = (PythonTest.from_json(v) for v in value[:MAX_ENTRIES])
    return tuple(t for t in found if t is not None)


def tests_json(tests: Iterable[PythonTest]) -> list[dict[str, object]]:
    return [t.to_json() for t in tests]


def results_text(tests: Iterable[PythonTest]) -> str:
    """`tested on 3.10 passed, 3.11 passed, 3.12 failed` ("" when none)."""
    parts = [f"{t.python} {t.result}" for t in tests]
    return f"tested on {', '.join(parts)}" if parts else ""


__all__ = [
    "KEY",
    "SUMMARY_KEY",
    "PythonTest",
    "read_tests",
    "results_text",
    "tests_json",
]
