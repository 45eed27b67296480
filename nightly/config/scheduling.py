"""[schedule], [estimates], [timeouts], [retries] and [retention]: how long, how often, how
many times."""

from __future__ import annotations

from nightly.config.reader import Table
from nightly.config.schema import SCHEDULE_MODES, Estimate, Retention
from nightly.core.matrix import PACKAGES, PLATFORMS


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
        history_days=rt.int("history_days", minimum=0),
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


ARCH_NAMES = ("x86_64", "aarch64", "arm64")


def parse_estimates(top: Table) -> dict[str, Estimate]:
    t = top.table("estimates")
    out: dict[str, Estimate] = {}
    for k in t:
        if k not in (*PACKAGES, "default"):
            continue
        sub = t.table(k)
        # A table per architecture (e.g. [estimates.manywheel.aarch64]) overrides the
        # package's figures for builds of that architecture.
        by_arch = {a: _estimate(sub.table(a)) for a in ARCH_NAMES if a in sub}
        out[k] = _estimate(sub, by_arch)
    t.finish(valid=(*PACKAGES, "default"))
    return out


def _estimate(sub: Table, by_arch: dict[str, Estimate] | None = None) -> Estimate:
    """cpu and cuda, and optionally rocm and xpu (default: cuda's)."""
    cuda = sub.duration("cuda")
    est = Estimate(
        cpu_s=sub.duration("cpu"),
        cuda_s=cuda,
        rocm_s=sub.duration("rocm") if sub.get("rocm", default=None) is not None else cuda,
        xpu_s=sub.duration("xpu") if sub.get("xpu", default=None) is not None else cuda,
        by_arch=by_arch or {},
    )
    sub.finish()
    return est
