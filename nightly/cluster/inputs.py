"""What a cluster night does before it submits: the day's source and the recipes staged as
tarballs (each host fetches them once), and the attempts a killed run left on the workers
waited for (a finished one is adopted, not built twice). Used by nightly.cluster.orchestrator."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nightly.builds.run.phase import NightContext
from nightly.cluster.host import running_attempts
from nightly.cluster.staging import StagingDay, inputs_key, make_tarball
from nightly.core.matrix import Build
from nightly.errors import NightlyError, PublishError
from nightly.jsonvalues import read_json_object
from nightly.workspace import write_json

LEFTOVER_WAIT_S = 60.0  # how long a rerun waits for a killed run's attempts to stop


def stage_inputs(night: NightContext, recipes: Path, cache: Path,
                 staging: StagingDay) -> tuple[str, str]:
    """The day's source and the recipes, as tarballs in staging; their sha256s. The source
    tarball (in `cache`, the day's work/cluster/) is made once per checkout."""
    day_name = night.day.name
    src_tar, meta_path = cache / "source.tar.gz", cache / "source.json"
    meta = read_json_object(meta_path)
    ident = {"commit": night.commit, "describe": night.source_describe}
    if src_tar.exists() and {k: meta.get(k) for k in ident} == ident and meta.get("sha256"):
        source_sha = str(meta["sha256"])
    else:
        source_sha = make_tarball(night.source_dir, src_tar)
        write_json(meta_path, {**ident, "sha256": source_sha})
    recipes_tar = cache / "recipes.tar.gz"
    recipes_sha = make_tarball(recipes, recipes_tar)
    store = staging.store
    try:
        store.ensure(inputs_key(day_name, "source", source_sha), src_tar, source_sha)
        store.ensure(inputs_key(day_name, "recipes", recipes_sha), recipes_tar, recipes_sha)
    except (PublishError, OSError) as e:
        raise NightlyError(f"cannot write to the staging store {store.url}: {e}") from e
    return source_sha, recipes_sha


def wait_for_leftovers(client: Any, todo: Sequence[Build], *, day_name: str, topic: str,
                       note: Callable[[str], None], wait_s: float = LEFTOVER_WAIT_S) -> None:
    """Attempts that a killed run left on the workers stop by themselves within seconds
    (their task was released) or finish: wait for them, so a finished one is adopted
    rather than built a second time beside it."""
    ids = {b.id for b in todo}
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        try:
            per_worker = client.run(running_attempts)
        except Exception as e:
            note(f"cannot ask the workers what they run: {e}")
            return
        left = sorted({a["build"] for attempts in per_worker.values() for a in attempts
                       if a.get("day") == day_name and a.get("topic") != topic
                       and a.get("build") in ids})
        if not left or time.monotonic() > deadline:
            if left:
                note(f"still running after {wait_s:g} s, built again: {', '.join(left)}")
            return
        if not said:
            note(f"waiting for {len(left)} attempt(s) a previous run left on the "
                 f"workers to stop or finish: {', '.join(left)}")
            said = True
        time.sleep(0.5)


__all__ = ["LEFTOVER_WAIT_S", "stage_inputs", "wait_for_leftovers"]
