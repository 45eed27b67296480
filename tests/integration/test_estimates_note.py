"""The first night's estimates are a guess, and it says so (issue 50, point 5): `nightly
plan` and the night's first lines name [estimates] and say that later nights learn from the
history; once a night has run, the plan and the next night say their estimates come from the
project's past nights. With history_estimates = "never" neither promises that."""

from __future__ import annotations

import json

from tests.support.fixture_types import MakeProject, RunCli
from tests.support.projects import Project, run_args

MATRIX = """
[matrix.linux.manywheel]
pythons = ["3.8", "3.9"]
cudas = ["cpu"]
"""
GUESS = "estimates are a guess ([estimates] in the config): no history yet"
LEARN = "later nights estimate from them"
PAST = "estimates from this project's past nights"


def _plan(run_cli: RunCli, p: Project, *extra: str) -> tuple[int, str]:
    code, out, err = run_cli(run_args(p.config, *extra, command="plan"), cwd=p.path)
    assert code == 0, (out, err)
    return code, out


def test_the_first_night_says_its_estimates_are_a_guess_and_later_ones_learn(night_project: MakeProject,
                                                                             run_cli: RunCli) -> None:
    p = night_project(matrix=MATRIX, queues=1)
    _, out = _plan(run_cli, p)
    assert GUESS in out, out
    assert LEARN in out
    assert PAST not in out
    _, out = _plan(run_cli, p, "--json")
    assert json.loads(out)["estimates"]["from_history"] == 0

    code, out, err = run_cli(run_args(p.config), cwd=p.path)
    assert code == 0, (out, err)
    first = out.splitlines()[:6]
    assert any(GUESS in line and LEARN in line for line in first), out

    _, out = _plan(run_cli, p)
    assert PAST in out, out
    assert GUESS not in out
    _, out = _plan(run_cli, p, "--json")
    assert json.loads(out)["estimates"]["from_history"] == 2

    code, out, err = run_cli(["run", "--config", str(p.config), "--date", "2024_05_02"],
                             cwd=p.path)
    assert code == 0, (out, err)
    first = out.splitlines()[:6]
    assert any(PAST in line for line in first), out
    assert GUESS not in out


def test_a_build_new_to_the_history_is_counted_as_a_guess(
    night_project: MakeProject, run_cli: RunCli
) -> None:
    p = night_project(matrix=MATRIX, queues=1)
    code, out, err = run_cli(run_args(p.config), cwd=p.path)
    assert code == 0, (out, err)
    p.config.write_text(p.config.read_text().replace('["3.8", "3.9"]', '["3.8", "3.9", "3.10"]'))
    _, out = _plan(run_cli, p)
    assert "estimates: 2 of 3 builds from this project's past nights, the other 1 a guess " \
           "from [estimates]" in " ".join(out.split()), out


def test_estimates_that_never_use_the_history_promise_no_learning(
    night_project: MakeProject, run_cli: RunCli
) -> None:
    p = night_project(matrix=MATRIX, queues=1, extra='[schedule]\nhistory_estimates = "never"\n')
    _, out = _plan(run_cli, p)
    assert "estimates from [estimates] in the config (history_estimates" in out, out
    assert LEARN not in out
    code, out, err = run_cli(run_args(p.config), cwd=p.path)
    assert code == 0, (out, err)
    assert LEARN not in out
    assert "estimates from [estimates] in the config" in out
