"""The executor interface shared by the local, container and cluster executors.

The runner owns everything around a build (the log file with its header and footer, moving
the log, collecting packages from `output_dir`, state). An executor only runs the recipe:
it streams the build's combined stdout/stderr to `out` as it comes and returns the verdict.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Protocol


class CompilerCache(Protocol):
    """What an executor needs of a build's compiler cache (nightly.builds.cache.wiring.BuildCache is
    the one implementation; the executors sit below the build layer and only see this)."""

    def env(self, *, container: bool) -> dict[str, str]: ...

    def command(self, recipe: str, *, container: bool) -> list[str]: ...

    def mounts(self) -> list[tuple[str, str, bool]]: ...

# Called with each chunk of the build's output as it arrives. Thread-safe per build.
OutputSink = Callable[[bytes], None]


@dataclass(frozen=True, kw_only=True)
class Job:
    """One build, ready to run. Paths are host paths."""

    build_id: str
    package: str
    python: str
    cuda: str
    # The recipe environment (docs/recipes.md) *without* the path variables (SOURCE_DIR, OUTPUT_DIR):
    # those differ between host and container, so each executor adds them itself.
    env: Mapping[str, str]
    recipes_dir: Path  # recipes/; the recipe is recipes_dir / package / "build.sh"
    source_dir: Path  # read-only checkout
    output_dir: Path  # empty, this build's own; finished packages go here
    work_dir: Path  # scratch, this build's own
    timeout_s: float
    image: str | None = None  # container image, when the executor uses one
    memory_limit: str | None = None  # e.g. "8g", container executor
    gpu: bool = False  # request GPU access (smoke tests on GPU hosts only)
    cache: CompilerCache | None = None  # the compiler cache (nightly.builds.cache.wiring.attach)
    # A build user's build area (its root): the build runs in a box that shows it only its
    # own folders of the area's nights/ (nightly.executors.box).
    area: Path | None = None

    @property
    def recipe(self) -> Path:
        return self.recipes_dir / self.package / "build.sh"


@dataclass(frozen=True, kw_only=True)
class ExecResult:
    """What happened. `exit_status` is the recipe's status when it ran to the end."""

    exit_status: int | None
    # Why it failed, in words for the log: "timeout after 4800 s", "out of memory",
    # "interrupted", "python 3.7 not found: looked in ...". None when the recipe decided.
    reason: str | None = None
    # An infrastructure failure (timeout, killed, executor error) may be retried;
    # a recipe's own non-zero exit is not (unless configured).
    infra: bool = False
    interrupted: bool = False
    # Extra lines for the log footer (e.g. the container id kept with --keep-container).
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return self.exit_status == 0 and self.reason is None


class Executor(ABC):
    """Run builds. Use as a context manager: __exit__ always cleans up what it started."""

    name: str = "executor"

    def __enter__(self) -> Executor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; stop anything still running."""

    def preflight(self, jobs: Sequence[Job]) -> None:  # noqa: B027 - optional hook
        """Check before a night starts (images present, engine reachable).

        Raise ExecutorError with one message listing every problem and the builds it hits.
        """

    def reap(self, job: Job) -> list[str]:
        """Stop whatever a run that died (kill -9) left running of this job (processes,
        containers), before the job runs again. Returns lines for the master log."""
        return []

    @abstractmethod
    def describe(self, job: Job) -> dict[str, object]:
        """For --dry-run: where and how the job would run (host or image, command, env)."""

    @abstractmethod
    def run(self, job: Job, out: OutputSink, cancel: threading.Event) -> ExecResult:
        """Run the recipe to completion, timeout or cancel.

        Must not raise for a build's own failure; an infrastructure problem is returned as
        ExecResult(exit_status=None, reason=..., infra=True). When `cancel` is set, stop
        the build promptly and return with interrupted=True.
        """
