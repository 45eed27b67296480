"""Honest counts: a build that succeeded but whose packages did not reach the store is not
plain "succeeded".

One verdict per build, the same wherever it is shown (summary.json's `publication` and
`counts`, `nightly status`, the run table, the report): "published" (its packages are in
their destinations), "not published" (an upload of it failed, or the `[publish] atomic`
gate held it back), or "" (it did not succeed, or publishing was not asked for:
`--no-upload`, no `[publish] url`). A night with a build not published exits 1, as the
counts say.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from nightly.workspace.state import INTERRUPTED, SUCCEEDED, BuildEntry

PUBLISHED, NOT_PUBLISHED = "published", "not published"


def verdict(status: str, upload_error: object, published: object, held_back: bool) -> str:
    """"published", "not published" or "" (see the module's words)."""
    if status != SUCCEEDED:
        return ""
    if upload_error or held_back:
        return NOT_PUBLISHED
    return PUBLISHED if published else ""


def of_entry(bid: str, e: BuildEntry, held_back: Mapping[str, object] | None) -> str:
    return verdict(e.status, e.upload_error, e.published, bid in (held_back or {}))


def counts(outcomes: Iterable[tuple[str, str, str]]) -> dict[str, int]:
    """summary.json's counts of (outcome, tested, publication) per build: succeeded, failed
    (anything else), interrupted, untested (succeeded without a passed test), and of the
    succeeded, published and not_published."""
    rows = list(outcomes)
    ok = [(t, p) for o, t, p in rows if o == SUCCEEDED]
    return {
        "total": len(rows),
        "succeeded": len(ok),
        "failed": len(rows) - len(ok),
        "interrupted": sum(o == INTERRUPTED for o, _, _ in rows),
        "untested": sum(t != "passed" for t, _ in ok),
        "published": sum(p == PUBLISHED for _, p in ok),
        "not_published": sum(p == NOT_PUBLISHED for _, p in ok),
    }


def counts_text(c: Mapping[str, int], *, untested: bool = False) -> str:
    """'(2 published, 2 not published)' after the succeeded count (with `untested`, '(1
    untested, ...)'); '' when there is nothing to say."""
    keys = ("untested", "published", "not_published") if untested else ("published",
                                                                       "not_published")
    parts = [f"{c[k]} {k.replace('_', ' ')}" for k in keys if c.get(k)]
    return f" ({', '.join(parts)})" if parts else ""


__all__ = ["NOT_PUBLISHED", "PUBLISHED", "counts", "counts_text", "of_entry", "verdict"]
