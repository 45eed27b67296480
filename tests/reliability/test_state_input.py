"""A state.json that is not nightly's (wrong shape, not JSON) stops the day with one line and
exit 2, kept aside as state.json.bad-<time>; it never starts the day afresh silently, and a
rebuild after a lost state never replaces a package users already have unless --rebuild."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from tests.support.projects import run_args
from tests.support.wheels import publish_toml, wheel_recipe

MATRIX = '[matrix.linux.manywheel]\npythons = ["3.8"]\ncudas = ["cpu"]\n'
WHEEL_KEY = "whl/nightly/cpu"


def _published(store: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in (store / WHEEL_KEY).glob("*.whl")}


def _one_line(code: int, err: str, expect: int = 2) -> str:
    assert code == expect, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("text", ["[]", "{}", "null", '"hello"', '{"builds": null}',
                                  '{"builds": {"manywheel_3.8_cpu": "a string"}}',
                                  "[" * 50_000 + "]" * 50_000, "{ not json"])
def test_a_state_of_the_wrong_shape_stops_the_day_and_is_kept(
    text: str, night_project: Any, run_cli: Any, tmp_path: Path
) -> None:
    store = tmp_path / "mirror"
    p = night_project(matrix=MATRIX, extra=publish_toml(store))
    (p.path / "recipes" / "manywheel" / "build.sh").write_text(wheel_recipe(p.signals))
    p.signals.joinpath("manywheel_3.8_cpu.big").write_text("64")  # random bytes: new sha each build
    code, out, err = run_cli(run_args(p.config))
    assert code == 0, (out, err)
    first = _published(store)
    assert len(first) == 1
    state = p.day / "state.json"
    state.write_text(text)
    for command in ("status", "run", "upload"):
        if not state.exists():
            state.write_text(text)
        code, out, err = run_cli(run_args(p.config, command=command))
        line = _one_line(code, err)
        assert str(state) in line, line
        assert "kept as state.json.bad-" in line, line
    kept = sorted(p.day.glob("state.json.bad-*"))
    assert kept
    assert all(k.read_text() == text for k in kept)
    # Told, the user reruns: a fresh state. The build runs again (new bytes), but the store's
    # package stays the one users have; the upload failure says how to replace it.
    code, out, err = run_cli(run_args(p.config))
    assert code == 1, (out, err)
    assert "upload(s) failed" in out + err
    assert _published(store) == first
    log = (p.day / "logs" / "master" / "run.log").read_text()
    assert "--rebuild" in log
    # Asked, it is replaced.
    code, out, err = run_cli(run_args(p.config, "--rebuild", "manywheel_3.8_cpu"))
    assert code == 0, (out, err)
    after = _published(store)
    assert after.keys() == first.keys()
    assert after != first
