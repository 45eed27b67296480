"""The typed records a build's state.json entry carries between the stages of the night: its
test stage (`tested`, nightly.builds.test.smoke) and its compiler cache's statistics (`cache`,
nightly.builds.cache.wiring); the manylinux record (`manylinux`) is nightly.core.manylinux.ManylinuxRecord.

Each reads its JSON form leniently (a day folder written by another version, or damaged): a
value of the wrong type reads as unset, a part that is not an object as absent, keys this
version does not know are kept (`extra`) and written back. `to_json` writes the form
state.json has always had, key for key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from nightly.jsonvalues import as_float, as_int, as_str, opt_int, opt_str
from nightly.workspace.pythontests import KEY as PYTHONS_KEY
from nightly.workspace.pythontests import PythonTest, read_tests, tests_json

PASSED, FAILED, NOT_RUN = "passed", "failed", "not run"

_PART_KEYS = ("result", "where", "when", "seconds", "attempts", "reason", "worker_name")
_TESTED_KEYS = ("result", "seconds", "cpu", "gpu", PYTHONS_KEY)
_CACHE_KEYS = ("hits", "misses", "requests", "errors", "where", "off", "hit_rate", "uncached",
               "uncached_why")


def _extra(data: Mapping[str, object], known: tuple[str, ...]) -> dict[str, object]:
    return {str(k): v for k, v in data.items() if k not in known}


@dataclass(frozen=True, kw_only=True)
class TestPart:
    """One part of a build's test (state.json's `tested.cpu` or `tested.gpu`)."""

    __test__ = False  # not a pytest class

    result: str  # passed, failed, not run
    where: str = ""  # the machine (or cluster worker's address) it ran on
    when: str = ""  # when it started (ISO time)
    seconds: float = 0.0
    attempts: int | None = None  # written for a part that ran
    reason: str | None = None
    worker_name: str = ""  # a cluster GPU worker's --name
    extra: Mapping[str, object] = field(default_factory=dict)

    @property
    def ran(self) -> bool:
        return self.result != NOT_RUN

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {**self.extra, "result": self.result, "where": self.where,
                                  "when": self.when, "seconds": self.seconds}
        if self.attempts is not None:
            out["attempts"] = self.attempts
        if self.reason:
            out["reason"] = self.reason
        if self.worker_name:
            out["worker_name"] = self.worker_name
        return out

    @classmethod
    def from_json(cls, data: object) -> TestPart | None:
        if not isinstance(data, Mapping):
            return None
        return cls(result=as_str(data.get("result")), where=as_str(data.get("where")),
                   when=as_str(data.get("when")), seconds=as_float(data.get("seconds")),
                   attempts=opt_int(data.get("attempts")), reason=opt_str(data.get("reason")),
                   worker_name=as_str(data.get("worker_name")), extra=_extra(data, _PART_KEYS))


@dataclass(frozen=True, kw_only=True)
class TestRecord:
    """A build's test stage (state.json's `tested`): the overall result, its seconds, each
    part, and a limited-API build's result per Python."""

    __test__ = False  # not a pytest class

    result: str = ""  # passed, failed, not run
    seconds: float = 0.0
    cpu: TestPart | None = None
    gpu: TestPart | None = None
    pythons: tuple[PythonTest, ...] = ()
    extra: Mapping[str, object] = field(default_factory=dict)

    @property
    def parts(self) -> tuple[TestPart, ...]:
        """The parts recorded, the CPU part first."""
        return tuple(p for p in (self.cpu, self.gpu) if p is not None)

    @classmethod
    def of(cls, cpu: TestPart, gpu: TestPart | None,
           pythons: tuple[PythonTest, ...] = ()) -> TestRecord:
        """Failed if a part failed; not run if the GPU part (required) was not run; else
        passed. The seconds are the parts' together."""
        results = [p.result for p in (cpu, gpu) if p is not None]
        overall = FAILED if FAILED in results else NOT_RUN if NOT_RUN in results else PASSED
        seconds = round(cpu.seconds + (gpu.seconds if gpu is not None else 0.0), 3)
        return cls(result=overall, seconds=seconds, cpu=cpu, gpu=gpu, pythons=pythons)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {**self.extra, "result": self.result, "seconds": self.seconds}
        if self.cpu is not None:
            out["cpu"] = self.cpu.to_json()
        if self.gpu is not None:
            out["gpu"] = self.gpu.to_json()
        if self.pythons:
            out[PYTHONS_KEY] = tests_json(self.pythons)
        return out

    @classmethod
    def from_json(cls, data: object) -> TestRecord | None:
        if not isinstance(data, Mapping):
            return None
        return cls(result=as_str(data.get("result")), seconds=as_float(data.get("seconds")),
                   cpu=TestPart.from_json(data.get("cpu")),
                   gpu=TestPart.from_json(data.get("gpu")),
                   pythons=read_tests(data.get(PYTHONS_KEY)), extra=_extra(data, _TESTED_KEYS))


@dataclass(frozen=True, kw_only=True)
class CacheStats:
    """What a build's sccache server did (or why there was none): state.json's `cache`."""

    hits: int = 0
    misses: int = 0
    requests: int = 0  # compile requests (all calls that looked like a compile)
    errors: int = 0  # cache read/write errors (the compiles still happened)
    where: str = ""
    off: str | None = None  # why the build ran without the cache
    extra: Mapping[str, object] = field(default_factory=dict)
    uncached: int = 0  # compiles the cache cannot take (Fortran), compiled directly
    uncached_why: str = ""  # why ("Fortran: sccache caches no Fortran compiles")

    @property
    def hit_rate(self) -> float | None:
        total = self.hits + self.misses
        return self.hits / total if total else None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {**self.extra, "hits": self.hits, "misses": self.misses,
                                  "requests": self.requests, "errors": self.errors,
                                  "where": self.where}
        rate = self.hit_rate
        out["hit_rate"] = None if rate is None else round(rate, 4)
        if self.off is not None:
            out["off"] = self.off
        if self.uncached:
            out["uncached"], out["uncached_why"] = self.uncached, self.uncached_why
        return out

    @classmethod
    def from_json(cls, data: object) -> CacheStats | None:
        if not isinstance(data, Mapping):
            return None
        return cls(hits=as_int(data.get("hits")), misses=as_int(data.get("misses")),
                   requests=as_int(data.get("requests")), errors=as_int(data.get("errors")),
                   where=as_str(data.get("where")), off=opt_str(data.get("off")),
                   uncached=as_int(data.get("uncached")),
                   uncached_why=as_str(data.get("uncached_why")),
                   extra=_extra(data, _CACHE_KEYS))

    def footer(self) -> str:
        if self.off is not None:
            return f"off ({self.off})"
        rate = self.hit_rate
        pct = "-" if rate is None else f"{rate:.0%}"
        text = (f"{self.hits} hits, {self.misses} misses, {self.requests} compile requests "
                f"({pct} hit rate); {self.where}")
        if self.errors:
            text += f"; {self.errors} cache errors (compiled without the cache)"
        if self.uncached:
            text += (f"; {self.uncached} compile{'s' if self.uncached != 1 else ''} not cached "
                     f"({self.uncached_why or 'the cache cannot take them'})")
        return text


__all__ = ["FAILED", "NOT_RUN", "PASSED", "CacheStats", "TestPart", "TestRecord"]
