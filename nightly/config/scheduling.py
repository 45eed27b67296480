"""[schedule], [estimates], [timeouts], [retries] and [retention]: how long, how often, how
many times."""

from __future__ import annotations

from nightly.config.reader import Table
from nightly.config.schema import SCHEDULE_MODES, Estimate, Retention
from nightly.plan.matrix import PACKAGES, PLATFORMS


def parse_schedule(top: Table) -> tuple[str, str]:
    """(mode, history_estimates)."""
    sched = top.table("schedule")
    mode = sched.choice("mode", SCHEDULE_MODES)
    history_estimates = sched.choice("history_estimates", ("auto", "always", "never"))
    sched.finish()
    return mode, history_estimates


def parse_retries(top: Table) -> tuple[int, int]:
    """(infra, recipe)."""
    ret = top.table("retries")
    retries = ret.int("infra", minimum=0), ret.int("recipe", minimum=0)
    ret.finish()
    return retries


def parse_retention(top: Table) -> Retention:
    rt = top.table("retention")
    retention = Retention(
        local_days=rt.int("local_days", minimum=1),
        remote_versions=rt.int("remote_versions", minimum=0),
        remote_days=rt.int("remote_days", minimum=0),
        index_versions=rt.int("index_versions", minimum=0),
    )
    rt.finish()
    return retention


def parse_timeouts(top: Table) -> dict[str, dict[str, float]]:
    t = top.table("timeouts")
    out: dict[str, dict[str, float]] = {"": {}}
    names = (*PACKAGES, "default")
    for k in t:
        if k in PLATFORMS:
            sub = t.table(k)
            out[k] = {p: sub.duration(p) for p in sub if p in names}
            sub.finish(valid=names)
        elif k in names:
            out[""][k] = t.duration(k)
    t.finish(valid=(*names, *PLATFORMS))
    return out


def parse_estimates(top: Table) -> dict[str, Estimate]:
    t = top.table("estimates")
    out: dict[str, Estimate] = {}
    for k in t:
        if k not in (*PACKAGES, "default"):
            continue
        sub = t.table(k)
        out[k] = Estimate(cpu_s=sub.duration("cpu"), cuda_s=sub.duration("cuda"))
        sub.finish()
    t.finish(valid=(*PACKAGES, "default"))
    return out
