"""The rows run_all.py's table shows for each benchmark, read from the JSON it wrote
(benchmarks/results/<name>.json): name -> a function of that JSON (ROWS).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Row = list[object]


def _get(data: Any, *path: Any) -> Any:
    for k in path:
        if isinstance(data, dict):
            data = data.get(k)
        elif isinstance(data, list) and isinstance(k, int) and k < len(data):
            data = data[k]
        else:
            return None
    return data


def _find(items: Any, key: str, value: str) -> Any:
    for item in items or []:
        if isinstance(item, dict) and item.get(key) == value:
            return item
    return None


def _num(v: Any, digits: int = 3) -> object:
    return round(v, digits) if isinstance(v, (int, float)) and not isinstance(v, bool) else "n/a"


def rows_schedule(d: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    for config, label in (("2019 auto", "2019 matrix, automatic schedule"),
                          ("2019 explicit", "2019 matrix, queues as written in 2019"),
                          ("modern auto", "modern matrix, automatic schedule")):
        s = _find(d.get("schedules"), "config", config)
        out.append(["schedule", f"{label}: measured makespan (h) / lower bound (h)",
                    _num(_get(s, "measured_makespan_h")), _num(_get(s, "lower_bound_h")),
                    _num(_get(s, "measured_ratio")), "lower is better; 1.0 is optimal"])
    out.append(["schedule", "2019: automatic / as written (measured makespan)", "", "",
                _num(_get(d, "auto_over_explicit_2019", "measured")), "lower is better"])
    o = d.get("overhead") or {}
    out.append(["schedule", f"{o.get('builds', '?')} no-op builds: runner (s) / bash spawned directly (s)",
                _num(o.get("runner_s")), _num(o.get("direct_s")), _num(o.get("runner_time_over_direct")),
                f"{_num(o.get('overhead_ms_per_build'), 1)} ms per build of orchestration"])
    return out


def rows_container(d: dict[str, Any]) -> list[Row]:
    ex = _get(d, "results", "executor", "median_s")
    pr = _get(d, "results", "podman_run", "median_s")
    dk = _get(d, "results", "docker_cli_run", "median_s")
    out: list[Row] = [["container", "no-op build: ContainerExecutor (s) / podman run --rm (s)", _num(ex),
                       _num(pr), _num(d.get("ratio_executor_to_podman_run")), "lower is better; medians"]]
    if isinstance(ex, (int, float)) and isinstance(dk, (int, float)) and dk:
        out.append(["container", "no-op build: ContainerExecutor (s) / docker run --rm (s)", _num(ex),
                    _num(dk), _num(ex / dk), "same API socket"])
    return out


def rows_index(d: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    naive = _get(d, "phases", "naive", "seconds")
    for phase in ("full/cold", "full/warm", "incremental"):
        secs = _get(d, "phases", phase, "seconds")
        out.append(["index", f"{d.get('objects', '?')} objects, `nightly index` {phase} (s) against list + "
                    "HEAD each (s): speed-up", _num(secs), _num(naive),
                    _num(_get(d, "ratios_vs_naive", phase, "speed"), 2),
                    f"higher is better; {_get(d, 'ratios_vs_naive', phase, 'requests')}x fewer requests"])
    return out


def rows_index_peer(d: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    for row in d.get("table") or []:
        out.append(["index_peer", f"{row.get('wheels')} wheels, {row.get('run')}: nightly (s) / "
                    "test-infra manage_v2.py (s)", _num(row.get("nightly s")), _num(row.get("peer s")),
                    _num(row.get("s ratio")),
                    f"lower is better; requests {row.get('nightly req')} / {row.get('peer req')} = "
                    f"{row.get('req ratio')}"])
    for r in d.get("results") or []:
        for pages, per in (r.get("clients") or {}).items():
            for client, res in per.items():
                out.append(["index_peer", f"{r.get('wheels')} wheels: {client} resolves torch from "
                            f"{pages}'s pages (s)", _num(res.get("seconds")), "", "",
                            f"ok={res.get('ok')}, {(res.get('gets') or {}).get('metadata', 0)} metadata "
                            f"GETs, {(res.get('gets') or {}).get('wheel', 0)} wheel GETs"])
    return out


def rows_cluster(d: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    for run in d.get("runs") or []:
        out.append(["cluster", f"{run.get('builds')} builds on {run.get('workers')} workers, "
                    f"{run.get('scenario')}: measured (h) / lower bound (h)",
                    _num(run.get("measured_makespan_h")), _num(run.get("lower_bound_h")),
                    _num(run.get("measured_over_lower_bound")),
                    "lower is better"])
    plan = d.get("plan") or {}
    out.append(["cluster", "make_plan of 1,000 builds (ms)", _num(plan.get("make_plan_ms"), 1), "", "",
                "planning time"])
    return out


def rows_gpu_tests(d: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    for run in d.get("runs") or []:
        out.append(["gpu_tests", f"{run.get('scenario')}: makespan (h) / lower bound (h)",
                    _num(run.get("makespan_h")), _num(run.get("lower_bound_h")),
                    _num(run.get("makespan_over_bound")), "goal <= 1.05"])
    runs = d.get("runs") or [{}, {}]
    out.append(["gpu_tests", "GPU-host seconds: old gpu_smoke / test stage",
                _num(runs[0].get("gpu_host_s"), 0), _num(runs[-1].get("gpu_host_s"), 0),
                _num(d.get("gpu_host_s_today_over_test_stage"), 2), "goal >= 5"])
    return out


def rows_cluster_tls(d: dict[str, Any]) -> list[Row]:
    med, st = d.get("median_s") or {}, d.get("staging") or {}
    return [
        ["cluster_tls", "client connect: tls:// (s) / tcp:// (s)", _num(_get(med, "tls", "connect")),
         _num(_get(med, "tcp", "connect")), _num(_get(d, "ratio_tls_to_tcp", "connect")),
         "lower is better; once per night"],
        ["cluster_tls", f"{d.get('tasks', '?')} task round trips: tls:// (s) / tcp:// (s)",
         _num(_get(med, "tls", "trips")), _num(_get(med, "tcp", "trips")),
         _num(_get(d, "ratio_tls_to_tcp", "trips")), "lower is better"],
        ["cluster_tls", f"{d.get('package_mb', '?')} MB package: sha256 (s) / copy (s)",
         _num(st.get("sha256_s")), _num(st.get("copy_s")), _num(st.get("ratio_hash_to_copy")),
         "the hash state.json records, checked against the worker's"],
    ]


def rows_staging_store(d: dict[str, Any]) -> list[Row]:
    med, r = d.get("median_s") or {}, d.get("ratio") or {}
    return [
        ["staging_store", f"{d.get('package_mb', '?')} MB package: get(max_bytes) / copyfile (s)",
         _num(med.get("get")), _num(med.get("copyfile")), _num(r.get("get_to_copyfile")),
         "lower is better; no symlink followed, capped"],
        ["staging_store", f"list {d.get('files_listed', '?')} files: store / os.walk (s)",
         _num(med.get("list")), _num(med.get("os_walk")), _num(r.get("list_to_os_walk")),
         "lower is better"],
        ["staging_store", f"{d.get('log_mb', '?')} MiB log: read back, scrubbed / read (s)",
         _num(med.get("staged_log")), _num(med.get("read_log")), _num(r.get("staged_log_to_read")),
         "once per build, at most this size"],
    ]


def rows_cli(d: dict[str, Any]) -> list[Row]:
    med = d.get("median_s") or {}
    base = d.get("baseline", "?")
    return [["cli", f"start-up: nightly --help (s) / {base} (s)", _num(med.get("nightly --help"), 4),
             _num(med.get(base), 4), _num(d.get("ratio_nightly_to_baseline")),
             f"lower is better; python -c pass {_num(med.get('python -c pass'), 4)} s"]]


def rows_images(d: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    for name, b in (d.get("builders") or {}).items():
        for layer, t in (b.get("times") or {}).items():
            size = _get(b, "sizes", layer, "image_mb")
            layer_mb = _get(b, "sizes", layer, "layer_mb")
            out.append(["images", f"{name}:{layer} image: cold build (s) / warm (present) (s)",
                        _num(t.get("cold_s"), 1), _num(t.get("warm_s")),
                        _num(t["cold_s"] / t["warm_s"], 0) if t.get("cold_s") and t.get("warm_s")
                        else "n/a",
                        f"{size} MB image, {layer_mb} MB layer; rebuild from caches "
                        f"{_num(t.get('rebuild_s'), 1)} s"])
        out.append(["images", f"{name}: stored once (MB) / sum of image sizes (MB)",
                    _get(b, "sizes", "stored_once_mb"), _get(b, "sizes", "sum_of_images_mb"),
                    _num((_get(b, "sizes", "stored_once_mb") or 0)
                         / (_get(b, "sizes", "sum_of_images_mb") or 1)),
                    "layers shared over one base"])
    n = d.get("night")
    if n:
        out.append(["images", f"demo CUDA night, {n.get('builds')} builds: sum of build times (s) / "
                    "wall time (s)", _num(n.get("sum_of_builds_s"), 1), _num(n.get("wall_s"), 1),
                    _num(n.get("speedup"), 2), f"parallel speed-up; {n.get('succeeded')} succeeded"])
    return out


def rows_cache(d: dict[str, Any]) -> list[Row]:
    a, four = d.get("night_a") or {}, d.get("four_pythons") or {}
    return [
        ["cache", "night, next day after a one-file commit / cold (s)",
         _num(_get(a, "warm", "wall_s"), 1), _num(_get(a, "cold", "wall_s"), 1),
         _num(a.get("warm_over_cold")),
         f"goal <= 0.3; hit rates {_num(_get(a, 'cold', 'hit_rate'), 2)} / "
         f"{_num(_get(a, 'warm', 'hit_rate'), 2)}"],
        ["cache", f"{len(_get(d, 'workload', 'pythons') or [1] * 4)} Pythons sharing a C++"
         f"{'' if _get(d, 'workload', 'cuda') == 'cpu' else '/CUDA'} core: cache / no cache (s)",
         _num(_get(four, "cache", "wall_s"), 1), _num(_get(four, "no_cache", "wall_s"), 1),
         _num(four.get("cache_over_no_cache")),
         f"goal <= 0.5; hit rate {_num(_get(four, 'cache', 'hit_rate'), 2)}"],
    ]


def rows_masking(d: dict[str, Any]) -> list[Row]:
    return [["masking", f"{d.get('mb', '?')} MB of build output into its log: masked for "
             f"{d.get('secrets', '?')} secrets (s) / unmasked (s)", _num(d.get("masked_s")),
             _num(d.get("plain_s")), _num(d.get("ratio_masked_to_plain")),
             f"lower is better; {d.get('masked_mb_s', '?')} MB/s masked"]]
def rows_provenance(d: dict[str, Any]) -> list[Row]:
    med = d.get("median_s") or {}
    return [["provenance", f"night of {d.get('builds')} builds x {d.get('size_mb')} MB: with signed "
             "provenance (s) / without (s)", _num(med.get("with"), 2), _num(med.get("without"), 2),
             _num(d.get("ratio_with_to_without")), f"lower is better; medians of {d.get('runs')}"]]


def rows_bisect(d: dict[str, Any]) -> list[Row]:
    return [["bisect", "bisect of 64 commits: with cache / without (s)",
             _num(_get(d, "cache", "wall_s"), 1), _num(_get(d, "no_cache", "wall_s"), 1),
             _num(d.get("cache_over_no_cache")),
             f"lower is better; {_get(d, 'cache', 'builds')} builds, hit rate "
             f"{_num(_get(d, 'cache', 'hit_rate'), 2)}"]]
def rows_toolchain(d: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    for name, p in (d.get("projects") or {}).items():
        rows.append(["toolchain", f"{name} manywheels: sysroot toolchain / plain gcc, sum of "
                     "builds (s)", _num(p.get("sysroot_builds_s"), 1),
                     _num(p.get("plain_builds_s"), 1), _num(p.get("sysroot_over_plain")),
                     "lower is better; compiler cache off"])
        rows.append(["toolchain", f"{name} CPU manywheels: zig / plain gcc, sum of builds (s)",
                     _num(p.get("zig_builds_s"), 1), "", _num(p.get("zig_over_plain_cpu")),
                     "lower is better; zig's cache warm"])
    for name, t in (d.get("toolchains") or {}).items():
        rows.append(["toolchain", f"{name} toolchain assembled cold (s), size (MB)",
                     _num(t.get("cold_s"), 1), _num(t.get("size_mb"), 1), "", "once per cache"])
    return rows


def rows_progress(d: dict[str, Any]) -> list[Row]:
    med, ratio = d.get("median_ms_per_build") or {}, d.get("ratio_to_none") or {}
    return [["progress", f"night of {d.get('builds')} stand-in builds: {mode} / no display "
             "(ms a build)", _num(med.get(mode), 1), _num(med.get("none"), 1),
             _num(ratio.get(mode)), f"lower is better; medians of {d.get('rounds')}"]
            for mode in ("plain", "live")]


def rows_procs(d: dict[str, Any]) -> list[Row]:
    t, b = d.get("take_back") or {}, d.get("per_build") or {}
    return [
        ["procs", "package taken back (adopted, hashed once) and filed / hash and rename "
         "(s per GB)", _num(t.get("taken_s_per_gb")), _num(t.get("baseline_s_per_gb")),
         _num(t.get("ratio")), "lower is better; goal <= 1.5"],
        ["procs", "package taken back (copied: an open writer) and filed / hash and rename "
         "(s per GB)", _num(t.get("copy_s_per_gb")), _num(t.get("baseline_s_per_gb")),
         _num(t.get("copy_ratio")), "the fallback"],
        ["procs", "trivial recipe in its own cgroup / without (s)", _num(b.get("boxed_s")),
         _num(b.get("plain_s")), _num(b.get("ratio")), "the per-build cost of confinement"],
    ]


def rows_history_year(d: dict[str, Any]) -> list[Row]:
    at, n = d.get("at") or {}, d.get("nights")
    out: list[Row] = []
    for what in ("open", "estimates", "facts"):
        for name in ("kept", "pruned"):
            first, last = _get(at, f"{name}@30", what), _get(at, f"{name}@{n}", what)
            ratio = last / first if isinstance(first, float) and isinstance(last, float) and first else None
            out.append(["history_year", f"{what}, history {name}: night {n} / night 30 (s)",
                        _num(last, 4), _num(first, 4), _num(ratio), "near 1: flat"])
    out.append(["history_year", "record one build: held connection / one per call (ms)",
                _num(d.get("record_ms_held")), _num(d.get("record_ms_per_call")),
                _num((d.get("record_ms_held") or 0) / (d.get("record_ms_per_call") or 1)),
                "lower is better"])
    return out


ROWS: dict[str, Callable[[dict[str, Any]], list[Row]]] = {
    "schedule": rows_schedule, "container": rows_container, "index": rows_index,
    "cluster": rows_cluster, "gpu_tests": rows_gpu_tests, "cache": rows_cache, "cli": rows_cli,
    "images": rows_images,
    "index_peer": rows_index_peer, "cluster_tls": rows_cluster_tls,
    "staging_store": rows_staging_store, "bisect": rows_bisect,
    "masking": rows_masking,
    "toolchain": rows_toolchain, "provenance": rows_provenance, "progress": rows_progress,
    "procs": rows_procs, "history_year": rows_history_year,
}
