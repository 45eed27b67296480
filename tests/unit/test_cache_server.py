"""A build's sccache server on local disk starts at the build's first compile (issue 59: what
a build pays before its recipe runs): a build that compiles nothing starts none and records
zero compiles; parallel first compiles start one server, which every compile then uses and
which is stopped when the recipe ends. The real sccache and the host's cc."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from nightly.builds.cache import wiring as cc
from nightly.executors.base import Job

PARALLEL = 4


def _job(tmp_path: Path) -> Job:
    work = tmp_path / "day" / "work" / "manywheel_3.12_cpu"
    (work / "scratch").mkdir(parents=True)
    src = tmp_path / "src"
    src.mkdir()
    for i in range(PARALLEL):
        (src / f"f{i}.c").write_text(f"int f{i}(void) {{ return {i}; }}\n")
    plain = Job(build_id="manywheel_3.12_cpu", package="manywheel", python="3.12", cuda="cpu",
                env={}, recipes_dir=tmp_path / "recipes", source_dir=src,
                output_dir=work / "out", work_dir=work / "scratch", timeout_s=600)
    job, note = cc.attach(cc.CacheSettings(dir=tmp_path / "cache", size="1G"), plain)
    assert note is None, note
    return job


def _run(job: Job, recipe: str) -> str:
    assert isinstance(job.cache, cc.BuildCache)
    script = job.work_dir / "recipe.sh"
    script.write_text(recipe)
    env = {"PATH": os.environ["PATH"], "HOME": str(job.work_dir), "SOURCE_DIR": str(job.source_dir),
           "WORK_DIR": str(job.work_dir), **job.cache.env(container=False)}
    done = subprocess.run(job.cache.command(str(script), container=False), env=env,
                          cwd=job.work_dir, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _servers(socket: str) -> list[int]:
    """sccache processes still alive with this build's socket in their environment."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and socket.encode() in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_a_build_that_compiles_nothing_starts_no_server_and_records_zero_compiles(
    tmp_path: Path,
) -> None:
    job = _job(tmp_path)
    assert isinstance(job.cache, cc.BuildCache)
    out = _run(job, "echo nothing to compile\n")
    assert "compiler cache: sccache" in out
    assert "its server started by the first compile" in out
    assert not (job.cache.tools / "server.start").exists()
    assert not (job.cache.tools / "server.log").exists()
    stats = cc.read_stats(job)
    assert stats is not None
    assert (stats.off, stats.requests, stats.hits, stats.misses) == (None, 0, 0, 0)


def test_parallel_first_compiles_start_one_server_used_by_all_and_stopped_at_the_end(
    tmp_path: Path,
) -> None:
    job = _job(tmp_path)
    assert isinstance(job.cache, cc.BuildCache)
    compile_all = ('cd "$WORK_DIR"\nfor f in "$SOURCE_DIR"/*.c; do\n'
                   '    "$CC" -c "$f" -o "$(basename "$f" .c).o" &\ndone\nwait\n'
                   'ls "$WORK_DIR"/*.o | wc -l\n')
    out = _run(job, compile_all)
    assert out.strip().splitlines()[-1] == str(PARALLEL)
    assert (job.cache.tools / "server.start").is_dir()
    assert not (job.cache.tools / "server.failed").exists()
    first = cc.read_stats(job)
    assert first is not None
    assert first.off is None
    assert (first.requests, first.misses) == (PARALLEL, PARALLEL)  # one server saw them all
    assert not Path(job.cache.socket).exists()
    assert _servers(job.cache.socket) == []  # stopped with the build
    # The same compiles again (a fresh build folder, the same store): all hits.
    cc.finish(job, lambda **_f: None)
    again = _job(tmp_path / "again")
    assert isinstance(again.cache, cc.BuildCache)
    _run(again, compile_all)
    second = cc.read_stats(again)
    assert second is not None
    assert second.requests == PARALLEL
