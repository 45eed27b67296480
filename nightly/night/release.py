"""Release builds: `nightly release VERSION [--rc N]` is a night with channel `test` and
BUILD_VERSION=VERSION, in the candidate's own folder (nightly.workspace.candidate), published to
the test destinations; `nightly promote` (nightly.publish.promote) takes it further."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from nightly.config import Config
from nightly.night import pipeline as night
from nightly.workspace.candidate import candidate_name, check_version


def run_release(
    config: Config,
    date: dt.date,
    version: str,
    rc: int | None,
    *,
    machine: str | None,
    dry_run: bool,
    no_upload: bool,
    rebuild: Sequence[str],
) -> None:
    """Build the whole matrix (this machine's share) as VERSION into the candidate's folder."""
    check_version(version)
    m = night.pick_machine(config, machine)
    share = night.plan_share(config, m)
    opts = night.NightOptions(
        machine=m.name, dry_run=dry_run, no_upload=no_upload, rebuild=tuple(rebuild),
        channel="test", version=version, day_name=candidate_name(version, rc),
    )
    night.run_local(
        config, date, share.order, opts, queues=share.queues, plan_json=share.plan_json,
        estimate_s=share.makespan_s, estimates=share.estimates,
    )
