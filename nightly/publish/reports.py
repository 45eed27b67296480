"""The night's report published beside the index pages, readable from the bucket.

`<channel folder>/reports/<day>_<machine>.html`, and next to it the logs its links point at:
`<day>_<machine>/logs/failed/<id>.log` (each failed build's log, whole up to MAX_LOG_BYTES)
and `<day>_<machine>/logs/succeeded/<id>.log` (the last TAIL_BYTES of each succeeded one),
secrets masked as in the day folder (plus every secret the night resolved, any value of a
secret-named variable of this process, and passwords in URLs), PEM private-key blocks
removed. The page says which logs were cut. Page and logs carry
Cache-Control (nightly.index.caching). The binary sizes JSON goes to `<channel>/sizes/`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nightly.index import caching
from nightly.redact import SECRET_RE, mask, safe_url, scrub_pem
from nightly.workspace import Day

if TYPE_CHECKING:
    from nightly.history.db import History
    from nightly.stores import Store

TAIL_BYTES = 64 * 1024  # a succeeded build's log: its end is what anyone looks at
MAX_LOG_BYTES = 16 * 1024 * 1024  # a failed build's log: whole, unless it is larger than this
LOG_TYPE = "text/plain; charset=utf-8"


@dataclass(frozen=True, kw_only=True)
class PublishedLog:
    rel: str  # relative to the day folder (as the report links it)
    key: str
    size: int  # of the log in the day folder
    cut: bool  # only its last bytes were published


def stem_of(day: Day, machine: str) -> str:
    return f"{day.name.replace('/', '_')}_{machine}"


def base_of(channel: str) -> str:
    return "whl" if channel == "release" else f"whl/{channel}"


def log_text(path: Path, limit: int, secrets: Sequence[str] = ()) -> tuple[str, bool]:
    """The log's last `limit` bytes (from a line start), masked (`secrets`: the night's
    resolved ones) and without PEM private-key blocks; and whether it was cut."""
    size = path.stat().st_size
    with path.open("rb") as f:
        if size > limit:
            f.seek(size - limit)
            data = f.read()
            data = data[data.find(b"\n") + 1:]
        else:
            data = f.read()
    text = data.decode("utf-8", errors="replace")
    own = [v for k, v in os.environ.items() if SECRET_RE.search(k) and len(v) >= 4]
    text = mask(safe_url(scrub_pem(text)), *own, *secrets)
    if size > limit:
        text = (f"[nightly] this log was cut: its last {len(data)} of {size} bytes; the whole "
                "log is in the build machine's day folder\n") + text
    return text, size > limit


def publish_logs(store: Store, prefix: str, day: Day, cache_control: str,
                 secrets: Sequence[str] = ()) -> list[PublishedLog]:
    """Every finished build's log of the day folder under `prefix/` (its path relative to the
    day folder kept, so the report's relative links work from the bucket)."""
    out = []
    for folder, limit in ((day.failed, MAX_LOG_BYTES), (day.succeeded, TAIL_BYTES)):
        if not folder.is_dir():
            continue
        for log in sorted(folder.glob("*.log")):
            rel = log.relative_to(day.path).as_posix()
            text, cut = log_text(log, limit, secrets)
            key = f"{prefix}/{rel}"
            store.put_bytes(key, text.encode("utf-8"), LOG_TYPE, cache_control=cache_control)
            out.append(PublishedLog(rel=rel, key=key, size=log.stat().st_size, cut=cut))
    return out


def notes(logs: list[PublishedLog]) -> list[str]:
    """What the published page says about its logs."""
    failed = sum(1 for p in logs if p.rel.startswith("logs/failed/"))
    cut = [p for p in logs if p.cut]
    line = (f"Logs published beside this report: {failed} failed build(s) whole, "
            f"{len(logs) - failed} succeeded build(s) as their last {TAIL_BYTES // 1024} KiB.")
    if cut:
        line += " Cut (too large): " + ", ".join(
            f"{Path(p.rel).stem} ({p.size // 1024} KiB)" for p in cut) + "."
    return [line]


# (link base, notes) -> the page: the report as seen from where it is published (rendered by
# nightly.report.html.render_html, a layer above this one, so passed in).
Render = Callable[[str, list[str]], str]


def publish_report(store: Store, day: Day, history: History | None, render: Render, *,
                   channel: str, machine: str, log: Callable[[str], None],
                   secrets: Sequence[str] = ()) -> str:
    """Publish the logs, then the report linking them (so the page never links a log not
    there yet), then the sizes JSON. Returns the page's key."""
    base, stem = base_of(channel), stem_of(day, machine)
    cache_control = caching.for_channel(channel)
    logs = publish_logs(store, f"{base}/reports/{stem}", day, cache_control, secrets)
    page = render(stem, notes(logs))
    key = f"{base}/reports/{stem}.html"
    store.put_bytes(key, page.encode("utf-8"), "text/html; charset=utf-8",
                    cache_control=cache_control)
    if history is not None:
        sizes = json.dumps(history.sizes_json(day.name), indent=1, sort_keys=True)
        store.put_bytes(f"{base}/sizes/{stem}.json", sizes.encode(), "application/json",
                        cache_control=cache_control)
    log(f"report, {len(logs)} logs and sizes published under {store.url}/{base}/")
    return key
