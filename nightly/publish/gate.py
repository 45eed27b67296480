"""Publication gated on the night's outcomes: `[publish] atomic`.

- "build" (the default): a build's packages are published when it passed, whatever the others
  did (only a failed build's own packages are missing).
- "folder": a folder of the store (`whl/nightly/cu130/`, `libtorch/nightly/cpu/`, or the conda
  channel) gets tonight's packages only when every build of the day destined for it passed, so
  pip never resolves half of tonight's packages next to last week's.
- "night": nothing is published unless every build of the day passed.

A build that passed but is held back is listed, with why, in state.json's meta (`held_back`),
summary.json and the report; `nightly upload --force-partial` publishes it anyway.
"""

from __future__ import annotations

from collections.abc import Mapping

from nightly.errors import ConfigError
from nightly.stores.layout import remote_folder
from nightly.workspace import SUCCEEDED, BuildEntry, State

CONDA = "conda channel"


def destinations(entry: BuildEntry, channel: str) -> set[str]:
    """The folders a build's packages go to, known even when it failed (it has no packages):
    from its package type and CUDA tag, as its packages would be filed."""
    if entry.package == "conda":
        return {CONDA}
    kind = "libtorch" if entry.package == "libtorch" else "whl"
    cudas = {entry.cuda} if entry.cuda else {p.path.split("/")[2] for p in entry.packages
                                              if p.path.count("/") >= 3}
    out = set()
    for cuda in cudas:
        try:
            out.add(remote_folder(kind, channel, cuda))
        except ConfigError:
            continue  # a hand-edited entry: it only ever holds back itself
    return out


def held_back(atomic: str, state: State, channel: str) -> dict[str, str]:
    """build id -> why its packages are not published, for the builds that passed but are held
    back by a failed (or unfinished) build under `atomic`."""
    builds = dict(sorted(state.builds.items()))
    bad = {bid for bid, e in builds.items() if e.status != SUCCEEDED}
    if atomic == "build" or not bad:
        return {}
    if atomic == "night":
        why = f"[publish] atomic = \"night\": {_names(bad)} did not pass"
        return {bid: why for bid in builds if bid not in bad}
    folders = {bid: destinations(e, channel) for bid, e in builds.items()}
    blocked: dict[str, set[str]] = {}  # folder -> the failed builds destined for it
    for bid in bad:
        for folder in folders[bid]:
            blocked.setdefault(folder, set()).add(bid)
    out = {}
    for bid in builds:
        if bid in bad:
            continue
        reasons = [f"{folder}/ waits for {_names(blocked[folder])}"
                   for folder in sorted(folders[bid]) if folder in blocked]
        if reasons:
            out[bid] = "[publish] atomic = \"folder\": " + "; ".join(reasons)
    return out


def _names(ids: set[str]) -> str:
    shown = sorted(ids)
    more = f" and {len(shown) - 3} more" if len(shown) > 3 else ""
    return ", ".join(shown[:3]) + more


def record(state: State, held: Mapping[str, str], *, forced: bool) -> None:
    """state.json's meta: what the last publication held back (empty after --force-partial)."""
    state.set_meta(held_back=dict(held) if held and not forced else None)
