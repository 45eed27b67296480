"""Signing is a step of the night of its own (issue 58): the night calls it once with the
packages it signs, each signed for the sha256 it carries from take-back (issue 59: the bytes
are not read again there), and publishing publishes what it signed without calling into it."""

from __future__ import annotations

import ast
import datetime as dt
import hashlib
import io
import os
from pathlib import Path
from typing import Any

import pytest

from nightly import config as cfg
from nightly import provenance
from nightly.provenance import attest, signed
from nightly.publish.upload import publish_day
from nightly.workspace import SUCCEEDED, Day, PackageFile, State

REPO = Path(__file__).resolve().parents[2]
WHEEL = "demo-1.0.0.dev20240501-py3-none-any.whl"
BID = "manywheel_3.12_cpu"


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def test_publishing_never_calls_into_the_signing_step_and_the_night_calls_it_once() -> None:
    for path in sorted((REPO / "nightly" / "publish").glob("*.py")):
        assert "nightly.provenance.attest" not in _imports(path), path.name
    calls = [n for n in ast.walk(ast.parse((REPO / "nightly/night/pipeline.py").read_text()))
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and isinstance(n.func.value, ast.Name) and n.func.value.id == "attest"]
    assert [c.func.attr for c in calls if isinstance(c.func, ast.Attribute)] == ["sign_packages"]


def _day(tmp_path: Path, text: str) -> tuple[cfg.Config, Day, State, Path]:
    priv, _pub = provenance.keygen(tmp_path / "keys")
    mirror = tmp_path / "mirror"
    path = tmp_path / "nightly.toml"
    path.write_text(text + f'\n[provenance]\nkey = "{priv}"\n\n[publish]\nurl = '
                    f'"{mirror.as_uri()}"\n')
    config = cfg.load(path, root_override=str(tmp_path / "root"))
    day = Day(config.root, dt.date(2024, 5, 1))
    day.create()
    state = State(day.state_path)
    f = day.package_dir("manywheel", "cpu") / WHEEL
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(b"the bytes tested")
    pkg = PackageFile(name=WHEEL, path=str(f.relative_to(day.path)), size=f.stat().st_size,
                      sha256=hashlib.sha256(f.read_bytes()).hexdigest())
    state.update(BID, status=SUCCEEDED, package="manywheel", python="3.12", cuda="cpu",
                 packages=[pkg])
    return config, day, state, mirror


def test_the_step_signs_the_carried_sha256_and_publishing_puts_exactly_that_beside(
    tmp_path: Path, minimal_config_text: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    config, day, state, mirror = _day(tmp_path, minimal_config_text)
    todo = signed.to_sign(config, state)
    assert [(t.build_id, t.package.name) for t in todo] == [(BID, WHEEL)]
    carried = todo[0].package.sha256
    package = day.path / todo[0].package.path
    real_os_open, real_io_open = os.open, io.open

    def os_open(path: str | Path, *args: int) -> int:
        assert Path(path) != package, "the signing step read the package's bytes again"
        return real_os_open(path, *args)

    def io_open(path: str | Path | int, *args: Any, **kwargs: Any) -> Any:
        assert isinstance(path, int) or Path(path) != package, "the package read again"
        return real_io_open(path, *args, **kwargs)

    lines: list[str] = []
    with monkeypatch.context() as m:  # a file is opened with os.open or io.open (Path.open)
        m.setattr(os, "open", os_open)
        m.setattr(io, "open", io_open)
        sigs = attest.sign_packages(config, day, state, todo, commit="c0ffee",
                                    source_dir=tmp_path / "no-source", channel="nightly",
                                    builds=[], log=lines.append)
    bundle = sigs.of(WHEEL, carried)
    assert bundle is not None
    assert provenance.verify(WHEEL, carried, bundle, sigs.public_key).ok
    assert "provenance: 1 package(s) signed" in lines
    # Signed once: a second call keeps nightly's own signature and signs nothing.
    again = attest.sign_packages(config, day, state, todo, commit="c0ffee",
                                 source_dir=tmp_path / "no-source", channel="nightly",
                                 builds=[], log=lines.append)
    assert again.of(WHEEL, carried) == bundle
    assert lines[-1] == "provenance: 0 package(s) signed"

    report = publish_day(config, day, state, channel="nightly", log=lines.append,
                         signatures=sigs)
    assert report.ok, report.failed
    beside = mirror / "whl/nightly/cpu" / (WHEEL + provenance.SUFFIX)
    assert beside.read_bytes() == bundle
    # `nightly upload` on its own reads the same signatures from the day folder.
    assert signed.on_disk(config, day, state).of(WHEEL, carried) == bundle


def test_a_package_changed_after_signing_is_not_uploaded_nor_is_anything_signed_for_it(
    tmp_path: Path, minimal_config_text: str,
) -> None:
    config, day, state, mirror = _day(tmp_path, minimal_config_text)
    todo = signed.to_sign(config, state)
    sigs = attest.sign_packages(config, day, state, todo, commit="c0ffee",
                                source_dir=tmp_path / "no-source", channel="nightly",
                                builds=[], log=lambda _: None)
    package = day.path / todo[0].package.path
    package.write_bytes(b"other bytes")
    report = publish_day(config, day, state, channel="nightly", log=lambda _: None,
                         signatures=sigs)
    assert not report.ok
    [why] = report.failed.values()
    assert f"{WHEEL} changed since it was built" in why
    assert not (mirror / "whl/nightly/cpu" / WHEEL).exists()
    # The signature names the bytes tested, never the changed ones.
    other = hashlib.sha256(b"other bytes").hexdigest()
    assert sigs.of(WHEEL, other) is None
    bundle = sigs.of(WHEEL, todo[0].package.sha256)
    assert bundle is not None
    assert not provenance.verify(WHEEL, other, bundle, sigs.public_key).ok
