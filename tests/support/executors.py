"""An executor for unit tests: records each job it is given and returns a fixed exit status,
running nothing."""

from __future__ import annotations

import threading

from nightly.executors.base import ExecResult, Executor, Job, OutputSink


class RecordingExecutor(Executor):
    def __init__(self, name: str = "fake", exit_status: int = 0) -> None:
        self.name = name  # "container" where the code under test asks which image a job uses
        self.exit_status = exit_status
        self.jobs: list[Job] = []

    def describe(self, job: Job) -> dict[str, object]:
        return {}

    def run(self, job: Job, out: OutputSink, cancel: threading.Event) -> ExecResult:
        self.jobs.append(job)
        return ExecResult(exit_status=self.exit_status)
