"""`nightly bisect BUILD_ID`: rebuild one configuration of a night at the commits
nightly.bisect.search chooses, until the first commit that fails the night's way.

Each step is a build of the same configuration (recipe, image, CUDA, Python, executor,
compiler cache, smoke test) by the night's own machinery (nightly.builds.run.runner.Runner), in a folder
of its own laid out like a day folder: DAY/bisect/<build-id>/<commit>/ (logs/, packages/,
state.json, work/). The commit's source is checked out in DAY/bisect/<build-id>/source/, the
same path at every step, so that the compiler cache sees the same paths (its hits are the
point of bisecting with it). Nothing is published, and the night's state.json, summary.json
and packages/ are never touched: only the result is recorded, in the history.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nightly import procs
from nightly.bisect.search import (
    BAD,
    GOOD,
    SKIP,
    BisectResult,
    Step,
    append_step,
    most_builds,
    narrow,
    next_commit,
    read_steps,
)
from nightly.config import Config
from nightly.core.matrix import Build
from nightly.errors import NightlyError, UsageError
from nightly.history.triage import facts_for_day, normalise, signature
from nightly.workspace import FAILED, SUCCEEDED, Day, DayLock, State, remove_tree, write_json

Say = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class BisectOptions:
    good: str | None = None
    bad: str | None = None
    all_commits: bool = False
    dry_run: bool = False
    deadline: float | None = None  # epoch seconds: stop starting steps after it ([notify] budget)


@dataclass(frozen=True, kw_only=True)
class Target:
    """What is bisected: the night's build, its failure's signature, the commit range."""

    build: Build
    executor: str
    signature: str  # "" when any failure counts as bad
    good: str
    bad: str
    candidates: tuple[str, ...]  # oldest first; the last is BAD


def git(repo: Path, *args: str, timeout_s: float) -> str:
    """A git command of the bisect: [external_timeouts] bisect_git is `timeout_s`."""
    return procs.git(*args, cwd=repo, timeout=timeout_s, purpose="bisect")


def _resolve(repo: Path, commit: str, what: str, timeout_s: float) -> str:
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}",
                   timeout_s=timeout_s)
    except NightlyError as e:
        raise UsageError(f"{what} '{commit}' is not a commit of {repo}: pass a commit of the "
                         "night's source (git log there lists them)") from e


def target_of(config: Config, day: Day, build_id: str, opts: BisectOptions) -> Target:
    """The build, signature and range to bisect, checked; bad input raises UsageError."""
    state = State(day.state_path)
    if build_id not in state:
        known = ", ".join(sorted(state.builds)) or "none"
        raise UsageError(f"no build '{build_id}' in {day.state_path} (builds: {known}): "
                         "pass a build id of that night, or another --date")
    entry = state.get(build_id)
    repo = day.source
    if not (repo / ".git").exists():
        raise UsageError(f"the source of {day.name} ({repo}) is a plain folder, not a git "
                         "checkout: set project.source to a git repository to bisect")
    from nightly.history.db import History, history_path

    facts = facts_for_day(day, History(history_path(config.root)),
                          timeouts=config.external_timeouts).get(build_id)
    if facts is None and (opts.good is None or opts.bad is None) and entry.status != FAILED:
        raise UsageError(f"{build_id} did not fail on {day.name} ({entry.status or 'not run'}): "
                         "nothing to bisect; pass --good and --bad to bisect anyway")
    good = opts.good or (facts.last_good_commit if facts else None)
    bad = opts.bad or (facts.first_bad_commit if facts else None) or state.meta.commit
    if not good:
        raise UsageError(f"{build_id} has no good night in the history: pass --good COMMIT "
                         "(a commit at which it built)")
    wait = config.external_timeouts.bisect_git
    good, bad = _resolve(repo, good, "--good", wait), _resolve(repo, bad, "--bad", wait)
    try:
        git(repo, "merge-base", "--is-ancestor", good, bad, timeout_s=wait)
    except NightlyError as e:
        raise UsageError(f"--good {good[:12]} is not an ancestor of --bad {bad[:12]}: pass an "
                         "older good commit of the same branch") from e
    walk = [] if opts.all_commits else ["--first-parent"]
    listed = git(repo, "rev-list", "--reverse", *walk, f"{good}..{bad}", timeout_s=wait).split()
    if not listed:
        raise UsageError(f"no commit between --good {good[:12]} and --bad {bad[:12]}: pass a "
                         "good commit older than the bad one")
    # A build that did not fail that night (bisected with --good and --bad): any failure is bad.
    sig = facts.signature if facts else (_signature_of(day, build_id) if entry.status == FAILED else "")
    return Target(build=_build_of(config, build_id, entry.package, entry.python, entry.cuda,
                                  entry.variant),
                  executor=entry.executor or "", signature=sig, good=good, bad=bad,
                  candidates=tuple(listed))


def _signature_of(day: Day, build_id: str) -> str:
    log = day.final_log(build_id)
    text = log.read_text(errors="replace") if log else ""
    return signature(text, build_id) if text else normalise("failed")


def _build_of(config: Config, build_id: str, package: str, python: str, cuda: str,
              variant: str) -> Build:
    for b in config.builds:
        if b.id == build_id:
            return b
    b = Build(package=package, python=python, cuda=cuda, variant=variant)
    if not package or b.id != build_id:
        raise UsageError(f"{build_id} is not in the configuration's matrix any more: bisect "
                         "with the configuration of that night (--config)")
    return b


def bisect(config: Config, day: Day, build_id: str, opts: BisectOptions, say: Say = print,
           machine: str | None = None) -> BisectResult | None:
    """Run (or resume) the bisect of one failed build of a night; None for a dry run."""
    t = target_of(config, day, build_id, opts)
    folder = day.path / "bisect" / build_id
    cands = t.candidates
    say(f"bisecting {build_id} of {day.name}: {len(cands)} commits {t.good[:12]}..{t.bad[:12]}"
        f" ({'every commit' if opts.all_commits else 'first parents'}), at most "
        f"{most_builds(len(cands))} builds without skips; bad = fails with: "
        f"{t.signature or 'any error'}")
    if opts.dry_run:
        first = next_commit(cands, {})
        for c in cands:
            mark = "  <- first build" if c == first else ("  (bad: the night's)" if c == t.bad else "")
            line = git(day.source, "log", "-1", "--format=%h %s", c,
                       timeout_s=config.external_timeouts.bisect_git)
            say(f"  {line}{mark}")
        return None
    with DayLock(folder / "bisect.lock").acquire("bisect"):
        return _search(config, day, t, folder, opts, say, machine)


def _search(config: Config, day: Day, t: Target, folder: Path, opts: BisectOptions, say: Say,
            machine: str | None) -> BisectResult:
    done = {s.commit: s for s in read_steps(folder) if s.commit in t.candidates}
    verdicts = {c: s.verdict for c, s in done.items()}
    verdicts[t.bad] = BAD
    result = BisectResult(build_id=t.build.id, day=day.name, good=t.good, bad=t.bad,
                          signature=t.signature)
    builder: StepBuilder | None = None
    n = 0
    for step in done.values():  # replayed, in the order they were built
        n += 1
        say(f"step {n}: {step.commit[:12]} {step.verdict} (finished earlier: {step.log})")
        result.steps.append(step)
    while (commit := next_commit(t.candidates, verdicts)) is not None:
        n += 1
        if opts.deadline is not None and time.time() > opts.deadline:
            result.status = "budget spent"
            break
        builder = builder or StepBuilder(config, day, t, folder, machine)
        subject = git(day.source, "log", "-1", "--format=%s", commit,
                      timeout_s=config.external_timeouts.bisect_git)
        say(f"step {n}: building {commit[:12]} {subject!r} ...")
        step = builder.run(commit)
        append_step(folder, step)
        result.builds += 1
        say(f"step {n}: {commit[:12]} {step.verdict}"
            + (f" (fails differently: {step.signature})" if step.verdict == SKIP else "")
            + f", {step.duration_s:.1f} s, log {step.log}")
        result.steps.append(step)
        verdicts[commit] = step.verdict
    _conclude(day.source, t, verdicts, result, config.external_timeouts.bisect_git)
    write_json(folder / "result.json", result.to_json())
    say(result.line())
    return result


def _conclude(repo: Path, t: Target, verdicts: dict[str, str], result: BisectResult,
              timeout_s: float) -> None:
    nb = narrow(t.candidates, verdicts)
    if nb.found:
        c = t.candidates[nb.bad]
        result.first_bad = c
        result.subject, result.author, result.date = git(
            repo, "log", "-1", "--format=%s%x00%an <%ae>%x00%aI", c,
            timeout_s=timeout_s).split("\x00")
        result.status = "found"
    else:
        result.range = list(t.candidates[nb.good + 1 : nb.bad + 1])
        if result.status == "running":
            result.status = "narrowed"


def step_config(config: Config, build_id: str) -> Config:
    """The configuration of a bisect's steps: the night's, with a compiler cache of the
    bisect's own (a folder or prefix beside the machine's). Why: sccache's preprocessor cache
    mode checks the headers a cached compile read at the paths they had then; with the
    nights' source folders stripped from keys (basedirs), an entry of an earlier night whose
    headers are still on disk at that night's path answers for a commit whose headers differ
    (a stale object: a bad commit judged good). The steps all build in one checkout, so the
    entries of the bisect's own cache check the headers of the commit being built."""
    c = config.cache
    if not c.enabled:
        return config
    own = f"bisect-{build_id}"
    cache = (dataclasses.replace(c, url=f"{c.url.rstrip('/')}/{own}") if c.url
             else dataclasses.replace(c, dir=c.dir / own))
    return dataclasses.replace(config, cache=cache)


class StepBuilder:
    """Builds the target at one commit in DAY/bisect/<build-id>/<commit>/ with the Runner."""

    def __init__(self, config: Config, day: Day, t: Target, folder: Path,
                 machine: str | None) -> None:
        config = step_config(config, t.build.id)
        self.config, self.day, self.t, self.folder = config, day, t, folder
        self.machine = machine or ""
        self.source = folder / "source"
        meta = State(day.state_path).meta
        self.version = meta.version
        self.channel = meta.channel_name

    def checkout(self, commit: str) -> None:
        wait = self.config.external_timeouts.bisect_git
        if not (self.source / ".git").exists():
            if self.source.exists():
                remove_tree(self.source)
            git(self.folder, "clone", "--quiet", "--shared", "--no-checkout",
                str(self.day.source), str(self.source), timeout_s=wait)
        git(self.source, "checkout", "--quiet", "--force", "--detach", commit, timeout_s=wait)
        git(self.source, "clean", "-qfdx", timeout_s=wait)

    def run(self, commit: str) -> Step:
        from nightly.builds.run.jobs import RunContext
        from nightly.builds.session.build_session import SessionSpec, open_session
        from nightly.builds.test.smoke import night_smoke

        sandbox = Day(self.folder, self.day.date, name=commit)
        sandbox.create()
        state = State(sandbox.state_path)
        finished = self._finished(sandbox, state)
        if finished is not None:
            return finished  # built before a kill, its verdict not yet written
        state.mark_stale_running()
        self.checkout(commit)
        wheelhouse = self.day.path / "wheelhouse"
        if wheelhouse.is_dir() and not (sandbox.path / "wheelhouse").exists():
            (sandbox.path / "wheelhouse").symlink_to(wheelhouse, target_is_directory=True)
        ctx = RunContext(config=self.config, day=sandbox, state=state, source_dir=self.source,
                         version=self.version, channel=self.channel, machine=self.machine)
        executor = self.t.executor or (self.config.machines[0].executor if self.config.machines
                                       else "local")
        source = self.source
        # The night's session: the build user's area and the stable build folder where this
        # host configures them (builds/session.py).
        spec = SessionSpec(executor=executor, stamp=commit,
                           smoke=lambda ex: night_smoke(self.config, ex, source))
        with open_session(ctx, [self.t.build], spec) as builds:
            assert builds is not None  # no `refused`: a refusal raises
            builds.runner().run_build(self.t.build)
        found = self._finished(sandbox, State(sandbox.state_path))
        if found is None:  # interrupted (Ctrl-C): no verdict
            raise KeyboardInterrupt
        return found

    def _finished(self, sandbox: Day, state: State) -> Step | None:
        entry = state.get(self.t.build.id)
        if entry.status not in (SUCCEEDED, FAILED) or not entry.log:
            return None
        log = sandbox.path / entry.log
        rel = str(log.relative_to(self.day.path))
        if entry.status == SUCCEEDED:
            return Step(commit=sandbox.name, verdict=GOOD, log=rel,
                        duration_s=entry.duration_s or 0.0)
        sig = signature(log.read_text(errors="replace"), self.t.build.id) if log.exists() else ""
        same = not self.t.signature or sig == self.t.signature
        return Step(commit=sandbox.name, verdict=BAD if same else SKIP,
                    signature=sig, log=rel, duration_s=entry.duration_s or 0.0)


def record(config: Config, result: BisectResult) -> None:
    """The result in the history, for the report and `nightly status`."""
    import sqlite3

    from nightly.history.db import History, history_path

    try:
        History(history_path(config.root)).record_bisect(result.day, result.build_id,
                                                         result.to_json())
    except (sqlite3.Error, OSError) as e:
        raise NightlyError(f"could not record the bisect in the history: {e}") from e
