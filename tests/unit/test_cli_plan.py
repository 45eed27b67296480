"""`nightly plan` through the real command line: output shape, filters, exit codes, every bad
input's message, tracebacks only with --debug, help, and determinism across processes."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

WriteConfig = Callable[..., Path]
Run = Callable[..., Any]


def _json(run: Run, *args: str) -> dict[str, Any]:
    r = run("plan", "--json", *args)
    assert r.code == 0, r.err
    assert r.err == ""
    data = json.loads(r.out)
    assert isinstance(data, dict)
    return data


# ---------------------------------------------------------------------------- help


def test_help(nightly: Run) -> None:
    r = nightly("--help")
    assert r.code == 0
    assert "plan" in r.out
    assert "Exit codes" in r.out


def test_plan_help_lists_the_options(nightly: Run) -> None:
    r = nightly("plan", "--help")
    assert r.code == 0
    for option in ("--json", "--machine", "--select", "--config", "--root", "--date", "--debug"):
        assert option in r.out


def test_help_as_a_console_script_and_as_a_module(nightly_process: Run) -> None:
    for command in (None, [sys.executable, "-m", "nightly"]):
        p = nightly_process(["--help"], command=command)
        assert p.returncode == 0, p.stderr
        assert "Usage:" in p.stdout
        assert "plan" in p.stdout


def test_help_does_not_import_heavy_modules(nightly_process: Run) -> None:
    p = nightly_process(["--help"], command=[sys.executable, "-X", "importtime", "-m", "nightly"])
    assert p.returncode == 0
    imported = {line.rsplit("|", 1)[-1].strip() for line in p.stderr.splitlines()}
    assert "nightly.cli.main" in imported
    heavy = ("rich", "boto3", "docker", "dask", "distributed", "cryptography")
    for name in (*heavy, "nightly.config", "nightly.plan.schedule", "nightly.cluster"):
        assert name not in imported


@pytest.mark.parametrize(
    "module", ["nightly.builds.run.runner", "nightly.cluster.worker", "nightly.night.pipeline"]
)
def test_the_build_phase_loads_no_heavy_library(module: str) -> None:
    """A Runner and a Dask worker load neither rich nor the cloud and container clients:
    they are imported where they are used."""
    heavy = "{'rich', 'boto3', 'docker', 'dask', 'cryptography'}"
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy}))"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "[]"


def test_unknown_option_is_a_usage_error(nightly: Run, config_2019: Path) -> None:
    r = nightly("plan", "--config", str(config_2019), "--jsno")
    assert r.code == 2
    assert "--jsno" in r.err
    assert "Traceback" not in r.err


# ---------------------------------------------------------------------------- output


def test_plan_json_shape(nightly: Run, config_2019: Path) -> None:
    data = _json(nightly, "--config", str(config_2019), "--date", "2019_01_31")
    assert {"builds", "machines", "makespan_s", "lower_bound_s", "date", "version"} <= set(data)
    assert len(data["builds"]) == 49
    for b in data["builds"]:
        assert {"id", "package", "python", "cuda", "machine", "queue", "estimate_s", "start_s",
                "end_s"} <= set(b)
        assert b["end_s"] == b["start_s"] + b["estimate_s"]
    assert [m["name"] for m in data["machines"]] == ["0", "1", "2", "mac"]
    for m in data["machines"]:
        assert {"name", "platform", "queues", "makespan_s", "lower_bound_s"} <= set(m)
        assert m["makespan_s"] == max(q["finish_s"] for q in m["queues"])
        assert m["lower_bound_s"] <= m["makespan_s"]
        for q in m["queues"]:
            assert {"index", "finish_s", "builds"} <= set(q)
    # The builds list and the machines' queues say the same thing.
    placed = {
        i: (m["name"], q["index"]) for m in data["machines"] for q in m["queues"] for i in q["builds"]
    }
    assert placed == {b["id"]: (b["machine"], b["queue"]) for b in data["builds"]}


def test_plan_text_output(nightly: Run, config_2019: Path) -> None:
    r = nightly("plan", "--config", str(config_2019), "--date", "2019_01_31")
    assert r.code == 0, r.err
    out = r.out
    assert "1.0.0.dev20190131" in out
    assert "2019_01_31" in out
    for name in ("machine 0", "machine 1", "machine 2", "machine mac"):
        assert name in out
    assert "libtorch_all_cu90" in out
    assert "makespan 8:00:00" in out  # machine 0: two 4-hour libtorch builds in one queue
    assert "lower bound 4:00:00" in out
    assert "49 builds" in out


def test_default_date_is_today(nightly: Run, config_2019: Path) -> None:
    before = dt.date.today()
    data = _json(nightly, "--config", str(config_2019))
    after = dt.date.today()
    assert data["version"] in {f"1.0.0.dev{d:%Y%m%d}" for d in (before, after)}
    assert data["date"] in {f"{d:%Y_%m_%d}" for d in (before, after)}


# ---------------------------------------------------------------------------- filters


def test_machine_by_name(nightly: Run, config_2019: Path) -> None:
    full = _json(nightly, "--config", str(config_2019))
    one = _json(nightly, "--config", str(config_2019), "--machine", "1")
    assert [m["name"] for m in one["machines"]] == ["1"]
    assert one["machines"][0] == full["machines"][1]
    assert {b["machine"] for b in one["builds"]} == {"1"}
    assert len(one["builds"]) == 13
    assert one["builds"] == [b for b in full["builds"] if b["machine"] == "1"]


def test_machine_text_output(nightly: Run, config_2019: Path) -> None:
    r = nightly("plan", "--config", str(config_2019), "--machine", "1")
    assert r.code == 0, r.err
    assert "machine 1" in r.out
    assert "machine 0" not in r.out
    assert "manywheel_3.6m_cu80" in r.out
    assert "manywheel_2.7m_cu80" not in r.out
    assert "13 builds" in r.out


def test_machine_by_index(nightly: Run, config_2019: Path) -> None:
    # The 2019 machines are named "0", "1", "2", "mac": "0" is a name, "3" an index.
    assert [m["name"] for m in _json(nightly, "--config", str(config_2019), "--machine", "0")[
        "machines"
    ]] == ["0"]
    mac = _json(nightly, "--config", str(config_2019), "--machine", "3")
    assert [m["name"] for m in mac["machines"]] == ["mac"]
    assert len(mac["builds"]) == 9


def test_machine_name_wins_over_index(
    nightly: Run, write_config: WriteConfig, minimal_config_text: str
) -> None:
    text = minimal_config_text.replace('name = "a"', 'name = "1"') + (
        '\n[[machines]]\nname = "0"\nplatform = "linux"\nqueues = 1\n'
    )
    path = str(write_config(text))
    assert [m["name"] for m in _json(nightly, "--config", path, "--machine", "0")["machines"]] == [
        "0"
    ]
    assert [m["name"] for m in _json(nightly, "--config", path, "--machine", "1")["machines"]] == [
        "1"
    ]


def test_machine_shares_partition_the_plan(nightly: Run, config_2019: Path) -> None:
    full = _json(nightly, "--config", str(config_2019))
    ids: list[str] = []
    for index, name in enumerate(["0", "1", "2", "mac"]):
        share = _json(nightly, "--config", str(config_2019), "--machine", str(index))
        assert share["machines"] == [m for m in full["machines"] if m["name"] == name]
        ids += [b["id"] for b in share["builds"]]
    assert len(ids) == len(set(ids)) == 49
    assert sorted(ids) == sorted(b["id"] for b in full["builds"])


def test_unknown_machine(nightly: Run, config_2019: Path) -> None:
    r = nightly("plan", "--config", str(config_2019), "--machine", "mca")
    assert r.code == 2
    assert "no machine 'mca'" in r.err
    assert "did you mean 'mac'?" in r.err
    assert str(config_2019) in r.err


def test_select(nightly: Run, config_2019: Path) -> None:
    full = _json(nightly, "--config", str(config_2019))
    sel = _json(nightly, "--config", str(config_2019), "--select", "conda_*_cu100",
                "--select", "libtorch_*")
    assert sorted(b["id"] for b in sel["builds"]) == sorted(
        ["conda_2.7_cu100", "conda_3.5_cu100", "conda_3.6_cu100", "conda_3.7_cu100",
         "libtorch_all_cpu", "libtorch_all_cu80", "libtorch_all_cu90", "libtorch_all_cu100",
         "libtorch_all_cpu_macos"]
    )
    by_id = {b["id"]: b for b in full["builds"]}
    for b in sel["builds"]:
        assert b == by_id[b["id"]]  # same machine, queue and times as in the whole plan


def test_select_and_machine(nightly: Run, config_2019: Path) -> None:
    data = _json(nightly, "--config", str(config_2019), "--machine", "2", "--select", "*_cu100")
    assert [b["id"] for b in data["builds"]] == [
        "conda_3.5_cu100",
        "conda_3.6_cu100",
        "conda_3.7_cu100",
        "libtorch_all_cu100",
    ]


def test_select_matching_nothing(nightly: Run, config_2019: Path) -> None:
    r = nightly("plan", "--config", str(config_2019), "--select", "manywheel_3.8m_*")
    assert r.code == 3  # README: 3 nothing selected
    assert "--select 'manywheel_3.8m_*' matches no build" in r.err
    assert "near misses: manywheel_3." in r.err
    assert "Traceback" not in r.err
    assert r.out == ""


def test_nothing_selected_exits_3(nightly: Run, config_2019: Path) -> None:
    r = nightly("plan", "--config", str(config_2019), "--machine", "mac", "--select", "manywheel*")
    assert r.code == 3
    assert "nothing selected on machine 'mac'" in r.err
    assert "Traceback" not in r.err


# ---------------------------------------------------------------------------- dates


def test_date_sets_the_version(nightly: Run, config_2019: Path) -> None:
    data = _json(nightly, "--config", str(config_2019), "--date", "2026_02_28")
    assert data["version"] == "1.0.0.dev20260228"
    assert data["date"] == "2026_02_28"


@pytest.mark.parametrize(
    ("date", "message"),
    [
        ("2026_02_30", "is not a real date"),
        ("2026_13_01", "is not a real date"),
        ("yesterday", "write YYYY_MM_DD"),
        ("2019-01-31", "write YYYY_MM_DD"),
        ("20190131", "write YYYY_MM_DD"),
    ],
)
def test_bad_dates(nightly: Run, config_2019: Path, date: str, message: str) -> None:
    r = nightly("plan", "--config", str(config_2019), "--date", date)
    assert r.code == 2
    assert f"--date '{date}'" in r.err
    assert message in r.err
    assert "Traceback" not in r.err
    assert r.out == ""


# ---------------------------------------------------------------------------- bad configs


def test_bad_config_through_the_cli(nightly: Run, bad_config: Any, write_config: WriteConfig) -> None:
    path = write_config(bad_config.text)
    r = nightly("plan", "--config", str(path))
    assert r.code == 2
    assert r.out == ""
    assert "Traceback" not in r.err
    where = f"{path}:{bad_config.line}" if bad_config.line else str(path)
    assert f"{where} [{bad_config.key}]: " in r.err
    assert bad_config.message in r.err
    if bad_config.hint:
        assert bad_config.hint in r.err
    if bad_config.no_suggestion:
        assert "did you mean" not in r.err
    assert len(r.err.strip().splitlines()) == 1  # one message


def test_debug_shows_the_traceback(nightly: Run, bad_config: Any, write_config: WriteConfig) -> None:
    path = write_config(bad_config.text)
    r = nightly("plan", "--config", str(path), "--debug")
    assert r.code == 2
    assert "Traceback (most recent call last)" in r.err
    assert "ConfigError" in r.err
    assert bad_config.message in r.err


def test_debug_is_the_option_not_a_word_anywhere(
    nightly: Run, bad_config: Any, write_config: WriteConfig
) -> None:
    """--debug as the value of another option is that option's value, not --debug."""
    path = write_config(bad_config.text)
    r = nightly("plan", "--config", str(path), "--select", "--debug")
    assert r.code == 2
    assert "Traceback" not in r.err


def test_missing_config_file(nightly: Run, tmp_path: Path) -> None:
    path = tmp_path / "missing.toml"
    r = nightly("plan", "--config", str(path))
    assert r.code == 2
    assert f"{path}: config file not found" in r.err
    assert "Traceback" not in r.err


def test_config_path_is_a_directory(nightly: Run, tmp_path: Path) -> None:
    r = nightly("plan", "--config", str(tmp_path))
    assert r.code == 2
    assert f"{tmp_path}: cannot read the config file" in r.err
    assert "Traceback" not in r.err


def test_config_file_is_not_utf8(nightly: Run, tmp_path: Path) -> None:
    path = tmp_path / "nightly.toml"
    path.write_bytes(b"\xff\xfe[project]\n")
    r = nightly("plan", "--config", str(path))
    assert r.code == 2
    assert f"{path}: cannot read the config file" in r.err
    assert "utf-8" in r.err
    assert "Traceback" not in r.err


def test_invalid_toml(nightly: Run, write_config: WriteConfig, minimal_config_text: str) -> None:
    path = write_config(minimal_config_text + "\n[selectors\ninclude = []\n")
    r = nightly("plan", "--config", str(path))
    assert r.code == 2
    assert f"{path}:19: invalid TOML" in r.err
    assert "Traceback" not in r.err


def test_misspelt_matrix_table_is_named_not_reported_as_an_empty_matrix(
    nightly_process: Run, write_config: WriteConfig, minimal_config_text: str
) -> None:
    # Issue 14 item 2: every [matrix.linux.*] table typed [matirx.linux.*].
    text = minimal_config_text.replace("[matrix.", "[matirx.")
    assert "[matrix." not in text
    path = write_config(text, "bad.toml")
    p = nightly_process(["plan", "--config", str(path)])
    assert p.returncode == 2, p.stderr
    assert p.stdout == ""
    assert f"{path}:6 [matirx]: unknown key" in p.stderr
    assert "did you mean 'matrix'?" in p.stderr
    assert "empty" not in p.stderr
    assert "Traceback" not in p.stderr


def test_default_config_is_nightly_toml_in_the_working_directory(
    nightly: Run,
    minimal_config: Path,
    minimal_ids: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NIGHTLY_CONFIG", raising=False)
    monkeypatch.chdir(minimal_config.parent)
    data = _json(nightly)
    assert sorted(b["id"] for b in data["builds"]) == sorted(minimal_ids)


def test_config_from_the_environment(
    nightly: Run, config_2019: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no nightly.toml here
    monkeypatch.setenv("NIGHTLY_CONFIG", str(config_2019))
    assert len(_json(nightly)["builds"]) == 49
    monkeypatch.delenv("NIGHTLY_CONFIG")
    r = nightly("plan")
    assert r.code == 2
    assert "nightly.toml: config file not found" in r.err


# ---------------------------------------------------------------------------- the modern config


def test_modern_config_plans(nightly: Run, config_modern: Path) -> None:
    data = _json(nightly, "--config", str(config_modern), "--date", "2026_11_21")
    assert data["version"] == "2.13.0.dev20261121"
    ids = {b["id"] for b in data["builds"]}
    assert len(ids) == 41
    for p in ("3.10", "3.11", "3.12", "3.13", "3.14"):
        assert {f"manywheel_{p}_{c}" for c in ("cpu", "cu126", "cu128", "cu130")} <= ids
        assert f"wheel_{p}_cpu" in ids
    for v in ("shared-with-deps", "shared-without-deps", "static-with-deps", "static-without-deps"):
        assert {f"libtorch_{v}_{c}" for c in ("cpu", "cu126", "cu128", "cu130")} <= ids
    assert not any(b["explicit"] for b in data["builds"])
    assert data["makespan_s"] <= 4 / 3 * data["lower_bound_s"]
    mac = _json(nightly, "--config", str(config_modern), "--machine", "mac-0")
    assert {b["id"] for b in mac["builds"]} == {f"wheel_3.1{i}_cpu" for i in range(5)}


# ---------------------------------------------------------------------------- real processes


def test_plan_is_identical_across_processes(nightly_process: Run, config_2019: Path,
                                            config_modern: Path) -> None:
    for path in (config_2019, config_modern):
        args = ["plan", "--json", "--config", str(path), "--date", "2019_01_31"]
        outs = [
            nightly_process(args, env={"PYTHONHASHSEED": seed}) for seed in ("0", "1", "12345")
        ]
        assert all(p.returncode == 0 for p in outs), [p.stderr for p in outs]
        assert outs[0].stdout == outs[1].stdout == outs[2].stdout
        assert json.loads(outs[0].stdout)["builds"]


def test_machine_share_in_its_own_process_matches_the_whole_plan(
    nightly_process: Run, config_2019: Path
) -> None:
    base = ["plan", "--json", "--config", str(config_2019), "--date", "2019_01_31"]
    full = json.loads(nightly_process(base).stdout)
    share = json.loads(nightly_process([*base, "--machine", "1"]).stdout)
    assert share["machines"] == [m for m in full["machines"] if m["name"] == "1"]


def test_end_to_end_bad_config(
    nightly_process: Run, write_config: WriteConfig, minimal_config_text: str
) -> None:
    path = write_config(minimal_config_text.replace("queues = 2", "quues = 2"))
    p = nightly_process(["plan", "--config", str(path)])
    assert p.returncode == 2
    assert p.stdout == ""
    assert f"{path}:17 [machines[0].quues]: unknown key (did you mean 'queues'?)" in p.stderr
    assert "Traceback" not in p.stderr
    p = nightly_process(["plan", "--config", str(path), "--debug"])
    assert p.returncode == 2
    assert "Traceback (most recent call last)" in p.stderr


def test_end_to_end_exit_codes(nightly_process: Run, config_2019: Path, tmp_path: Path) -> None:
    c = str(config_2019)
    assert nightly_process(["plan", "--config", c, "--machine", "1"]).returncode == 0
    assert nightly_process(["plan", "--config", str(tmp_path / "none.toml")]).returncode == 2
    assert nightly_process(["plan", "--config", c, "--date", "yesterday"]).returncode == 2
    assert nightly_process(["plan", "--config", c, "--select", "nothing_*"]).returncode == 3
    assert (
        nightly_process(["plan", "--config", c, "--machine", "mac", "--select", "manywheel*"])
        .returncode == 3
    )


def test_a_one_build_plan_says_one_build_and_what_the_machine_builds(
    nightly: Run, config_2019: Path
) -> None:
    """Issue 57: `nightly plan` said "1 builds", and a machine without a GPU "cpu, cuda"
    as if it had one (it builds CUDA binaries; it need not run them)."""
    r = nightly("plan", "--config", str(config_2019), "--date", "2019_01_31",
                "--select", "manywheel_3.7m_cpu")
    assert r.code == 0, r.err
    assert "1 build;" in r.out
    assert "1 builds" not in r.out
    assert "builds cpu, cuda" in r.out
