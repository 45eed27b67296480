"""One build session: every way to run builds sets them up here.

The night's local phase (builds.local_phase), a cluster worker (cluster.worker), a bisect step
(bisect.run), and through the night `nightly build`, `nightly release`, `--check-reproducible`
and `verify --rebuild` all open their builds with `open_session`, from the configuration and
the day (a RunContext) and what the caller says (SessionSpec). The session holds the executor
(and a machine's per-architecture executors), the build user's build area
(builds/userarea.py, with nightly's Python staged: builds/toolstage.py), the stable build
folder (builds/slot.py), the compiler cache's settings, the smoke tests, and makes the Runner
with the caller's event sink. Callers differ only in which builds they run and where the
results go.
"""

from __future__ import annotations

import secrets
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from nightly.builds.area import slot, toolstage, userarea
from nightly.builds.cache import wiring as compiler_cache
from nightly.builds.cache.wiring import CacheSettings
from nightly.builds.run.jobs import RunContext, make_job
from nightly.builds.run.runner import EventSink, Runner, SmokeHook
from nightly.core.matrix import Build
from nightly.errors import ExecutorError, NightlyError, UsageError
from nightly.executors import Executor, make_executor
from nightly.executors.local import LocalExecutor, NotFound

# (the run's context, the executor, the builds about to run): raises NightlyError when this
# executor cannot run them here (a missing image, an unreachable engine).
Preflight = Callable[[RunContext, Executor, Sequence[Build]], None]
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
    tests run in another image, at that image too (nightly.builds.test.smoke.preflight_jobs)."""
    from nightly.builds.test.smoke import preflight_jobs

    ex.preflight([job for b in builds
                  for job in preflight_jobs(ctx.config, b, make_job(ctx, b, executor=ex.name))])


@dataclass(frozen=True, kw_only=True)
class SessionSpec:
    """What a caller says about its builds' session."""

    executor: str  # the executor's name
    arch_executors: Mapping[str, str] = field(default_factory=dict)  # arch -> another executor
    keep_container: bool = False
    stable: bool = True  # the stable build folder (same paths every night: cache hits)
    # Where under the usual place this session's stable folder is ("": there itself); a
    # cluster worker gives each of its slots one (`slots/N`), as they build side by side.
    stable_under: str = ""
    stamp: str = ""  # what the source is (a commit): the build area's copy is kept while equal
    smoke: SmokeMaker | None = None
    preflight: Preflight = preflight_images
    log: Callable[[str], None] = lambda line: None  # a line into the night's log


@dataclass(kw_only=True)
class BuildSession:
    """Builds set up: run them with `runner()`."""

    ctx: RunContext  # the day, the state, the source, the build area and stable folder
    executor: Executor
    by_arch: dict[str, tuple[Executor, SmokeHook | None]]
    smoke: SmokeHook | None
    cache: CacheSettings  # the compiler cache as the builds use it

    def runner(self, on_event: EventSink | None = None,
               cancel: threading.Event | None = None) -> Runner:
        return Runner(self.ctx, self.executor, on_event=on_event, cancel=cancel,
                      smoke=self.smoke, by_arch=self.by_arch)


def where(ctx: RunContext, ex: Executor) -> RunContext:
    """Where `ex` would run the builds, nothing made (a dry run)."""
    if isinstance(ex, LocalExecutor) and ex.user is not None:
        area = _area(ctx, ex)
        return replace(ctx, area=area, slot=area.days / slot.NAME)
    if isinstance(ex, LocalExecutor):
        return replace(ctx, slot=ctx.config.root / slot.NAME)
    return ctx


@contextmanager
def open_session(ctx: RunContext, builds: Sequence[Build], spec: SessionSpec, *,
                 refused: Callable[[NightlyError], None] | None = None,
                 ) -> Iterator[BuildSession | None]:
    """The session of `builds` (None when the preflight refused them and `refused` took the
    error: a cluster worker records it as the build's failure; without `refused` it raises).
    Executors closed, the stable folder released when the block ends."""
    with ExitStack() as stack:
        ex = stack.enter_context(make_executor(spec.executor, ctx.config,
                                               keep_container=spec.keep_container))
        others = {name: stack.enter_context(make_executor(
            name, ctx.config, keep_container=spec.keep_container))
            for name in sorted({spec.arch_executors[b.target_arch] for b in builds
                                if b.target_arch in spec.arch_executors})}
        mine = [b for b in builds if b.target_arch not in spec.arch_executors]
        if builds:
            try:
                ctx = _prepare(ctx, ex, others, mine, spec, stack)
                for name, e in ((ex.name, ex), *others.items()):
                    group = [b for b in builds
                             if (spec.arch_executors.get(b.target_arch) or ex.name) == name]
                    if group:
                        spec.preflight(ctx, e, group)
            except NightlyError as e:
                if refused is None:
                    raise
                refused(e)
                yield None
                return
        smoke = spec.smoke
        settings = compiler_cache.settings_of(ctx.config)
        yield BuildSession(
            ctx=ctx, executor=ex, smoke=smoke(ex) if smoke else None,
            by_arch={a: (others[e], smoke(others[e]) if smoke else None)
                     for a, e in spec.arch_executors.items() if e in others},
            cache=ctx.area.cache_settings(settings) if ctx.area else settings)


def _prepare(ctx: RunContext, ex: Executor, others: Mapping[str, Executor],
             mine: Sequence[Build], spec: SessionSpec, stack: ExitStack) -> RunContext:
    """The context the builds run in: a build user's area, else (local) the stable folder."""
    for e in (ex, *others.values()) if others else ():
        if isinstance(e, LocalExecutor) and e.user is not None:  # one area for all
            raise UsageError(
                f"machine {ctx.machine}: a build user ([executor.local] user) cannot be "
                "combined with per-architecture executors (its build area holds every "
                "build's inputs): remove the machine's executors, or the build user")
    if mine and isinstance(ex, LocalExecutor) and ex.user is not None:
        return user_area(ctx, ex, mine, spec, stack)  # exit 2 here: a path out of its reach
    if isinstance(ex, LocalExecutor) and spec.stable:
        return stable_slot(ctx, _under(ctx.config.root, spec.stable_under), ctx.source_dir,
                           spec.log, stack)
    return ctx


def stable_slot(ctx: RunContext, base: Path, source: Path, log: Callable[[str], None],
                stack: ExitStack) -> RunContext:
    """The builds run in `base`'s slot (builds/slot.py: the same paths every night, so the
    compiler cache serves one night's objects to the next), held until `stack` closes; in
    the day folder when another night holds it."""
    held = slot.claim(base, stack)
    if held is None:
        log(f"the stable build folder {base / slot.NAME} is in use by another night (or "
            "not nightly's): this night builds in its day folder, and its compiles are "
            "not served from other nights' objects")
        return ctx
    try:
        slot.fill(held, source)
    except OSError as e:
        raise ExecutorError(f"cannot prepare the stable build folder {held}: {e} (free space "
                            "there)") from e
    return replace(ctx, slot=held)


def _under(base: Path, under: str) -> Path:
    """`base / under`, each folder between made readable by all (a build user reaches it)."""
    folder = base
    for part in Path(under).parts:
        folder = folder / part
        try:
            folder.mkdir(mode=0o755, parents=True, exist_ok=True)
            if not folder.is_symlink():
                folder.chmod(0o755)
        except OSError:
            pass  # slot.claim finds it unusable: the day folder then
    return folder


def _area(ctx: RunContext, ex: LocalExecutor) -> userarea.BuildArea:
    assert ex.user is not None
    config = ctx.config
    return userarea.area_for(config.local.build_dir, ex.user, ctx.day.name,
                             project=config.project.name, nightlies=ctx.day.root)


def user_area(ctx: RunContext, ex: LocalExecutor, todo: Sequence[Build], spec: SessionSpec,
              stack: ExitStack) -> RunContext:
    """The build area for the build user (builds/userarea.py): made, filled with the day's
    copies and nightly's Python, and every path a build needs checked against its reach."""
    assert ex.user is not None
    config = ctx.config
    file = str(config.path) if config.path else None
    area = _area(ctx, ex)
    userarea.make_root(area, file)
    ctx = replace(ctx, area=area)
    jobs = [make_job(ctx, b, executor=ex.name) for b in todo]
    settings = area.cache_settings(compiler_cache.settings_of(config))
    wheelhouse = ctx.day.path / "wheelhouse"
    try:
        userarea.forget_old_days(area, ctx.day.root)
        userarea.stage(
            area, source=ctx.source_dir, stamp=spec.stamp or secrets.token_hex(8),  # "": copied
            recipes=config.recipes,
            wheelhouse=wheelhouse if config.build.wheelhouse else None,
            sccache=compiler_cache.find_sccache() if settings.enabled else None,
            cache=settings, jobs=jobs)
        # nightly's Python and the tools beside it, where the user reaches them.
        staged = toolstage.stage_python(area.root / "python", ex.usable)
        ctx = replace(ctx, area=replace(area, python=staged))
    except NotFound as e:
        raise ExecutorError(f"cannot stage nightly's Python for {ex.user.name}: {e} (install "
                            f"python{sys.version_info[0]}.{sys.version_info[1]} where it can "
                            "run it, e.g. /usr/bin, or nightly in a venv outside private "
                            "homes)") from e
    except OSError as e:
        raise ExecutorError(f"cannot prepare the build area {area.root} for {ex.user.name}: "
                            f"{e} (free space there, or set [executor.local] build_dir)") from e
    if spec.stable:
        assert ctx.area is not None
        ctx = stable_slot(ctx, _under(ctx.area.days, spec.stable_under), ctx.area.source,
                          spec.log, stack)
    jobs = [make_job(ctx, b, executor=ex.name) for b in todo]
    userarea.preflight(jobs, user=ex.user, pythons=ex.pythons, cuda=ex.cuda,
                       cache=area.cache_settings(settings), config_file=file,
                       usable=ex.usable)
    return ctx


__all__ = ["BuildSession", "Preflight", "SessionSpec", "SmokeMaker", "open_session",
           "preflight_images", "preflight_with_test_images", "stable_slot", "user_area", "where"]
