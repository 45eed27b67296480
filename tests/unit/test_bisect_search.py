"""nightly.bisect's search: the commit it picks for given verdicts, skips, the steps file."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from nightly.bisect.search import (
    BAD,
    GOOD,
    SKIP,
    Step,
    append_step,
    most_builds,
    narrow,
    next_commit,
    read_steps,
)


def run(n: int, first_bad: int, skips: set[int] = frozenset()) -> tuple[int | None, list[int]]:  # type: ignore[assignment]
    """Bisect candidates 0..n-1 (the last known bad) whose first bad is `first_bad`."""
    cands = [f"c{i}" for i in range(n)]
    verdicts = {cands[-1]: BAD}
    tried = []
    while (c := next_commit(cands, verdicts)) is not None:
        i = int(c[1:])
        tried.append(i)
        verdicts[c] = SKIP if i in skips else (BAD if i >= first_bad else GOOD)
    nb = narrow(cands, verdicts)
    return (nb.bad if nb.found else None), tried


@pytest.mark.parametrize("first_bad", range(64))
def test_every_first_bad_of_64_is_found_in_log2_builds(first_bad: int) -> None:
    found, tried = run(64, first_bad)
    assert found == first_bad
    assert len(tried) <= math.ceil(math.log2(64)) == most_builds(64)
    assert len(set(tried)) == len(tried)


def test_a_skipped_middle_costs_one_build() -> None:
    found, tried = run(64, 44, skips={31})
    assert found == 44
    assert tried[:2] == [31, 30]  # the middle, then the closest untried commit
    assert len(tried) <= most_builds(64) + 1


def test_skips_next_to_the_first_bad_leave_a_range() -> None:
    cands = [f"c{i}" for i in range(8)]
    verdicts = {"c7": BAD, "c2": GOOD, "c3": SKIP, "c4": BAD}
    assert next_commit(cands, verdicts) is None
    nb = narrow(cands, verdicts)
    assert (nb.good, nb.bad, nb.skipped, nb.found) == (2, 4, (3,), False)


def test_steps_file_survives_a_torn_last_line(tmp_path: Path) -> None:
    append_step(tmp_path, Step(commit="a", verdict=GOOD, log="x"))
    with (tmp_path / "steps.jsonl").open("a") as f:
        f.write('{"commit": "b", "verd')  # kill -9 mid-write
    append_step(tmp_path, Step(commit="c", verdict=BAD))
    assert [s.commit for s in read_steps(tmp_path)] == ["a", "c"]
