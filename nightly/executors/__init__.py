"""Executors run one build's recipe somewhere (host, container, cluster worker)."""

from __future__ import annotations

from nightly.executors.base import ExecResult, Executor, Job, OutputSink

__all__ = ["ExecResult", "Executor", "Job", "OutputSink"]
