"""Failure facts (nightly.history.triage): new vs still failing, last good / first bad, signatures."""

from __future__ import annotations

import pytest

from nightly.history.triage import (
    FailureFacts,
    NightOutcome,
    facts,
    groups,
    normalise,
    signature,
    subject_counts,
)

RULE = "=" * 78


def log(build_id: str, output: str, reason: str = "recipe failed with exit status 1") -> str:
    head = f"{RULE}\nnightly build {build_id}  (attempt 1)\nwhere:    host\n{RULE}\n\n"
    foot = f"\n{RULE}\nresult:      FAILED\nexit status: 1\nreason:      {reason}\n{RULE}\n"
    return head + output + foot


def n(day: str, outcome: str, commit: str = "") -> NightOutcome:
    return NightOutcome(day=day, outcome=outcome, commit=commit or f"c{day[-2:]}")


def test_new_failure_after_a_good_night() -> None:
    f = facts("b", n("2026_11_23", "failed"), [n("2026_11_22", "succeeded"), n("2026_11_21", "failed")])
    assert f.new
    assert f.nights == 1
    assert f.since == "2026_11_23"
    assert (f.last_good, f.last_good_commit, f.first_bad_commit) == ("2026_11_22", "c22", "c23")
    assert f.headline() == "new"


def test_still_failing_counts_the_nights_and_skips_interrupted_ones() -> None:
    earlier = [n("2026_11_20", "succeeded"), n("2026_11_21", "failed"),
               n("2026_11_22", "interrupted"), n("2026_11_23", "failed"),
               n("2026_11_25", "succeeded")]  # after tonight: ignored
    f = facts("b", n("2026_11_24", "failed"), earlier)
    assert not f.new
    assert f.nights == 3
    assert f.since == "2026_11_21"
    assert f.first_bad_commit == "c21"
    assert f.last_good == "2026_11_20"
    assert f.headline() == "still failing since 2026_11_21 (3 nights)"


def test_never_built_before_is_new_without_a_good_night() -> None:
    f = facts("b", n("2026_11_24", "failed"), [])
    assert f.new
    assert f.last_good is None
    assert f.to_json()["last_good"] is None


def test_compiler_errors_on_other_machines_share_a_signature() -> None:
    a = log("x", "building\n/home/a/src/cuda/host.h:3:10: fatal error: cuda_fp8.h: No such file"
                 " or directory\nerror: command '/usr/bin/gcc' failed with exit code 1\n")
    b = log("y", "In file included from /tmp/tmpab12cd/cuda/host.c:1:\n/tmp/tmpab12cd/cuda/host.h:"
                 "7:10: fatal error: cuda_fp8.h: No such file or directory\n")
    assert signature(a, "x") == signature(b, "y") == "fatal error: cuda_fp8.h: No such file or directory"


def test_traceback_stands_for_its_exception_and_addresses_are_removed() -> None:
    text = log("x", 'Traceback (most recent call last):\n  File "/a/b.py", line 3, in <module>\n'
                    "    f()\nRuntimeError: bad pointer 0x7ffe12ab in /build/tmpq1w2e3r4/x.so\n")
    assert signature(text, "x") == "RuntimeError: bad pointer 0x? in x.so"


@pytest.mark.parametrize(("line", "want"), [
    ("CMake Error at /src/CMakeLists.txt:12 (find_package):",
     "CMake Error at CMakeLists.txt (find_package):"),
    ("src/native.c:10:5: error: expected ';' before '}' token", "error: expected ';' before '}' token"),
])
def test_normalise(line: str, want: str) -> None:
    assert normalise(line) == want


def test_no_error_line_falls_back_to_the_footer_reason() -> None:
    text = log("x", "all fine\n", reason="smoke test: import nightlydemo failed")
    assert signature(text, "x") == "smoke test: import nightlydemo failed"


def test_groups_and_subject() -> None:
    fs = [FailureFacts(build_id=b, day="d", new=b != "c", since="d", nights=1,
                       first_bad_commit="", signature=s)
          for b, s in (("a", "E1"), ("b", "E1"), ("c", "E2"))]
    assert [(s, [f.build_id for f in g]) for s, g in groups(fs)] == [("E1", ["a", "b"]), ("E2", ["c"])]
    assert subject_counts({"failures": {"new": 3, "still_failing": 2}}) == "3 new failures, 2 still failing"
    assert subject_counts({"failures": {"new": 0, "still_failing": 0}}) is None
