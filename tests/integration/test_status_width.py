"""Piped output (cron's mail, `| less`) is not cut at 80 columns: `nightly status` and the
night's table show a long build id whole on one line and the failure reason's key words, and
an untested build says so."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.support.projects import DATE
from tests.support.tables import unfold_tables
from tests.support.wheels import hand_wheel_recipe

WHY = ("ERROR: the wheel cannot meet the manylinux policy manylinux_2_28_x86_64 "
       '(toolchain = "zig" (C/C++, not CUDA) reaches manylinux_2_17); auditwheel: too-recent '
       "versioned symbols")
RECIPE = hand_wheel_recipe(
    before=f'if [ "$DESIRED_PYTHON" = 3.12 ]; then echo {WHY!r} >&2; exit 1; fi\n',
    version='os.environ["BUILD_VERSION"]', body='f"__version__ = {v!r}\\n"')
MATRIX = '\n[matrix.linux.manywheel]\npythons = ["3.11", "3.12"]\ncudas = ["cpu"]\n'
EXTRA = '\n[smoke]\nenabled = false\n'


def test_piped_tables_keep_ids_and_reasons_whole(
    night_project: Callable[..., Any], run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    p = night_project(matrix=MATRIX, recipes={"manywheel": RECIPE}, extra=EXTRA)
    code, out, err = run_cli(["run", "--config", str(p.config), "--date", DATE], cwd=p.path,
                             timeout=300)
    assert code == 1, out + err
    code, status, err = run_cli(["status", "--config", str(p.config), "--date", DATE],
                                cwd=p.path)
    assert code == 1, err
    for text in (out, status):
        rows = {line.split()[1]: line for line in unfold_tables(text).splitlines()
                if line.startswith("│ manywheel_")}
        assert set(rows) == {"manywheel_3.11_cpu", "manywheel_3.12_cpu"}, text
        # The reason folds at the table's width, never cut: the fix is in the build's row.
        assert 'the manylinux policy manylinux_2_28_x86_64 (toolchain = "zig"' in rows[
            "manywheel_3.12_cpu"], text
        assert "…" not in text
        assert "succeeded (untested)" in rows["manywheel_3.11_cpu"], text
