"""Cluster mode: collecting what the workers report, as it arrives.

The orchestrator (nightly.cluster.orchestrator) hands builds to the scheduler; this follows
them: each attempt's start and end (the workers' events), a worker lost mid-build, a task that
erred or was cancelled, and each result, filed into the day folder with nightly.builds.collect (the
step the local queues end each build with). A rerun after kill -9 adopts attempts that had
finished in staging before the run that submitted them died.
"""

from __future__ import annotations

import shutil
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nightly.builds.collect import collect_build
from nightly.builds.phase import NightContext
from nightly.builds.progress import Progress
from nightly.cluster.dispatch import TaskItem
from nightly.cluster.staging import RESULT_JSON, StagingDay, attempt_prefix
from nightly.cluster.verify import check_packages, sealed
from nightly.errors import PublishError
from nightly.plan.matrix import Build
from nightly.workspace import FAILED, INTERRUPTED, RUNNING, SUCCEEDED, BuildEntry


class Collector:
    """Files the builds of one cluster night as their results come in."""

    def __init__(
        self,
        night: NightContext,
        staging: StagingDay,
        builds: Sequence[Build],
        *,
        version: str,
        rebuild: Callable[[str], bool],
        keep_staging: bool,
        note: Callable[[str], None],
    ) -> None:
        self.night, self.staging, self.day = night, staging, night.day
        self.by_id = {b.id: b for b in builds}
        self.version, self.rebuild, self.keep_staging, self.note = (
            version, rebuild, keep_staging, note)
        self.progress: Progress | None = None
        self.filed: set[str] = set()
        self.current: dict[str, dict[str, Any]] = {}  # build -> its latest start event
        self.lanes: dict[tuple[str, int], int] = {}
        self.given_up: set[str] = set()
        self.interrupting = False
        self.seal_key = b""  # the night's (nightly.cluster.verify): adopted results carry its seal

    def adopt(self, todo: Sequence[Build]) -> set[str]:
        """Builds whose attempt finished in staging (complete result.json, this commit and
        version) before the orchestrator that submitted them died: collected, not rebuilt."""
        adopted: set[str] = set()
        try:
            listing = self.staging.listing()
        except (PublishError, OSError) as e:
            self.note(f"staging: cannot list {self.staging.url}: {e}")
            return adopted
        for b in todo:
            if self.rebuild(b.id):
                continue
            tokens = sorted((t for t, n in listing.get(b.id, {}).items() if RESULT_JSON in n),
                            reverse=True)
            for tok in tokens:
                r = self.staging.read(b.id, tok, RESULT_JSON)
                if (r is None or r.get("status") != SUCCEEDED or r.get("commit") != self.night.commit
                        or r.get("version") != self.version or r.get("build") != b.id
                        or r.get("token") != tok):
                    continue
                if not sealed(self.seal_key, r):
                    self.note(f"not adopted {b.id}: the result.json of attempt {tok} in staging "
                              "does not carry this night's seal (changed in staging, or not "
                              "written by a worker of this night): built again")
                    continue
                self.note(f"adopt  {b.id}: attempt {tok} on {r.get('worker')} had finished "
                          "before the run that submitted it died")
                self.file(b, r)
                adopted.add(b.id)
                break
        return adopted

    # ------------------------------------------------------------------ events and results

    def _lane(self, worker: str, slot: int) -> int:
        return self.lanes.setdefault((worker, slot), len(self.lanes))

    def _progress(self, kind: str, info: Mapping[str, Any]) -> None:
        if self.progress is not None:
            self.progress(kind, info)

    def on_event(self, msg: dict[str, Any]) -> None:
        kind, bid = str(msg.get("kind", "")), str(msg.get("build", ""))
        if bid not in self.by_id or bid in self.filed:
            return
        b, state = self.by_id[bid], self.night.state
        if kind == "start":
            tok, attempt = str(msg.get("token", "")), int(msg.get("attempt") or 1)
            cur = self.current.get(bid)
            if cur is not None:
                if tok < cur["token"] or (tok == cur["token"] and attempt <= cur["attempt"]):
                    return  # a late event of an attempt already superseded
                if tok != cur["token"]:
                    self._lost(b, cur, msg)
            self.current[bid] = {"token": tok, "attempt": attempt, "worker": msg.get("worker")}
            slot = int(msg.get("slot") or 0)
            state.update(
                bid, status=RUNNING, attempts=attempt, started=float(msg.get("started") or
                                                                     time.time()),
                ended=None, machine=str(msg.get("worker")), queue=slot,
                executor=str(msg.get("executor") or ""), reason=None, package=b.package,
                python=b.python, cuda=b.cuda, variant=b.variant,
                worker_name=str(msg.get("worker_name") or ""), host=str(msg.get("host") or ""),
                token=tok,
            )
            self._progress("start", {"build": bid, "attempt": attempt,
                                     "queue": self._lane(str(msg.get("worker")), slot)})
        elif kind == "end":
            if msg.get("status") != SUCCEEDED:  # a local attempt that failed (maybe retried)
                self._record(BuildEntry.from_json({
                    **state.get(bid).to_json(), "status": msg.get("status"),
                    "reason": msg.get("reason"), "ended": time.time(),
                    "duration_s": msg.get("duration_s"), "attempts": msg.get("attempt")}), bid)
        elif kind == "retry":
            self.note(f"retry  {bid} on {msg.get('worker')}: {msg.get('reason')}")
        else:
            self.note(f"{kind} {bid} on {msg.get('worker')}: {msg.get('note', '')}")

    def _lost(self, build: Build, cur: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        reason = (f"attempt on {cur.get('worker')} ended without a result (its worker was lost); "
                  f"run again on {new.get('worker')}")
        self._record(BuildEntry.from_json({
            **self.night.state.get(build.id).to_json(), "status": INTERRUPTED, "reason": reason,
            "ended": time.time(), "attempts": cur.get("attempt")}), build.id)
        self.note(f"lost   {build.id}: {reason}")

    def _record(self, entry: BuildEntry, build_id: str) -> None:
        night = self.night
        try:
            night.history.record(self.day.name, build_id, entry, commit=night.commit,
                                 channel=night.channel)
        except (sqlite3.Error, OSError) as e:
            self.note(f"history: could not record {build_id}: {e}")

    def on_result(self, item: TaskItem, result: dict[str, Any]) -> None:
        """A result returned over the (authenticated) Dask channel: the record staging is
        checked against (verify). It must be this very task's."""
        if (result.get("build") != item.build_id
                or result.get("submission") != getattr(item.spec, "submission", None)):
            self.file_without_result(
                self.by_id[item.build_id], FAILED,
                f"the task returned a result for {result.get('build')!r} (submission "
                f"{result.get('submission')!r}), not for this build's task: not used")
            return
        self.file(self.by_id[item.build_id], result)

    def on_error(self, item: TaskItem, exc: BaseException | None) -> None:
        bid = item.build_id
        if bid in self.filed or bid in self.given_up:
            return
        if exc is None:
            if self.interrupting:
                return
            reason = "its task was cancelled on the scheduler"
        elif type(exc).__name__ == "KilledWorker":
            reason = (f"every worker that ran it died ({exc}): the build may be what kills them "
                      "(out of memory?)")
        else:
            reason = f"worker error: {type(exc).__name__}: {exc}"
        self.file_without_result(self.by_id[bid], FAILED, reason)

    # ------------------------------------------------------------------ filing

    def file(self, build: Build, result: Mapping[str, Any]) -> None:
        """Collect one attempt's result: packages fetched from staging into packages/, the
        log (with any earlier attempts' that died) into logs/succeeded|failed/, then
        state.json and history (nightly.builds.collect)."""
        day, token = self.day, str(result.get("token") or "")
        status = str(result.get("status") or FAILED)
        ok, reason = status == SUCCEEDED, result.get("reason")
        tmp = day.work / build.id / f"fetch-{result.get('token')}"
        files: list[Path] = []
        expected: dict[str, tuple[int, str]] = {}
        infra = bool(result.get("infra"))
        try:
            if ok:
                try:
                    files, expected = self.fetch_packages(result, tmp)
                except (PublishError, OSError, ValueError) as e:
                    ok, reason, infra = False, f"fetching its packages from staging failed: {e}", True
            collect_build(
                day, self.night.state, build, ok=ok, reason=reason, files=files,
                expected=expected, failed_status=FAILED if status == SUCCEEDED else status,
                uncollected=("verifying staging: a package is not the one its worker built (it "
                             "was changed in staging after the build); nothing of it is "
                             "published"),
                infra=infra, infra_if_uncollected=True,
                # A build that failed only in collection: its log says why at the end.
                file_log=lambda filed, why, _packages: self.staging.assemble_log(
                    day, build.id, token, filed, result,
                    reason=str(why or "") if status == SUCCEEDED and not filed else ""),
                exit_status=result.get("exit_status"),
                attempts=int(result.get("attempts") or 1), started=result.get("started"),
                ended=result.get("ended") or time.time(), duration_s=result.get("duration_s"),
                machine=str(result.get("worker") or ""), queue=int(result.get("slot") or 0),
                executor=str(result.get("executor") or ""), package=build.package,
                python=build.python, cuda=build.cuda, variant=build.variant,
                worker_name=str(result.get("worker_name") or ""),
                host=str(result.get("host") or ""), token=token, cache=result.get("cache"),
            )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        entry = self.night.state.get(build.id)
        self._finish(build, entry.status, entry.reason,
                     float(result.get("duration_s") or 0.0),
                     lane=self._lane(str(result.get("worker") or ""), int(result.get("slot") or 0)))

    def file_without_result(self, build: Build, status: str, reason: str) -> None:
        collect_build(
            self.day, self.night.state, build, ok=False, reason=reason, files=(),
            failed_status=status, infra=True,
            file_log=lambda _ok, _reason, _packages: self.staging.assemble_log(
                self.day, build.id, "", False, None, reason=reason),
        )
        self._finish(build, status, reason, 0.0, lane=-1)

    def _finish(self, build: Build, status: str, reason: Any, duration: float, lane: int) -> None:
        self.filed.add(build.id)
        self.current.pop(build.id, None)
        self._record(self.night.state.get(build.id), build.id)
        self._progress("end", {"build": build.id, "status": status, "reason": reason,
                               "duration_s": duration, "queue": lane})
        if not self.keep_staging:
            self.staging.drop(build.id)

    def fetch_packages(
        self, result: Mapping[str, Any], tmp: Path
    ) -> tuple[list[Path], dict[str, tuple[int, str]]]:
        """Download the attempt's packages into `tmp` (in work/, on the day's filesystem, so
        filing them is a rename); with the size and sha256 the worker reported of each."""
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        files, expected = [], {}
        prefix = attempt_prefix(self.day.name, str(result.get("build") or ""),
                                str(result.get("token") or ""))
        for p in check_packages(result, prefix):  # names, keys under the attempt, sha256s
            name = p["name"]
            self.staging.get(p["key"], tmp / name)
            files.append(tmp / name)
            expected[name] = (p["size"], p["sha256"])
        return files, expected


__all__ = ["Collector"]
