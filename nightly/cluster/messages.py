"""What a worker tells the orchestrator, as typed records with their JSON form.

Three messages cross from a worker to the orchestrator:

- `AttemptResult`: a build attempt's outcome. It is the task's return value over the
  authenticated Dask channel, and the attempt's `result.json` in staging (written last),
  which a later orchestrator adopts only when it carries the night's seal
  (nightly.cluster.verify). The seal covers the JSON form, so `to_json` is the one place that
  form is made.
- `GpuTestResult`: the same for the GPU part of a CUDA build's test, a task of its own on a
  GPU worker (nightly.cluster.gputest), which `GpuTestSpec` describes.
- `WorkerEvent`: a progress event on the orchestrator's topic (start, end, retry, note...).

`from_json` reads what a worker (or staging, which is untrusted) wrote: missing fields take
their defaults and values are coerced to their types, never trusted as given.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from nightly.cluster.staging import StagingSpec
from nightly.config import Config
from nightly.core.matrix import Build
from nightly.jsonvalues import as_float, as_int, as_str, opt_int, opt_str
from nightly.workspace import FAILED
from nightly.workspace.records import CacheStats, TestPart, TestRecord


@dataclass(frozen=True, kw_only=True)
class StagedPackage:
    """A package as its worker recorded it: name, size, sha256, and its staging key."""

    name: str
    size: int
    sha256: str
    key: str

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "size": self.size, "sha256": self.sha256, "key": self.key}


@dataclass(frozen=True, kw_only=True)
class AttemptResult:
    """One attempt's outcome, as its worker reports it."""

    build: str
    token: str
    submission: str | None = None
    worker: str = ""
    worker_name: str = ""
    host: str = ""
    slot: int = 0
    status: str = FAILED
    reason: str | None = None
    exit_status: int | None = None
    infra: bool = False
    attempts: int = 1
    started: float | None = None
    ended: float | None = None
    duration_s: float = 0.0
    executor: str = ""
    # Raw records: nightly.cluster.verify.check_packages validates them against the attempt.
    # None: what the worker sent was not a list (check_packages says so).
    packages: tuple[Mapping[str, object], ...] | None = ()
    log_key: str = ""
    log_sha256: str = ""
    log_chunks: int = 0
    commit: str | None = None
    version: str = ""
    channel: str = ""
    cache: CacheStats | None = None  # the compiler cache's statistics
    # state.json's `tested` as the worker recorded it (with gpu_smoke: the CPU part only)
    tested: TestRecord | None = None
    seal: str | None = None  # HMAC of every other field (nightly.cluster.verify.seal)

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "build": self.build, "token": self.token, "submission": self.submission,
            "worker": self.worker, "worker_name": self.worker_name, "host": self.host,
            "slot": self.slot, "status": self.status, "reason": self.reason,
            "exit_status": self.exit_status, "infra": self.infra, "attempts": self.attempts,
            "started": self.started, "ended": self.ended, "duration_s": self.duration_s,
            "executor": self.executor,
            "packages": None if self.packages is None else [dict(p) for p in self.packages],
            "log_key": self.log_key, "log_sha256": self.log_sha256,
            "log_chunks": self.log_chunks, "commit": self.commit, "version": self.version,
            "channel": self.channel,
            "cache": None if self.cache is None else self.cache.to_json(),
            "tested": None if self.tested is None else self.tested.to_json(),
        }
        if self.seal is not None:
            data["seal"] = self.seal
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> AttemptResult:
        packages = data.get("packages") or []
        return cls(
            build=as_str(data.get("build")), token=as_str(data.get("token")),
            submission=opt_str(data.get("submission")), worker=as_str(data.get("worker")),
            worker_name=as_str(data.get("worker_name")), host=as_str(data.get("host")),
            slot=as_int(data.get("slot")), status=as_str(data.get("status"), FAILED),
            reason=opt_str(data.get("reason")), exit_status=opt_int(data.get("exit_status")),
            infra=bool(data.get("infra")), attempts=as_int(data.get("attempts"), 1) or 1,
            started=None if data.get("started") is None else as_float(data.get("started")),
            ended=None if data.get("ended") is None else as_float(data.get("ended")),
            duration_s=as_float(data.get("duration_s")), executor=as_str(data.get("executor")),
            packages=tuple(packages) if isinstance(packages, list) else None,
            log_key=as_str(data.get("log_key")), log_sha256=as_str(data.get("log_sha256")),
            log_chunks=as_int(data.get("log_chunks")), commit=opt_str(data.get("commit")),
            version=as_str(data.get("version")), channel=as_str(data.get("channel")),
            cache=CacheStats.from_json(data.get("cache")),
            tested=TestRecord.from_json(data.get("tested")),
            seal=opt_str(data.get("seal")),
        )


@dataclass(frozen=True, kw_only=True)
class GpuTestSpec:
    """What a GPU worker needs to test one build's packages (nightly.cluster.gputest)."""

    config: Config  # the night's, as a build task carries it
    build: Build
    day: str
    date: dt.date
    version: str
    channel: str
    commit: str
    executor: str  # local | container: the build's
    keep_container: bool
    staging: StagingSpec
    source_key: str  # the day's source: the test's environment is the build's (make_job)
    source_sha256: str
    source_size: int
    build_token: str  # the build attempt whose packages are tested
    # The packages as the build's worker reported them (over the authenticated channel):
    # each is fetched from staging and checked against its size and sha256 before testing.
    packages: tuple[StagedPackage, ...]
    submission: str  # unique per submission
    topic: str
    log_flush_s: float
    seal_key: bytes = field(default=b"", repr=False)  # never in a repr, as TaskSpec's


@dataclass(frozen=True, kw_only=True)
class GpuTestResult:
    """The GPU part of one build's test, as its worker reports it."""

    build: str
    token: str  # this test attempt's
    build_token: str = ""  # the build attempt whose packages it tested
    submission: str | None = None
    worker: str = ""
    worker_name: str = ""
    host: str = ""
    result: str = FAILED  # passed | failed | not run (nightly.builds.test.smoke)
    reason: str | None = None
    part: TestPart | None = None  # state.json's tested.gpu
    started: float | None = None
    ended: float | None = None
    log_key: str = ""
    log_sha256: str = ""
    log_chunks: int = 0
    commit: str | None = None
    version: str = ""
    seal: str | None = None

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "build": self.build, "token": self.token, "build_token": self.build_token,
            "submission": self.submission, "worker": self.worker,
            "worker_name": self.worker_name, "host": self.host, "result": self.result,
            "reason": self.reason, "part": None if self.part is None else self.part.to_json(),
            "started": self.started, "ended": self.ended, "log_key": self.log_key,
            "log_sha256": self.log_sha256, "log_chunks": self.log_chunks,
            "commit": self.commit, "version": self.version,
        }
        if self.seal is not None:
            data["seal"] = self.seal
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> GpuTestResult:
        return cls(
            build=as_str(data.get("build")), token=as_str(data.get("token")),
            build_token=as_str(data.get("build_token")),
            submission=opt_str(data.get("submission")), worker=as_str(data.get("worker")),
            worker_name=as_str(data.get("worker_name")), host=as_str(data.get("host")),
            result=as_str(data.get("result"), FAILED), reason=opt_str(data.get("reason")),
            part=TestPart.from_json(data.get("part")),
            started=None if data.get("started") is None else as_float(data.get("started")),
            ended=None if data.get("ended") is None else as_float(data.get("ended")),
            log_key=as_str(data.get("log_key")), log_sha256=as_str(data.get("log_sha256")),
            log_chunks=as_int(data.get("log_chunks")), commit=opt_str(data.get("commit")),
            version=as_str(data.get("version")), seal=opt_str(data.get("seal")),
        )


@dataclass(frozen=True, kw_only=True)
class WorkerEvent:
    """A progress event of an attempt, on the orchestrator's topic."""

    kind: str  # start | end | retry | note | ...
    build: str
    token: str = ""
    worker: str = ""
    worker_name: str = ""
    host: str = ""
    slot: int = 0
    attempt: int = 1
    started: float = field(default_factory=time.time)
    executor: str = ""
    status: str = ""
    reason: str | None = None
    duration_s: float = 0.0
    note: str = ""
    extra: Mapping[str, object] = field(default_factory=dict)  # other fields of other kinds

    _FIELDS = ("build", "token", "worker", "worker_name", "host", "slot", "attempt", "started",
               "executor", "status", "reason", "duration_s", "note")

    def to_json(self) -> dict[str, object]:
        return {**self.extra, "kind": self.kind,
                **{name: getattr(self, name) for name in self._FIELDS}}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> WorkerEvent:
        return cls(
            kind=as_str(data.get("kind")), build=as_str(data.get("build")),
            token=as_str(data.get("token")), worker=as_str(data.get("worker")),
            worker_name=as_str(data.get("worker_name")), host=as_str(data.get("host")),
            slot=as_int(data.get("slot")), attempt=as_int(data.get("attempt"), 1) or 1,
            started=as_float(data.get("started"), time.time()),
            executor=as_str(data.get("executor")), status=as_str(data.get("status")),
            reason=opt_str(data.get("reason")), duration_s=as_float(data.get("duration_s")),
            note=as_str(data.get("note")),
            extra={k: v for k, v in data.items() if k not in cls._FIELDS and k != "kind"},
        )


__all__ = ["AttemptResult", "GpuTestResult", "GpuTestSpec", "StagedPackage", "WorkerEvent"]
