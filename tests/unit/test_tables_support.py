"""tests/support/tables.py: a folded table row read back whole."""

from __future__ import annotations

from tests.support.tables import unfold_tables

FOLDED = """title
┃ build ┃ outcome          ┃ where ┃
│ a_1   │ failed: the      │ m     │
│       │ policy (zig)     │       │
│ b_2   │ succeeded        │ m     │
└───────┴──────────────────┴───────┘
packages (1):"""


def test_a_folded_row_is_one_line_and_other_lines_stay() -> None:
    lines = unfold_tables(FOLDED).splitlines()
    assert lines == ["title", "┃ build ┃ outcome          ┃ where ┃",
                     "│ a_1 │ failed: the policy (zig) │ m │", "│ b_2 │ succeeded │ m │",
                     "└───────┴──────────────────┴───────┘", "packages (1):"]


def test_a_row_that_does_not_fold_is_unchanged_but_for_spacing() -> None:
    assert unfold_tables("│ x │ y │") == "│ x │ y │"
    assert "failed: the policy" not in FOLDED  # what the helper is for
