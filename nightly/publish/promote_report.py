"""The release channel's report of a promotion (`nightly promote VERSION [--rc N]`).

One page per release and machine: what was promoted (each build's release files with their
sha256, from the candidate's state.json, so a promotion finished by a rerun lists everything),
from which candidate, when, twine's result, and what the promotion printed. Written to the
candidate's folder as `promote.html` and published beside the release index pages as
`whl/reports/release_VERSION_<machine>.html` (the test channel's candidate report is
`whl/test/reports/release_VERSION-rcN_<machine>.html`). A promotion that changed nothing
leaves a published page as it is.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nightly.index import caching
from nightly.publish.reports import base_of
from nightly.stores import Store
from nightly.workspace import Day, State

PAGE = "promote.html"  # in the candidate's folder


@dataclass(frozen=True, kw_only=True)
class PromoteRecord:
    version: str
    candidate: str  # release/1.2.0-rc1
    machine: str
    when: str  # ISO time of this promotion
    twine: str  # twine's result in words ("" when no index is configured)
    lines: tuple[str, ...]  # what the promotion printed


def report_key(version: str, machine: str) -> str:
    return f"{base_of('release')}/reports/release_{version}_{machine}.html"


def promoted_files(state: State) -> list[tuple[str, str, str]]:
    """(build, destination, sha256) of everything the candidate's state records as promoted."""
    return [(bid, dest, sha) for bid, entry in sorted(state.builds.items())
            for dest, sha in sorted(entry.promoted.items())]


def render(record: PromoteRecord, files: Sequence[tuple[str, str, str]]) -> str:
    e = html.escape
    rows = "\n".join(f"<tr><td>{e(b)}</td><td><code>{e(d)}</code></td><td><code>{e(s)}</code>"
                     "</td></tr>" for b, d, s in files)
    title = f"release {record.version}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:.2em .6em;text-align:left}}
code{{font-size:90%}}pre{{background:#f4f4f4;padding:.6em}}</style></head><body>
<h1>{e(title)}</h1>
<p>Promoted from candidate <b>{e(record.candidate)}</b> (its test channel files, sha256
verified) on machine {e(record.machine)} at {e(record.when)}.</p>
<p>twine: {e(record.twine or "no PyPI-style index configured ([publish.pypi] repository_url)")}</p>
<h2>Promoted files ({len(files)})</h2>
<table><tr><th>build</th><th>where</th><th>sha256</th></tr>
{rows}
</table>
<h2>Output of this promotion</h2>
<pre>{e(chr(10).join(record.lines))}</pre>
</body></html>
"""


def write_report(day: Day, state: State, store: Store | None, record: PromoteRecord, *,
                 changed: bool, log: Callable[[str], None]) -> None:
    """The page into the candidate's folder and, with a store, beside the release index
    pages (unless this promotion changed nothing and the page is there already)."""
    page = render(record, promoted_files(state)).encode("utf-8")
    local = day.path / PAGE
    if changed or not local.exists():
        local.write_bytes(page)
    if store is None:
        log(f"promotion report: {local}")
        return
    key = report_key(record.version, record.machine)
    if not changed and store.head(key) is not None:
        log(f"promotion report unchanged: {store.url}/{key}")
        return
    store.put_bytes(key, page, "text/html; charset=utf-8",
                    cache_control=caching.for_channel("release"))
    log(f"promotion report: {store.url}/{key}")
