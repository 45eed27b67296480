"""nightly.toml -> frozen dataclasses: defaults, normalisation, the ready configs, and every
kind of bad input with the file, key path, line and suggestion its error names."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nightly.config import DEFAULTS_PATH, Config, load, parse_duration
from nightly.config.keys import check_keys, shape_of
from nightly.config.reader import Ctx, read_defaults
from nightly.core.matrix import LIBTORCH_VARIANTS, Build
from nightly.errors import ConfigError

WriteConfig = Callable[..., Path]


# ---------------------------------------------------------------------------- a minimal config


def test_minimal_config_loads_with_defaults(minimal_config: Path, minimal_ids: list[str]) -> None:
    c = load(minimal_config)
    assert c.path == minimal_config
    assert c.project.name == "demo"
    assert c.project.branch == "main"
    assert c.project.base_version == "1.0.0"
    assert c.project.build_number == 1
    assert c.schedule_mode == "explicit"
    assert c.include == ("*",)
    assert c.exclude == ()
    assert c.retention.local_days == 5
    # Relative paths are relative to the config file, not to the working directory.
    assert c.root == minimal_config.parent / "nightlies"
    # No `recipes`: the recipes installed with nightly (here: the checkout's).
    assert c.recipes == Path(__file__).resolve().parents[2] / "recipes"
    assert [b.id for b in c.builds] == minimal_ids
    assert [(m.name, m.platform, m.queues, m.executor) for m in c.machines] == [
        ("a", "linux", 2, "local")
    ]


def test_cuda_spellings_are_normalised_on_load(minimal_config: Path) -> None:
    c = load(minimal_config)
    conda = next(m for m in c.matrices if m.package == "conda")
    assert conda.cudas == ("cpu", "cu100")  # written "cpu", "10.0"


def test_every_cuda_spelling_loads(write_config: WriteConfig, minimal_config_text: str) -> None:
    text = minimal_config_text.replace(
        'cudas = ["cpu", "cu100"]', 'cudas = ["cpu", "cu100", "cu126", "12.8", "13.0", "9.0"]'
    )
    c = load(write_config(text))
    many = next(m for m in c.matrices if m.package == "manywheel")
    assert many.cudas == ("cpu", "cu100", "cu126", "cu128", "cu130", "cu90")


def test_python_abi_spellings_load(write_config: WriteConfig, minimal_config_text: str) -> None:
    text = minimal_config_text.replace(
        'pythons = ["3.6m", "3.7m"]', 'pythons = ["2.7mu", "3.6m", "3.11", "3.13t"]'
    )
    c = load(write_config(text))
    ids = [b.id for b in c.builds if b.package == "manywheel" and b.cuda == "cpu"]
    assert ids == [
        "manywheel_2.7mu_cpu",
        "manywheel_3.6m_cpu",
        "manywheel_3.11_cpu",
        "manywheel_3.13t_cpu",
    ]


def test_config_is_frozen(minimal_config: Path) -> None:
    c = load(minimal_config)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.schedule_mode = "auto"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.project.name = "other"  # type: ignore[misc]
    assert isinstance(c.builds, tuple)
    assert isinstance(c.machines, tuple)


def test_selectors_apply_include_then_exclude(
    write_config: WriteConfig, minimal_config_text: str
) -> None:
    text = minimal_config_text + (
        '\n[selectors]\ninclude = ["manywheel_*", "conda_3.7_cpu"]\nexclude = ["*_cu100"]\n'
    )
    c = load(write_config(text))
    assert [b.id for b in c.builds] == ["manywheel_3.6m_cpu", "manywheel_3.7m_cpu", "conda_3.7_cpu"]
    assert c.include == ("manywheel_*", "conda_3.7_cpu")
    assert c.exclude == ("*_cu100",)


def test_root_override(minimal_config: Path, tmp_path: Path) -> None:
    assert load(minimal_config, root_override=str(tmp_path / "elsewhere")).root == (
        tmp_path / "elsewhere"
    )


def test_durations_timeouts_and_estimates(
    write_config: WriteConfig, minimal_config_text: str
) -> None:
    text = minimal_config_text + (
        '\n[timeouts]\ndefault = "1h30m"\nconda = 600\n\n[timeouts.macos]\ndefault = "3h"\n'
        '\n[estimates.conda]\ncpu = "20m"\ncuda = "2h"\n'
    )
    c = load(write_config(text))
    many = Build(package="manywheel", python="3.7m", cuda="cu100")
    conda_cpu = Build(package="conda", python="3.7", cuda="cpu")
    conda_gpu = Build(package="conda", python="3.7", cuda="cu100")
    wheel = Build(package="wheel", python="3.7", cuda="cpu", platform="macos")
    lt = Build(package="libtorch", python="3", cuda="cpu", variant="all")
    assert c.timeout_for(many) == 5400
    assert c.timeout_for(conda_cpu) == 600
    assert c.timeout_for(wheel) == 3 * 3600
    assert c.timeout_for(lt) == 4 * 3600 + 23 * 60 + 20  # the default libtorch timeout
    assert c.estimate_for(many) == 70 * 60  # the default CUDA estimate
    assert c.estimate_for(conda_cpu) == 20 * 60
    assert c.estimate_for(conda_gpu) == 2 * 3600
    assert c.estimate_for(lt) == 4 * 3600  # an `all` build counts its four variants


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(4800, 4800.0), (4800.5, 4800.5), ("4800", 4800.0), ("80m", 4800.0), ("1h30m", 5400.0),
     ("4h23m20s", 15800.0), ("45s", 45.0), ("2h", 7200.0), (" 1H 5M ", 3900.0)],
)
def test_parse_duration(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", [0, -5, "0", "0m", "", "abc", "1h 2x", "m", True, None, [60]])
def test_parse_duration_rejects(value: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)


# ---------------------------------------------------------------------------- bad input


def test_bad_config_error_names_file_key_line_and_hint(
    bad_config: Any, write_config: WriteConfig
) -> None:
    path = write_config(bad_config.text)
    with pytest.raises(ConfigError) as exc:
        load(path)
    e = exc.value
    assert e.exit_code == 2
    assert e.file == str(path)
    assert e.key == bad_config.key
    assert e.line == bad_config.line
    assert bad_config.message in str(e)
    if bad_config.hint is not None:
        assert e.hint is not None
        assert bad_config.hint in e.hint
    if bad_config.no_suggestion:
        assert e.hint is None
        assert "did you mean" not in str(e)
    # One line that names all of it.
    text = str(e)
    assert "\n" not in text
    where = f"{path}:{bad_config.line}" if bad_config.line else str(path)
    assert text.startswith(f"{where} [{bad_config.key}]: ")


def test_bad_configs_are_otherwise_valid(minimal_config: Path) -> None:
    # The base every bad config is an edit of loads cleanly, so each failure above is the edit's.
    assert len(load(minimal_config).builds) == 6


def test_missing_config_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="config file not found") as exc:
        load(path)
    assert exc.value.file == str(path)
    assert "NIGHTLY_CONFIG" in str(exc.value)


def test_config_path_that_is_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the config file") as exc:
        load(tmp_path)
    assert exc.value.file == str(tmp_path)


def test_config_file_that_is_not_utf8(write_config: WriteConfig, tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[project]\nname = "caf\xe9"\n')
    with pytest.raises(ConfigError, match="cannot read the config file") as exc:
        load(path)
    assert exc.value.file == str(path)


def test_invalid_toml_names_the_line(write_config: WriteConfig, minimal_config_text: str) -> None:
    path = write_config(minimal_config_text.replace('source = "."', "source = ."))
    with pytest.raises(ConfigError, match="invalid TOML") as exc:
        load(path)
    assert exc.value.line == 3
    assert str(exc.value).startswith(f"{path}:3: ")


def test_unknown_key_in_an_open_table_is_checked(
    write_config: WriteConfig, minimal_config_text: str
) -> None:
    # [executor.local.pythons] takes any Python spelling as a key, but only valid ones.
    text = minimal_config_text + '\n[executor.local.pythons]\n"3.x" = "/opt/py/bin/python"\n'
    with pytest.raises(ConfigError) as exc:
        load(write_config(text))
    assert "'3.x' is not a Python version" in str(exc.value)
    assert exc.value.key == "executor.local.pythons.3.x"


def test_defaults_pass_the_key_check_of_their_own_shape(tmp_path: Path) -> None:
    # The shape of a configuration is derived from defaults.toml: a key added there is valid
    # everywhere without touching nightly/config/keys.py.
    defaults = read_defaults(DEFAULTS_PATH)
    shape = shape_of(defaults)
    check_keys(defaults, shape, Ctx(str(DEFAULTS_PATH), ""))
    assert isinstance(shape, dict)
    assert {"matrix", "machines", *defaults} == set(shape)
    with pytest.raises(ConfigError, match="unknown key") as exc:
        check_keys({"cluster": {"adress": "tcp://x:8786"}}, shape, Ctx("x.toml", ""))
    assert exc.value.key == "cluster.adress"
    assert exc.value.hint == "did you mean 'address'?"


def test_image_placeholder_is_checked(write_config: WriteConfig, minimal_config_text: str) -> None:
    text = minimal_config_text + '\n[images.manywheel]\ndefault = "builder:{cuda_verison}"\n'
    with pytest.raises(ConfigError, match="unknown placeholder") as exc:
        load(write_config(text))
    assert exc.value.key == "images.manywheel.default"
    assert exc.value.line == 20


def test_explicit_queues_longer_than_queues(
    write_config: WriteConfig, minimal_config_text: str
) -> None:
    text = minimal_config_text + 'explicit_queues = [["conda_*"], ["manywheel_*"], ["wheel_*"]]\n'
    with pytest.raises(ConfigError, match="lists 3 explicit queues but has 2") as exc:
        load(write_config(text))
    assert exc.value.key == "machines[0].explicit_queues"
    assert exc.value.line == 18


# ---------------------------------------------------------------------------- the flat page's name


def test_flat_page_is_named_after_the_project_by_default(minimal_config: Path) -> None:
    # Issue 14 item 3: not `torch_{channel}.html` for a project called anything.
    p = load(minimal_config).publish  # [project] name = "demo", no find_links
    assert p.find_links == "{project}_{channel}.html"
    assert [p.find_links_name(ch) for ch in ("nightly", "test", "release")] == [
        "demo_nightly.html", "demo_test.html", "demo_release.html"
    ]


def test_flat_page_name_template(write_config: WriteConfig, minimal_config_text: str) -> None:
    text = minimal_config_text + '\n[publish]\nfind_links = "links-{channel}-of-{project}.html"\n'
    assert load(write_config(text)).publish.find_links_name("test") == "links-test-of-demo.html"


@pytest.mark.parametrize(
    ("template", "message"),
    [("{projet}_{channel}.html", "unknown placeholder"), ("{project}/{channel}.html", "does not name a file"),
     ("", "does not name a file")],
)
def test_flat_page_name_template_is_checked(
    write_config: WriteConfig, minimal_config_text: str, template: str, message: str
) -> None:
    text = minimal_config_text + f'\n[publish]\nfind_links = "{template}"\n'
    with pytest.raises(ConfigError, match=message) as exc:
        load(write_config(text))
    assert exc.value.key == "publish.find_links"
    assert exc.value.line == 20
    assert exc.value.hint is not None
    assert "{project}" in exc.value.hint


def test_pytorch_configs_keep_pytorchs_flat_page_name(config_2019: Path, config_modern: Path) -> None:
    for path in (config_2019, config_modern):
        assert load(path).publish.find_links_name("nightly") == "torch_nightly.html"


def test_index_command_writes_the_projects_flat_page(
    nightly: Any, write_config: WriteConfig, minimal_config_text: str, tmp_path: Path
) -> None:
    # Through the real command and a file:// mirror: the page on disk carries the name.
    mirror = tmp_path / "mirror"
    wheel = "demo-1.0.0.dev20240101+cpu-cp37-cp37m-linux_x86_64.whl"
    (mirror / "whl/nightly/cpu").mkdir(parents=True)
    (mirror / "whl/nightly/cpu" / wheel).write_bytes(b"not really a wheel")
    text = minimal_config_text + f'\n[publish]\nurl = "{mirror.as_uri()}"\n'
    r = nightly("index", "--full", "--config", str(write_config(text)))
    assert r.code == 0, r.err
    pages = sorted(p.name for p in (mirror / "whl/nightly/cpu").glob("*.html"))
    assert pages == ["demo_nightly.html", "index.html"]
    assert wheel.replace("+", "%2B") in (mirror / "whl/nightly/cpu/demo_nightly.html").read_text()


# ---------------------------------------------------------------------------- ready configs


def _ids(c: Config) -> list[str]:
    return [b.id for b in c.builds]


def test_2019_config_matches_the_reference(config_2019: Path) -> None:
    c = load(config_2019)
    assert len(c.builds) == 49
    assert c.project.base_version == "1.0.0"
    assert c.project.build_number == 1
    assert c.schedule_mode == "explicit"
    assert [(m.name, m.platform, m.queues) for m in c.machines] == [
        ("0", "linux", 5),
        ("1", "linux", 5),
        ("2", "linux", 5),
        ("mac", "macos", 4),
    ]
    assert c.retention.local_days == 5
    by_id = {b.id: b for b in c.builds}
    # libtorch is one `all` build per CUDA version, built with Python 2.7m (2.7 on the Mac).
    lt = sorted(i for i in by_id if i.startswith("libtorch_"))
    assert lt == [
        "libtorch_all_cpu",
        "libtorch_all_cpu_macos",
        "libtorch_all_cu100",
        "libtorch_all_cu80",
        "libtorch_all_cu90",
    ]
    assert by_id["libtorch_all_cu90"].python == "2.7m"
    assert by_id["libtorch_all_cpu_macos"].python == "2.7"
    # Images: conda in the all-toolkits image, CPU manywheel/libtorch in the CUDA 8.0 one.
    assert c.image_for(by_id["conda_3.7_cu100"]) == "soumith/conda-cuda"
    assert c.image_for(by_id["conda_2.7_cpu"]) == "soumith/conda-cuda"
    assert c.image_for(by_id["manywheel_3.6m_cpu"]) == "soumith/manylinux-cuda80"
    assert c.image_for(by_id["manywheel_3.6m_cu90"]) == "soumith/manylinux-cuda90"
    assert c.image_for(by_id["manywheel_2.7mu_cu100"]) == "soumith/manylinux-cuda100"
    assert c.image_for(by_id["libtorch_all_cpu"]) == "soumith/manylinux-cuda80"
    assert c.image_for(by_id["libtorch_all_cu100"]) == "soumith/manylinux-cuda100"
    # Timeouts: 4800 s on Linux, 10800 s on the Mac, 15800 s for libtorch.
    assert c.timeout_for(by_id["manywheel_3.7m_cu100"]) == 4800
    assert c.timeout_for(by_id["conda_3.5_cu80"]) == 4800
    assert c.timeout_for(by_id["wheel_3.7_cpu"]) == 10800
    assert c.timeout_for(by_id["conda_3.7_cpu_macos"]) == 10800
    assert c.timeout_for(by_id["libtorch_all_cu100"]) == 15800
    assert c.timeout_for(by_id["libtorch_all_cpu_macos"]) == 15800
    # The authors' estimates: CPU about 15 minutes, CUDA over an hour.
    assert c.estimate_for(by_id["manywheel_3.7m_cpu"]) == 15 * 60
    assert c.estimate_for(by_id["manywheel_3.7m_cu100"]) > 3600


def test_2019_config_counts_by_package(config_2019: Path) -> None:
    c = load(config_2019)
    counts: dict[tuple[str, str], int] = {}
    for b in c.builds:
        counts[(b.package, b.platform)] = counts.get((b.package, b.platform), 0) + 1
    assert counts == {
        ("manywheel", "linux"): 20,  # 5 Pythons x cpu, cu80, cu90, cu100
        ("conda", "linux"): 16,  # 4 Pythons x 4
        ("libtorch", "linux"): 4,
        ("wheel", "macos"): 4,
        ("conda", "macos"): 4,
        ("libtorch", "macos"): 1,
    }


def test_modern_config(config_modern: Path) -> None:
    c = load(config_modern)
    assert c.schedule_mode == "auto"
    pythons = ["3.10", "3.11", "3.12", "3.13", "3.14"]
    cudas = ["cpu", "cu126", "cu128", "cu130"]
    ids = _ids(c)
    assert ids == (
        [f"manywheel_{p}_{cu}" for p in pythons for cu in cudas]
        + [f"libtorch_{v}_{cu}" for cu in cudas for v in LIBTORCH_VARIANTS]
        + [f"wheel_{p}_cpu" for p in pythons]
    )
    assert len(ids) == 41
    assert {m.platform for m in c.machines} == {"linux", "macos"}
    assert all(not m.explicit_queues for m in c.machines)
    by_id = {b.id: b for b in c.builds}
    assert c.image_for(by_id["manywheel_3.12_cu126"]) == "pytorch/manylinux2_28-builder:cuda12.6"
    assert c.image_for(by_id["manywheel_3.12_cu130"]) == "pytorch/manylinux2_28-builder:cuda13.0"
    assert c.image_for(by_id["manywheel_3.12_cpu"]) == "pytorch/manylinux2_28-builder:cpu"
    assert c.image_for(by_id["libtorch_static-with-deps_cu128"]) == (
        "pytorch/libtorch-cxx11-builder:cuda12.8"
    )
    # One libtorch variant per build: its estimate is one variant's, not four.
    assert c.estimate_for(by_id["libtorch_shared-with-deps_cu126"]) == 3600


def test_index_keys_default_and_load(
    minimal_config: Path, write_config: WriteConfig, minimal_config_text: str
) -> None:
    c = load(minimal_config)
    assert (c.publish.index_shared, c.publish.index_aggregate, c.retention.index_versions) == ((), False, 0)
    assert "[publish]" not in minimal_config_text
    assert "[retention]" not in minimal_config_text
    text = minimal_config_text + (
        '\n[publish]\nindex_shared = ["whl/nightly/", "whl"]\nindex_aggregate = true\n'
        "\n[retention]\nindex_versions = 30\n"
    )
    c = load(write_config(text))
    assert c.publish.index_shared == ("whl/nightly", "whl")
    assert c.publish.index_aggregate is True
    assert c.retention.index_versions == 30
    bad = text.replace('"whl/nightly/"', '"../whl/nightly"')
    with pytest.raises(ConfigError, match="not a folder of the bucket layout") as exc:
        load(write_config(bad))
    assert exc.value.key == "publish.index_shared"
    with pytest.raises(ConfigError, match="index_versions"):
        load(write_config(text.replace("index_versions = 30", "index_versions = -1")))


def test_index_workers_defaults_to_32_and_is_checked(
    minimal_config: Path, write_config: WriteConfig, minimal_config_text: str
) -> None:
    assert load(minimal_config).publish.index_workers == 32
    text = minimal_config_text + "\n[publish]\nindex_workers = 1\n"
    assert load(write_config(text)).publish.index_workers == 1
    assert load(write_config(text.replace("= 1", "= 256"))).publish.index_workers == 256
    for bad, why in (("0", "at least 1"), ("257", "at most 256"), ('"8"', "integer"), ("true", "integer")):
        with pytest.raises(ConfigError, match=why) as exc:
            load(write_config(text.replace("= 1", f"= {bad}")))
        assert exc.value.key == "publish.index_workers"
    with pytest.raises(ConfigError, match="index_workers") as exc:
        load(write_config(text.replace("index_workers", "index_worker")))
    assert exc.value.key == "publish.index_worker"
