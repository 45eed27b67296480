"""Running builds, written once: the executor opened, its preflight, the smoke tester, the
Runner. The local build phase (builds.local_phase), a cluster worker (cluster.worker) and a
bisect step (bisect.run) all run their builds through `run_builds`; what differs between them
is passed in: the preflight (a worker also checks the image its tests run in), the smoke test
(a worker's may leave the GPU part to a GPU worker), and what is done with the Runner (a phase
runs queues, a worker and a bisect step one build).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from nightly.builds.jobs import RunContext, make_job
from nightly.builds.runner import EventSink, Runner, SmokeHook
from nightly.core.matrix import Build
from nightly.errors import NightlyError
from nightly.executors import Executor, make_executor

# (the run's context, the executor, the builds about to run): raises NightlyError when this
# executor cannot run them here (a missing image, an unreachable engine).
Preflight = Callable[[RunContext, Executor, Sequence[Build]], None]
# (the run's context, the executor, the builds) -> the context they run in (e.g. a build
# user's build area: nightly.builds.userarea); raises NightlyError when they cannot run.
Prepare = Callable[[RunContext, Executor, Sequence[Build]], RunContext]
# The executor -> the smoke test of each build's packages (None: no smoke test).
SmokeMaker = Callable[[Executor], "SmokeHook | None"]


def preflight_images(ctx: RunContext, ex: Executor, builds: Sequence[Build]) -> None:
    """The night's check: every declared builder image the builds need is on the engine (a
    missing one names its build command), then the executor's own look at their jobs."""
    if ex.name == "container":
        from nightly.images.commands import preflight

        preflight(ctx.config, builds)
    ex.preflight([make_job(ctx, b, executor=ex.name) for b in builds])


def preflight_with_test_images(ctx: RunContext, ex: Executor, builds: Sequence[Build]) -> None:
    """A cluster worker's check: the executor's look at each build's job and, when the build's
    tests run in another image, at that image too (nightly.builds.smoke.preflight_jobs)."""
    from nightly.builds.smoke import preflight_jobs

    ex.preflight([job for b in builds
                  for job in preflight_jobs(ctx.config, b, make_job(ctx, b, executor=ex.name))])


def run_builds(
    ctx: RunContext,
    executor: str,
    builds: Sequence[Build],
    run: Callable[[Runner], object],
    *,
    keep_container: bool = False,
    preflight: Preflight = preflight_images,
    refused: Callable[[NightlyError], None] | None = None,
    smoke: SmokeMaker | None = None,
    on_event: EventSink | None = None,
    cancel: threading.Event | None = None,
    prepare: Prepare | None = None,
) -> str:
    """Open `executor`, preflight `builds` (when there are any), make the smoke test and the
    Runner, and hand the Runner to `run`. Returns the executor's name.

    A preflight error propagates, or with `refused` is handed to it and nothing runs (a
    cluster worker records it as the build's failure). `prepare` may give the builds another
    context once the executor is known (a build user's build area), before the preflight."""
    with make_executor(executor, ctx.config, keep_container=keep_container) as ex:
        if builds and prepare is not None:
            ctx = prepare(ctx, ex, builds)
        if builds:
            try:
                preflight(ctx, ex, builds)
            except NightlyError as e:
                if refused is None:
                    raise
                refused(e)
                return ex.name
        hook = smoke(ex) if smoke is not None else None
        run(Runner(ctx, ex, on_event=on_event, cancel=cancel, smoke=hook))
        return ex.name


__all__ = ["Preflight", "Prepare", "SmokeMaker", "preflight_images", "preflight_with_test_images",
           "run_builds"]
